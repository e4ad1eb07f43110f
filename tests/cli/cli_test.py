"""End-to-end tests of the `deltakv` binary: real files, real zstd frames, exit codes, and
interoperability with the documented Python writer and the plain numpy reader.

Run: python3 tests/cli/cli_test.py --deltakv build/sidecar/deltakv
"""
import argparse, filecmp, json, os, re, shutil, subprocess, sys, tempfile, unittest
import numpy as np, zstandard

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "python", "examples")
DELTAKV = None


def run(*args, expect=0):
    # Output may quote names that are not UTF-8 as they are.
    p = subprocess.run([DELTAKV, *args], capture_output=True, text=True, errors="surrogateescape")
    if p.returncode != expect:
        raise AssertionError(f"deltakv {' '.join(args)}: exit {p.returncode}, wanted {expect}\n"
                             f"stdout: {p.stdout}\nstderr: {p.stderr}")
    return p


def read(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


def write(path, data):
    with open(path, "wb" if isinstance(data, (bytes, bytearray)) else "w") as f:
        f.write(data)


# Mounts a tmpfs of $1 at $2 in a private mount namespace, runs the rest of the arguments with
# stdout/stderr/exit code captured in files next to the mount point, then lists what is left
# under the mount (the namespace, and with it the mount, goes away when the shell exits).
SMALL_FS_SCRIPT = r"""
size=$1 mnt=$2; shift 2
mount -t tmpfs -o size="$size",mode=0755 deltakv-test "$mnt" || exit 97
"$@" >"$mnt.stdout" 2>"$mnt.stderr"
echo $? >"$mnt.rc"
(cd "$mnt" && find . -mindepth 1) >"$mnt.left"
"""
_small_fs_prefix = None


def small_fs_prefix():
    """The command prefix that lets SMALL_FS_SCRIPT mount a tmpfs, or raises SkipTest."""
    global _small_fs_prefix
    if _small_fs_prefix is not None:
        return _small_fs_prefix
    if shutil.which("unshare") is None:
        raise unittest.SkipTest("needs unshare(1) (util-linux) to mount a small tmpfs")
    candidates = [["unshare", "--mount"]] if os.geteuid() == 0 else []
    candidates.append(["unshare", "--mount", "--map-root-user"])
    errors = []
    with tempfile.TemporaryDirectory(prefix="deltakv-fs-probe-") as d:
        for prefix in candidates:
            p = subprocess.run([*prefix, "sh", "-c", 'mount -t tmpfs -o size=64k probe "$1"',
                                "sh", d], capture_output=True, text=True)
            if p.returncode == 0:
                _small_fs_prefix = prefix
                return prefix
            errors.append(f"{' '.join(prefix)}: {p.stderr.strip() or 'exit %d' % p.returncode}")
    raise unittest.SkipTest("cannot mount a small tmpfs (needs root or unprivileged user "
                            "namespaces): " + "; ".join(errors))


def run_on_small_fs(size, mnt, *args, command=None):
    """Runs deltakv (or `command`, a list) with `mnt` a fresh tmpfs of `size` ("3m"); returns
    (rc, stdout, stderr, paths left under mnt)."""
    os.makedirs(mnt)
    p = subprocess.run([*small_fs_prefix(), "sh", "-c", SMALL_FS_SCRIPT, "sh", size, mnt,
                        *(command or [DELTAKV]), *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError(f"small filesystem script: exit {p.returncode}: {p.stderr}")
    return (int(read(mnt + ".rc", "r")), read(mnt + ".stdout", "r"), read(mnt + ".stderr", "r"),
            read(mnt + ".left", "r").split())


def same_checkpoint(a, b):
    files = sorted(f for f in os.listdir(a) if f.endswith(".safetensors"))
    assert files == sorted(f for f in os.listdir(b) if f.endswith(".safetensors")), (a, b)
    return all(filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False) for f in files)


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="deltakv-cli-")
        t = lambda *p: os.path.join(cls.tmp, *p)
        cls.t = staticmethod(t)
        run("checkpoint", "generate", "--out", t("v1"), "--size-mib", "4", "--files", "2")
        run("checkpoint", "mutate", "--parent", t("v1"), "--out", t("v2"), "--density", "0.01",
            "--seed", "2")
        run("checkpoint", "mutate", "--parent", t("v2"), "--out", t("v3"), "--density", "0.002",
            "--seed", "3", "--step-metadata", "3")
        run("publish", "--parent", t("v1"), "--new", t("v2"), "--out", t("d12"),
            "--frame-mib", "1")
        run("publish", "--parent", t("v2"), "--new", t("v3"), "--out", t("d23"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def fresh(self, name):
        path = self.t(name)
        shutil.rmtree(path, ignore_errors=True)
        return path

    def copy_delta(self, src):
        dst = self.fresh(src + "-copy")
        shutil.copytree(self.t(src), dst)
        return dst

    def test_checkpoint_manifest(self):
        p = run("checkpoint", "manifest", self.t("v1"), "--json")
        summary = json.loads(p.stdout)
        self.assertTrue(summary["ok"])
        m = json.loads(read(os.path.join(self.t("v1"), "manifest.json")))
        self.assertEqual(m["format"], "deltakv.checkpoint/1")
        self.assertEqual(len(m["tensors"]), summary["tensors"])
        import zlib
        first = m["tensors"][0]
        raw = read(os.path.join(self.t("v1"), first["file"]))
        b, e = first["byte_range"]
        self.assertEqual(f"{zlib.adler32(raw[b:e]):08x}", first["adler32"])

    def test_publish_apply_round_trip_with_json(self):
        out = self.fresh("out12")
        s = json.loads(run("apply", "--parent", self.t("v1"), "--delta", self.t("d12"), "--out",
                           out, "--json").stdout)
        self.assertTrue(s["ok"])
        self.assertEqual((s["parent_version"], s["version"]), ("v1", "v2"))
        self.assertTrue(same_checkpoint(out, self.t("v2")))
        # The written manifest is what `checkpoint manifest` computes for the new checkpoint.
        p = run("checkpoint", "manifest", self.t("v2"), "--stdout")
        self.assertEqual(p.stdout, read(os.path.join(out, "manifest.json"), "r"))

    def test_publish_summary_fields(self):
        s = json.loads(run("publish", "--parent", self.t("v1"), "--new", self.t("v2"), "--out",
                           self.fresh("dj"), "--json", "--level", "1").stdout)
        for key in ("tensors_changed", "dense_bytes", "compressed_bytes", "density", "seconds"):
            self.assertIn(key, s)
        self.assertGreater(s["density"], 0.001)
        self.assertLess(s["density"], 0.02)
        self.assertLess(s["compressed_bytes"], s["dense_bytes"])

    def test_publish_sequences_runs_by_default_and_zstd_on_request(self):
        sizes = {}
        for parse in ("runs", "zstd", None):
            out = self.fresh(f"dseq-{parse}")
            args = ["--sequences", parse] if parse else []
            s = json.loads(run("publish", "--parent", self.t("v1"), "--new", self.t("v2"),
                               "--out", out, "--json", *args).stdout)
            sizes[parse] = s["compressed_bytes"]
            applied = self.fresh(f"aseq-{parse}")
            run("apply", "--parent", self.t("v1"), "--delta", out, "--out", applied)
            self.assertTrue(same_checkpoint(applied, self.t("v2")))
            # Ordinary zstd frames: zstandard decodes them to the XOR of the two checkpoints.
            manifest = json.loads(read(os.path.join(out, "manifest.json"), "r"))
            frame = manifest["tensors"][0]["frames"][0]
            shard = read(os.path.join(out, frame["object"]))
            blob = shard[frame["object_offset"]:frame["object_offset"] + frame["compressed_length"]]
            self.assertEqual(len(zstandard.ZstdDecompressor().decompressobj().decompress(blob)),
                             frame["length"])
        self.assertEqual(sizes[None], sizes["runs"])
        self.assertLess(sizes["runs"], sizes["zstd"])
        p = run("publish", "--parent", self.t("v1"), "--new", self.t("v2"), "--out",
                self.fresh("dseq-bad"), "--sequences", "fast", expect=1)  # a usage error
        self.assertIn("--sequences", p.stderr)
        self.assertFalse(os.path.exists(self.t("dseq-bad")))

    def test_apply_with_each_decoder(self):
        for decoder in ("walker", "libzstd"):
            out = self.fresh("out-" + decoder)
            s = json.loads(run("apply", "--parent", self.t("v1"), "--delta", self.t("d12"),
                               "--out", out, "--decoder", decoder, "--json").stdout)
            self.assertEqual(s["decoder"], "sparse-walker" if decoder == "walker" else decoder)
            self.assertTrue(same_checkpoint(out, self.t("v2")))
        run("apply", "--parent", self.t("v1"), "--delta", self.t("d12"), "--out",
            self.fresh("out-x"), "--decoder", "magic", expect=2)

    def test_frame_scan(self):
        shard = os.path.join(ROOT, "tests", "deltasync", "data", "vectors", "delta", "shard-00000.zst")
        s = json.loads(run("frame", "scan", shard, "--json").stdout)
        self.assertEqual((s["decoded_length"], s["frames"], s["nonzero_bytes"], s["checksum"]),
                         (144, 2, 4, "verified"))
        dump = run("frame", "scan", shard, "--dump").stdout.split()
        self.assertEqual(dump, ["10", "1", "11", "128", "100", "3", "143", "15"])
        s = json.loads(run("frame", "scan", shard, "--json", "--no-checksum").stdout)
        self.assertEqual(s["checksum"], "skipped")
        bad = self.t("bad.zst")
        write(bad, read(shard)[:-3])
        p = run("frame", "scan", bad, expect=2)
        self.assertIn("bad.zst", p.stderr)

    def test_json_output_with_bytes_that_are_not_utf8(self):
        # File names (and the messages that quote them) need not be UTF-8: --json still prints
        # one valid JSON line, with U+FFFD in their place.
        shard = os.path.join(ROOT, "tests", "deltasync", "data", "vectors", "delta", "shard-00000.zst")
        odd = self.t(os.fsdecode(b"p\xff.zst"))
        write(odd, read(shard))
        s = json.loads(run("frame", "scan", odd, "--json").stdout)
        self.assertEqual(s["frames"], 2)
        bad = self.t(os.fsdecode(b"q\xfe.zst"))
        write(bad, read(shard)[:-3])
        # stderr quotes the name as it is: read the output as bytes.
        p = subprocess.run([DELTAKV, "frame", "scan", bad, "--json"], capture_output=True)
        self.assertEqual(p.returncode, 2, p.stderr)
        e = json.loads(p.stdout.decode("utf-8"))
        self.assertFalse(e["ok"])
        self.assertIn("q\ufffd.zst", json.dumps(e, ensure_ascii=False))

    def test_outputs_with_a_trailing_slash_and_shards_that_cannot_be_read(self):
        out = self.fresh("slash")
        run("checkpoint", "generate", "--out", out + "/", "--size-mib", "1")
        self.assertTrue([f for f in os.listdir(out) if f.endswith(".safetensors")])
        self.assertEqual([f for f in os.listdir(self.tmp) if f.startswith("slash.")], [])
        # A shard that is a dangling link or a directory is not skipped.
        os.symlink(self.t("nowhere"), os.path.join(out, "model-99999.safetensors"))
        p = run("checkpoint", "manifest", out, expect=3)
        self.assertIn("model-99999.safetensors", p.stderr)
        os.remove(os.path.join(out, "model-99999.safetensors"))
        os.mkdir(os.path.join(out, "extra.safetensors"))
        run("checkpoint", "manifest", out, expect=2)
        shutil.rmtree(out)

    def test_plan_json_with_a_plot_it_cannot_write_is_one_answer(self):
        p = run("plan", "--synthetic", "1", "--synthetic-scale", "0.05", "--duration-s", "60",
                "--points", "2", "--plot", self.t("no-dir", "p.svg"), "--json", "--no-progress",
                expect=3)
        lines = p.stdout.strip().splitlines()
        self.assertEqual(len(lines), 1, lines)
        self.assertFalse(json.loads(lines[0])["ok"])

    def test_plan_shows_a_copy_larger_than_the_budget_whole(self):
        # A CPU copy that leaves no KV budget beside it: the text shows the copy's size, as the
        # JSON does, not the budget it used up.
        args = ("plan", "--weights-gib", "300", "--host-ram-gib", "200", "--host-reserve-gib", "8")
        e = json.loads(run(*args, "--cpu-copy", "--json").stdout)
        plan = e["plan"] if "plan" in e else e
        copy_gib = plan["checkpoint_copy_bytes_per_node"] / 2**30
        self.assertGreater(copy_gib, 192)
        self.assertEqual(plan["host_kv_budget_with_copy_bytes_per_node"], 0)
        text = run(*args, "--cpu-copy").stdout
        self.assertIn("0 GiB beside one (copy %.0f GiB/node)" % copy_gib, text)
        self.assertIn("(copy %.0f GiB/node)" % copy_gib, run(*args).stdout)

    def test_names_a_manifest_cannot_hold_are_refused_with_nothing_written(self):
        # A version (here the directory's name, the default) or file name that is not UTF-8
        # cannot go into a JSON manifest: exit 2 and no output, not a crash half way.
        odd = self.t(os.fsdecode(b"n\xe9"))
        shutil.rmtree(odd, ignore_errors=True)
        shutil.copytree(self.t("v2"), odd)
        if os.path.exists(os.path.join(odd, "manifest.json")):
            os.remove(os.path.join(odd, "manifest.json"))
        out = self.fresh("d-odd")
        p = run("publish", "--parent", self.t("v1"), "--new", odd, "--out", out, "--json", expect=2)
        self.assertIn("is not valid UTF-8", json.loads(p.stdout)["error"]["message"])
        self.assertEqual([f for f in os.listdir(self.tmp) if f.startswith("d-odd")], [])
        p = run("publish", "--parent", self.t("v1"), "--new", self.t("v2"), "--out", out,
                "--version", os.fsdecode(b"v\xff"), expect=2)
        self.assertFalse(os.path.exists(out))
        run("checkpoint", "manifest", odd, expect=2)
        self.assertFalse(os.path.exists(os.path.join(odd, "manifest.json")))
        run("checkpoint", "manifest", odd, "--version", "v2")  # a version given: fine
        shutil.rmtree(odd)

    def test_header_change_round_trip(self):
        out = self.fresh("out23")
        run("apply", "--parent", self.t("v2"), "--delta", self.t("d23"), "--out", out)
        self.assertTrue(same_checkpoint(out, self.t("v3")))

    def test_python_writer_delta_applies(self):
        d = self.fresh("dpy")
        subprocess.run([sys.executable, os.path.join(EXAMPLES, "write_delta.py"), self.t("v1"),
                        self.t("v2"), d, "v1", "v2"], check=True)
        out = self.fresh("outpy")
        run("apply", "--parent", self.t("v1"), "--delta", d, "--out", out)
        self.assertTrue(same_checkpoint(out, self.t("v2")))

    def test_numpy_reader_applies_published_delta(self):
        # The reader checks every frame's xor_digest with its own implementation of FORMAT.md
        # 2.5, and the publisher records one for every frame.
        for parent, delta, want in (("v1", "d12", "v2"), ("v2", "d23", "v3")):
            m = json.loads(read(os.path.join(self.t(delta), "manifest.json")))
            frames = [f for t in m["tensors"] for f in t["frames"]]
            self.assertTrue(frames)
            self.assertTrue(all(len(f["xor_digest"]) == 32 for f in frames))
            out = self.fresh("np-" + want)
            subprocess.run([sys.executable, os.path.join(EXAMPLES, "apply_delta_numpy.py"),
                            self.t(parent), self.t(delta), out], check=True)
            self.assertTrue(same_checkpoint(out, self.t(want)), delta)

    def test_documented_script_matches_the_example_file(self):
        doc = read(os.path.join(ROOT, "deltasync", "FORMAT.md"), "r")
        script = read(os.path.join(EXAMPLES, "write_delta.py"), "r")
        self.assertIn("```python\n" + script + "```", doc)

    def expect_rejected(self, parent, delta, text, code=2):
        out = self.fresh("rejected")
        p = run("apply", "--parent", self.t(parent), "--delta", delta, "--out", out,
                "--json", expect=code)
        self.assertIn(text, p.stderr)
        err = json.loads(p.stdout)
        self.assertFalse(err["ok"])
        self.assertFalse(os.path.exists(out))
        self.assertFalse([f for f in os.listdir(self.tmp) if ".partial." in f or ".tmp." in f])
        return p

    def test_wrong_parent(self):
        p = self.expect_rejected("v1", self.t("d23"), "parent checksum mismatch")
        self.assertIn("tensor '", p.stderr)
        self.assertIn("expected 0x", p.stderr)

    def test_corrupt_frame(self):
        d = self.copy_delta("d12")
        shard = os.path.join(d, "shard-00000.zst")
        data = bytearray(read(shard))
        data[len(data) // 3] ^= 0x10
        write(shard, data)
        self.expect_rejected("v1", d, "sha256 mismatch")
        p = run("apply", "--parent", self.t("v1"), "--delta", d, "--out", self.fresh("rej2"),
                "--no-verify-objects", expect=2)
        self.assertIn("tensor '", p.stderr)

    def test_truncated_shard(self):
        d = self.copy_delta("d12")
        shard = os.path.join(d, "shard-00000.zst")
        data = read(shard)
        write(shard, data[:-10])
        self.expect_rejected("v1", d, "truncated")

    def test_manifest_mismatch(self):
        d = self.copy_delta("d12")
        path = os.path.join(d, "manifest.json")
        m = json.loads(read(path))
        m["tensors"][0]["adler32"] = "00000001"
        for t in m["checkpoint"]["tensors"]:
            if t["name"] == m["tensors"][0]["name"]:
                t["adler32"] = "00000001"
        write(path, json.dumps(m))
        self.expect_rejected("v1", d, "new checksum mismatch after applying the delta: expected 0x00000001")

    def test_malformed_manifest(self):
        d = self.copy_delta("d12")
        write(os.path.join(d, "manifest.json"), '{"format": "deltakv.delta/1"')
        self.expect_rejected("v1", d, "invalid JSON")

    def test_usage_errors_exit_1(self):
        run("apply", "--parent", self.t("v1"), expect=1)
        run("no-such-command", expect=1)
        run("publish", "--parent", "a", "--new", "b", "--out", "c", "--frame-mib", "0", expect=1)
        run("checkpoint", "generate", "--out", self.t("moe-bad"), "--experts", "2000", expect=1)
        self.assertFalse(os.path.exists(self.t("moe-bad")))
        # Sizes whose bytes would not fit 64 bits, and numbers that are not finite or outside
        # their range, are usage errors (they wrapped, or printed nonsense).
        for args in (("checkpoint", "generate", "--out", self.t("huge"), "--size-mib",
                      "17592186044416"),
                     ("checkpoint", "mutate", "--parent", self.t("v1"), "--out", self.t("m-nan"),
                      "--density", "nan"),
                     ("trace", "generate", "--out", self.t("tr-bad"), "--scale", "1.5"),
                     ("trace", "generate", "--out", self.t("tr-bad"), "--subagent-fraction", "2"),
                     ("trace", "generate", "--out", self.t("tr-bad"), "--max-turns", "0"),
                     ("plan", "--host-ram-gib", "-5"), ("plan", "--host-ram-gib", "nan"),
                     ("plan", "--host-reserve-gib", "-100"), ("plan", "--container-limit-gib", "-3"),
                     ("plan", "--max-sim-mib", "17592186044416"),
                     ("plan", "--synthetic", "1", "--concurrency", "0")):
            p = run(*args, expect=1)
            self.assertIn(args[-2], p.stderr)
            self.assertEqual(p.stdout, "")
        for gone in ("huge", "m-nan", "tr-bad"):
            self.assertFalse(os.path.exists(self.t(gone)))
        for files in ("0", "100000"):
            run("checkpoint", "generate", "--out", self.t("files-bad"), "--files", files, expect=1)
            self.assertFalse(os.path.exists(self.t("files-bad")))
        # An unsigned option takes decimal digits within 64 bits: a sign or an overflow is a
        # value of the wrong type, not a value wrapped around.
        for value in ("-1", "99999999999999999999", "+5", "0x10", "1.5"):
            p = run("checkpoint", "generate", "--out", self.t("neg"), "--size-mib", value,
                    expect=1)
            self.assertIn("--size-mib", p.stderr)
            self.assertFalse(os.path.exists(self.t("neg")))
            # Options with a range check too.
            p = run("publish", "--parent", self.t("v1"), "--new", self.t("v2"), "--out",
                    self.t("neg"), "--frame-mib", value, expect=1)
            self.assertIn("--frame-mib", p.stderr)
            self.assertFalse(os.path.exists(self.t("neg")))
        run("sidecar", "--token-file", self.t("none"), "--max-body-bytes", "-1", "--print-config",
            expect=1)
        for flag, value in (("--cache-bytes", "abc"), ("--memory-bytes", "-5"),
                            ("--readahead", "64XB"), ("--readahead-inflight", "1.5M")):
            p = run("volume", "--store", self.t("vstore"), "mount", "ns/m:t", self.t("mnt"), flag,
                    value, expect=1)
            self.assertIn(flag, p.stderr)

    def test_io_errors_exit_3(self):
        run("apply", "--parent", self.t("v1"), "--delta", self.t("missing"), "--out",
            self.fresh("x"), expect=3)

    def test_full_shared_memory_fails_at_start_not_with_sigbus(self):
        # /dev/shm replaced by a small tmpfs in a private mount namespace: the sidecar reserves
        # its segments' pages when it creates them, so a KV pool that does not fit is a clear
        # error at start (and nothing is left in /dev/shm), not a SIGBUS when it is first used.
        script = ('mount -t tmpfs -o size=64m tmpfs /dev/shm || exit 90; '
                  'timeout 20 "$@" >/dev/null 2>/tmp/deltakv-shm-err-$$; rc=$?; '
                  'cat /tmp/deltakv-shm-err-$$ >&2; rm -f /tmp/deltakv-shm-err-$$; '
                  'echo "rc=$rc left=$(ls /dev/shm | tr "\n" " ")"')
        token = self.t("token-shm")
        write(token, "t0ken\n")
        p = subprocess.run([*small_fs_prefix(), "sh", "-c", script, "sh", DELTAKV, "sidecar",
                            "--listen", "127.0.0.1:0", "--token-file", token, "--shm-name",
                            "dkv-cli-shm", "--kv-block-bytes", str(1 << 20),
                            "--kv-capacity-slots", "256"], capture_output=True, text=True)
        self.assertNotIn("rc=90", p.stdout, p.stderr)
        m = re.search(r"rc=(\d+) left=(.*)", p.stdout)
        self.assertIsNotNone(m, (p.stdout, p.stderr))
        self.assertNotIn(int(m.group(1)), (0, 124, 128 + 7), p.stderr)  # not running, not SIGBUS
        self.assertIn("no space left in shared memory (/dev/shm): need", p.stderr)
        self.assertNotIn("kv", m.group(2), "the pool's segment was left behind")

    def test_full_filesystem_fails_cleanly_with_exit_3(self):
        # A 3 MiB filesystem holds the first ~2 MiB output file but not the second: the second
        # file's reservation fails (an unreserved mapping would die of SIGBUS instead), and the
        # first, already written, goes with the staging directory.
        mnt = self.fresh("smallfs")
        out = os.path.join(mnt, "out")
        rc, stdout, stderr, left = run_on_small_fs(
            "3m", mnt, "apply", "--parent", self.t("v1"), "--delta", self.t("d12"), "--out", out,
            "--json")
        self.assertEqual(rc, 3, stderr)
        m = re.search(r"no space left on '([^']+)': need (\d+) bytes, (\d+) available", stderr)
        self.assertIsNotNone(m, stderr)
        name = os.path.basename(m.group(1))
        self.assertEqual(int(m.group(2)), os.path.getsize(os.path.join(self.t("v2"), name)))
        self.assertLess(int(m.group(3)), int(m.group(2)))
        err = json.loads(stdout)
        self.assertEqual((err["ok"], err["error"]["code"]), (False, "IO_ERROR"))
        self.assertEqual(left, [], "partial output left behind")

        # frame apply writes a single file through the same reservation.
        base = np.zeros(1 << 20, dtype=np.uint8)
        bpath, fpath = self.t("zeros.bin"), self.t("zeros.zst")
        base.tofile(bpath)
        write(fpath, zstandard.ZstdCompressor().compress(base.tobytes()))
        mnt = self.fresh("smallfs2")
        rc, _, stderr, left = run_on_small_fs("512k", mnt, "frame", "apply", bpath, fpath,
                                              os.path.join(mnt, "o.bin"))
        self.assertEqual(rc, 3, stderr)
        self.assertIn(f"no space left on '{mnt}/o.bin': need {1 << 20} bytes", stderr)
        self.assertEqual(left, [], "partial output left behind")

        # A small file written whole (a manifest) reserves its space as well: the same message,
        # and no temporary file left.
        mnt = self.fresh("smallfs3")
        script = ('cp -r "$1" "$2/c" && rm -f "$2/c/manifest.json" && '
                  '(dd if=/dev/zero of="$2/fill" bs=4k 2>/dev/null; true) && '
                  'exec "$3" checkpoint manifest "$2/c"')
        rc, _, stderr, left = run_on_small_fs("8m", mnt, "-c", script, "sh", self.t("v1"), mnt,
                                              DELTAKV, command=["sh"])
        self.assertEqual(rc, 3, stderr)
        self.assertRegex(stderr, rf"no space left on '{mnt}/c/manifest.json': need \d+ bytes, "
                                 r"\d+ available")
        self.assertEqual([f for f in left if "manifest" in f], [], left)

    def test_existing_output_is_refused(self):
        p = run("publish", "--parent", self.t("v1"), "--new", self.t("v2"), "--out",
                self.t("d12"), expect=2)
        self.assertIn("already exists", p.stderr)
        # The synthetic checkpoint writers too: the existing directory is left as it was.
        def contents(d):
            out = {}
            for name in sorted(os.listdir(d)):
                with open(os.path.join(d, name), "rb") as f:
                    out[name] = f.read()
            return out
        before = contents(self.t("v2"))
        p = run("checkpoint", "generate", "--out", self.t("v2"), "--size-mib", "1", expect=2)
        self.assertIn("already exists", p.stderr)
        p = run("checkpoint", "mutate", "--parent", self.t("v1"), "--out", self.t("v2"), expect=2)
        self.assertIn("already exists", p.stderr)
        self.assertEqual(contents(self.t("v2")), before)
        # A mutate that fails leaves no output behind.
        run("checkpoint", "mutate", "--parent", self.t("nope"), "--out", self.fresh("m-bad"),
            expect=3)
        self.assertFalse(os.path.exists(self.t("m-bad")))
        self.assertFalse([f for f in os.listdir(self.tmp) if f.startswith("m-bad")])
        # A symlink is an existing output, dangling or not; an empty output path is refused.
        link = self.fresh("dangling")
        os.symlink(self.t("no-such-target"), link)
        p = run("apply", "--parent", self.t("v1"), "--delta", self.t("d12"), "--out", link,
                expect=2)
        self.assertIn("already exists", p.stderr)
        self.assertTrue(os.path.islink(link))
        self.assertFalse(os.path.exists(self.t("no-such-target")))
        run("apply", "--parent", self.t("v1"), "--delta", self.t("d12"), "--out", "", expect=2)

    def test_unsafe_file_names_are_refused_when_written(self):
        # A checkpoint whose file name the manifests cannot carry is refused by every writer,
        # not only by apply later.
        d = self.fresh("unsafe")
        shutil.copytree(self.t("v1"), d)
        name = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))[0]
        os.rename(os.path.join(d, name), os.path.join(d, "p1 x.safetensors"))
        for args in (("checkpoint", "manifest", d, "--stdout"),
                     ("publish", "--parent", self.t("v1"), "--new", d, "--out",
                      self.fresh("d-unsafe"))):
            p = run(*args, expect=2)
            self.assertIn("unsafe file name 'p1 x.safetensors'", p.stderr)
        self.assertFalse(os.path.exists(self.t("d-unsafe")))

    def test_frame_apply_with_zstd_cli_frames(self):
        rng = np.random.default_rng(5)
        base = rng.integers(0, 256, 300000, dtype=np.uint8)
        xor = np.zeros_like(base)
        idx = rng.choice(base.size, 500, replace=False)
        xor[idx] = rng.integers(1, 256, idx.size, dtype=np.uint8)
        bpath, xpath, fpath, out = (self.t(n) for n in ("base.bin", "xor.bin", "xor.zst", "o.bin"))
        base.tofile(bpath)
        xor.tofile(xpath)
        half = xor.size // 2
        # Two concatenated frames: one from the zstd CLI, one from python-zstandard.
        subprocess.run(["zstd", "-q", "-f", "-19", "-o", fpath + ".a", "-"],
                       input=xor[:half].tobytes(), check=True)
        with open(fpath, "wb") as f:
            f.write(read(fpath + ".a"))
            f.write(zstandard.ZstdCompressor(level=3).compress(xor[half:].tobytes()))
        if os.path.exists(out):
            os.remove(out)
        s = json.loads(run("frame", "apply", bpath, fpath, out, "--json").stdout)
        self.assertEqual(s["frames"], 2)
        self.assertEqual(s["nonzero_bytes"], 500)
        self.assertEqual(read(out), (base ^ xor).tobytes())
        # A base of the wrong length is refused and leaves nothing.
        base[:-1].tofile(bpath)
        os.remove(out)
        p = run("frame", "apply", bpath, fpath, out, expect=2)
        self.assertIn("bytes", p.stderr)
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    args, rest = ap.parse_known_args()
    DELTAKV = os.path.abspath(args.deltakv)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
