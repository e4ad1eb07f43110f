"""End-to-end tests of the trainer-side commands (checkpoint, publish, apply, frame) when the
world misbehaves: inputs rewritten while they are read, Ctrl-C and SIGTERM, a stdout that
cannot be written, a low open-file limit, racing writers, absurd option values, and the
messages and JSON lines these give.

Run: python3 tests/cli/trainer_faults_test.py --deltakv build/sidecar/deltakv
"""
import argparse, json, os, resource, shutil, signal, struct, subprocess, sys, tempfile, time
import unittest

import zstandard

DELTAKV = None


def run(*args, expect=0, **kw):
    p = subprocess.run([DELTAKV, *args], capture_output=True, text=True, **kw)
    if p.returncode != expect:
        raise AssertionError(f"deltakv {' '.join(args)}: exit {p.returncode}, wanted {expect}\n"
                             f"stdout: {p.stdout}\nstderr: {p.stderr}")
    return p


def write_safetensors(path, tensors):
    """tensors: name -> (dtype, shape, bytes), laid out in the given order."""
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data),
                                                                        len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


class TrainerFaults(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="deltakv-faults-")
        run("checkpoint", "generate", "--out", cls.path("v1"), "--size-mib", "2", "--files", "2")
        run("checkpoint", "mutate", "--parent", cls.path("v1"), "--out", cls.path("v2"),
            "--density", "0.01", "--seed", "2")
        run("publish", "--parent", cls.path("v1"), "--new", cls.path("v2"), "--out",
            cls.path("d12"), "--frame-mib", "1")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    @classmethod
    def path(cls, *parts):
        return os.path.join(cls.tmp, *parts)

    def fresh(self, name):
        p = self.path(name)
        shutil.rmtree(p, ignore_errors=True)
        return p

    def left_beside(self, out):
        """Entries next to `out` whose names start with its name (staging leftovers too)."""
        base = os.path.basename(out)
        return sorted(n for n in os.listdir(os.path.dirname(out)) if n.startswith(base))

    def slow_publish_inputs(self):
        """A parent and a new checkpoint whose publish at zstd level 19 on one thread takes a
        second or more (every byte differs), small on disk."""
        p, n = self.path("slow-p"), self.path("slow-n")
        if not os.path.exists(n):
            run("checkpoint", "generate", "--out", p, "--size-mib", "4", "--files", "2")
            run("checkpoint", "mutate", "--parent", p, "--out", n, "--density", "1")
        return p, n

    def stop_when_staging_appears(self, proc, out):
        """Waits until the command made its staging entry beside `out`, then stops it with
        SIGSTOP; False if it finished first."""
        deadline = time.time() + 30
        while not any(".partial." in e or ".tmp." in e for e in self.left_beside(out)):
            if proc.poll() is not None:
                return False
            self.assertLess(time.time(), deadline)
            time.sleep(0.001)
        proc.send_signal(signal.SIGSTOP)
        return True

    # --- inputs that change while they are read -------------------------------------------

    def test_an_input_that_shrinks_during_publish_is_an_io_error_not_sigbus(self):
        # Trainers rewrite checkpoints in place. Reading a page past the new end of a mapped
        # file raised SIGBUS (exit 135, no message, the staging directory left behind).
        parent, new = self.slow_publish_inputs()
        caught = 0
        for attempt in range(3):
            n = self.fresh(f"shrink-n{attempt}")
            shutil.copytree(new, n)
            out = self.fresh(f"shrink-d{attempt}")
            proc = subprocess.Popen([DELTAKV, "publish", "--parent", parent, "--new", n, "--out",
                                     out, "--level", "19", "--threads", "1", "--json"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            stopped = self.stop_when_staging_appears(proc, out)
            for f in os.listdir(n):
                if f.endswith(".safetensors"):
                    os.truncate(os.path.join(n, f), 4096)
            if stopped:
                proc.send_signal(signal.SIGCONT)
            stdout, stderr = proc.communicate(timeout=120)
            if not stopped:
                continue
            caught += 1
            self.assertEqual(proc.returncode, 3, stderr)
            self.assertRegex(stderr, r"'[^']*\.safetensors' changed while being read")
            self.assertEqual(json.loads(stdout)["error"]["code"], "IO_ERROR")
            self.assertEqual(self.left_beside(out), [])
        self.assertGreater(caught, 0)

    # --- interrupts -------------------------------------------------------------------------

    def test_interrupted_writers_remove_their_staging_and_die_of_the_signal(self):
        # SIGINT, SIGTERM or SIGHUP: publish, apply and frame apply stop, remove what they
        # wrote (OUT.partial.*, OUT.tmp.*), and die of the signal as before.
        parent, new = self.slow_publish_inputs()
        delta = self.path("slow-d")
        if not os.path.exists(delta):
            run("publish", "--parent", parent, "--new", new, "--out", delta, "--frame-mib", "1",
                "--level", "1")
        base = self.path("slow-base.bin")
        frames = self.path("slow-frames.zst")
        if not os.path.exists(frames):
            with open(base, "wb") as f:
                f.write(b"\0" * (8 << 20))
            with open(frames, "wb") as f:
                f.write(zstandard.ZstdCompressor().compress(os.urandom(8 << 20)))
        commands = {
            "publish": lambda out: ["publish", "--parent", parent, "--new", new, "--out", out,
                                    "--level", "19", "--threads", "1"],
            "apply": lambda out: ["apply", "--parent", parent, "--delta", delta, "--out", out,
                                  "--threads", "1", "--decoder", "libzstd"],
            "frame-apply": lambda out: ["frame", "apply", base, frames, out,
                                        "--decoder", "libzstd"],
        }
        for name, args in commands.items():
            interrupted = 0
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                out = self.fresh(f"sig-{name}-{sig.name}")
                proc = subprocess.Popen([DELTAKV, *args(out)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                stopped = self.stop_when_staging_appears(proc, out)
                if stopped:
                    proc.send_signal(sig)  # delivered once it runs again
                    proc.send_signal(signal.SIGCONT)
                rc = proc.wait(timeout=120)
                if rc == 0:  # finished first: a whole output and nothing else
                    self.assertEqual(self.left_beside(out), [os.path.basename(out)])
                    continue
                self.assertEqual(rc, -sig, f"{name} {sig.name}")
                self.assertEqual(self.left_beside(out), [], f"{name} {sig.name}")
                interrupted += 1
            self.assertGreater(interrupted, 0, name)

    def test_an_existing_partial_name_is_never_removed(self):
        # OUT.partial.<pid> and OUT.tmp.<pid> that this process did not make (here: made by the
        # same pid before it exec'd deltakv) are left alone; the output is staged under other
        # names. apply removed such a directory, content and all.
        out = self.fresh("own")
        pid_file = self.path("pid-of-own")
        script = ('echo $$ > "$5" && mkdir "$1.partial.$$" && echo precious > "$1.partial.$$/keep"'
                  ' && exec "$2" apply --parent "$3" --delta "$4" --out "$1"')
        p = subprocess.run(["sh", "-c", script, "sh", out, DELTAKV, self.path("v1"),
                            self.path("d12"), pid_file], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(pid_file) as f:
            pid = f.read().strip()
        partial = f"{out}.partial.{pid}"
        self.assertEqual(self.left_beside(out), sorted([os.path.basename(out),
                                                        os.path.basename(partial)]))
        self.assertEqual(os.listdir(partial), ["keep"])
        with open(os.path.join(partial, "keep")) as f:
            self.assertEqual(f.read(), "precious\n")
        self.assertNotIn("keep", os.listdir(out))
        # frame apply's temporary file the same way.
        base, frames = self.path("fa-base"), self.path("fa-frames")
        with open(base, "wb") as f:
            f.write(b"\1" * 4096)
        with open(frames, "wb") as f:
            f.write(zstandard.ZstdCompressor().compress(b"\3" * 4096))
        target = self.path("fa-out")
        script = 'echo precious > "$1.tmp.$$" && exec "$2" frame apply "$3" "$4" "$1"'
        p = subprocess.run(["sh", "-c", script, "sh", target, DELTAKV, base, frames],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(target, "rb") as f:
            self.assertEqual(f.read(), b"\2" * 4096)
        kept = [n for n in self.left_beside(target) if ".tmp." in n]
        self.assertEqual(len(kept), 1, kept)
        with open(self.path(kept[0])) as f:
            self.assertEqual(f.read(), "precious\n")

    # --- stdout -----------------------------------------------------------------------------

    def test_a_stdout_that_cannot_be_written_is_exit_3(self):
        if not os.path.exists("/dev/full"):
            self.skipTest("no /dev/full")
        # The manifest is larger than stdio's buffer: part of it is written before the end.
        cases = [["checkpoint", "manifest", "--stdout", self.path("v1")],
                 ["publish", "--parent", self.path("v1"), "--new", self.path("v2"), "--out",
                  "{out}", "--json"],
                 ["publish", "--parent", self.path("v1"), "--new", self.path("v2"), "--out",
                  "{out}"],
                 ["frame", "scan", "--json", self.path("d12", "shard-00000.zst")],
                 ["frame", "scan", "--dump", self.path("d12", "shard-00000.zst")],
                 ["checkpoint", "generate", "--out", "{out}", "--size-mib", "1", "--json"],
                 ["--help"]]
        for i, args in enumerate(cases):
            out = self.fresh(f"full-{i}")
            args = [a.replace("{out}", out) for a in args]
            with open("/dev/full", "w") as full:
                p = subprocess.run([DELTAKV, *args], stdout=full, stderr=subprocess.PIPE,
                                   text=True)
            self.assertEqual(p.returncode, 3, (args, p.stderr))
            self.assertIn("error: cannot write to stdout: No space left on device", p.stderr,
                          args)
        # A command that failed keeps its own exit code, and says both.
        bad = self.path("full-bad.zst")
        with open(bad, "wb") as f:
            f.write(b"not a zstd frame")
        with open("/dev/full", "w") as full:
            p = subprocess.run([DELTAKV, "frame", "scan", "--json", bad], stdout=full,
                               stderr=subprocess.PIPE, text=True)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("cannot write to stdout", p.stderr)

    # --- open files -------------------------------------------------------------------------

    def test_apply_of_more_files_than_the_open_file_limit(self):
        # apply kept every output file open at once and failed with EMFILE past ~1020 files
        # at the common limit of 1024; generate, mutate and publish never did. The same with
        # 130 files under a limit of 64.
        p, n, d = self.fresh("many-p"), self.fresh("many-n"), self.fresh("many-d")
        limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        run("checkpoint", "generate", "--out", p, "--size-mib", "1", "--files", "130")
        run("checkpoint", "mutate", "--parent", p, "--out", n, "--density", "0.01")
        run("publish", "--parent", p, "--new", n, "--out", d, preexec_fn=limit)
        for threads in ("1", "4"):
            out = self.fresh(f"many-a{threads}")
            run("apply", "--parent", p, "--delta", d, "--out", out, "--threads", threads,
                preexec_fn=limit)
            names = sorted(f for f in os.listdir(n) if f.endswith(".safetensors"))
            self.assertEqual(len(names), 130)
            for f in names:
                with open(os.path.join(out, f), "rb") as a, open(os.path.join(n, f), "rb") as b:
                    self.assertEqual(a.read(), b.read(), f)

    # --- racing writers ---------------------------------------------------------------------

    def test_racing_publishes_to_one_output_lose_with_exit_2(self):
        # The loser of two writers renaming into one --out got exit 3 "Directory not empty"
        # when the other's rename came between its check and its own.
        for round_ in range(4):
            out = self.fresh(f"race-{round_}")
            procs = [subprocess.Popen([DELTAKV, "publish", "--parent", self.path("v1"), "--new",
                                       self.path("v2"), "--out", out, "--threads", "1"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True) for _ in range(6)]
            outs = [pr.communicate(timeout=120) for pr in procs]
            results = [(pr.returncode, err) for pr, (_, err) in zip(procs, outs)]
            self.assertEqual(sum(rc == 0 for rc, _ in results), 1, results)
            for rc, err in results:
                if rc != 0:
                    self.assertEqual(rc, 2, err)
                    self.assertRegex(err, r"output '[^']*' (appeared while it was being written|"
                                          r"already exists)")
            self.assertEqual(self.left_beside(out), [os.path.basename(out)])

    # --- option values ----------------------------------------------------------------------

    def test_threads_are_capped(self):
        # --threads allocated per-thread state up front: 30,000,000 took ~2 GB, and 2^32 - 1
        # under an address-space limit aborted with std::bad_alloc.
        p1, p2 = self.path("v1"), self.path("v2")
        for huge in ("1025", "30000000", "4294967295"):
            for args in (["publish", "--parent", p1, "--new", p2, "--out", self.fresh("t-d")],
                         ["apply", "--parent", p1, "--delta", self.path("d12"), "--out",
                          self.fresh("t-a")],
                         ["checkpoint", "manifest", "--stdout", p1]):
                p = run(*args, "--threads", huge, expect=1)
                self.assertIn("--threads", p.stderr)
        out = self.fresh("t-max")
        limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        run("publish", "--parent", p1, "--new", p2, "--out", out, "--threads", "1024",
            preexec_fn=limit)
        run("apply", "--parent", p1, "--delta", out, "--out", self.fresh("t-max-a"),
            "--threads", "1024", preexec_fn=limit)
        help_text = run("publish", "--help").stdout
        self.assertIn("at most 1024", help_text)

    def test_default_versions_are_directory_names(self):
        # A manifest.json copied along with an older checkpoint (cp -r step-100 step-101, then
        # new weights) named the new checkpoint after the old one.
        w = self.fresh("versions")
        os.makedirs(w)
        s100, s101 = os.path.join(w, "step-100"), os.path.join(w, "step-101")
        shutil.copytree(self.path("v1"), s100)
        run("checkpoint", "manifest", s100)
        shutil.copytree(s100, s101)
        for f in os.listdir(self.path("v2")):
            if f.endswith(".safetensors"):
                shutil.copy(self.path("v2", f), s101)
        summary = json.loads(run("checkpoint", "manifest", s101, "--json").stdout)
        self.assertEqual(summary["version"], "step-101")
        with open(os.path.join(s101, "manifest.json")) as f:
            self.assertEqual(json.load(f)["version"], "step-101")
        summary = json.loads(run("publish", "--parent", s100, "--new", s101, "--out",
                                 os.path.join(w, "delta"), "--json").stdout)
        self.assertEqual((summary["parent_version"], summary["version"]),
                         ("step-100", "step-101"))
        with open(os.path.join(w, "delta", "manifest.json")) as f:
            meta = json.load(f)["metadata"]
        self.assertEqual((meta["base_version"], meta["version"]), ("step-100", "step-101"))
        # "." and a trailing slash name the directory itself.
        m = json.loads(run("checkpoint", "manifest", "--stdout", ".", cwd=s101).stdout)
        self.assertEqual(m["version"], "step-101")
        m = json.loads(run("checkpoint", "manifest", "--stdout", "step-101/", cwd=w).stdout)
        self.assertEqual(m["version"], "step-101")
        # An empty version is a usage error, not "use the default".
        run("checkpoint", "manifest", s101, "--version", "", expect=1)
        run("publish", "--parent", s100, "--new", s101, "--out", self.fresh("v-empty"),
            "--version", "", expect=1)
        run("publish", "--parent", s100, "--new", s101, "--out", self.fresh("v-empty"),
            "--parent-version", "", expect=1)
        self.assertIn("default: the directory's name",
                      run("checkpoint", "manifest", "--help").stdout)

    # --- frame scan -------------------------------------------------------------------------

    def test_frame_scan_reports_every_file(self):
        good, bad = self.path("scan-good.zst"), self.path("scan-bad.zst")
        with open(good, "wb") as f:
            f.write(zstandard.ZstdCompressor().compress(b"\1" * 1000))
        with open(bad, "wb") as f:
            f.write(b"\x28\xb5\x2f\xfd" + bytes(range(96)))
        missing = self.path("scan-missing.zst")
        p = run("frame", "scan", "--json", good, bad, good, expect=2)
        lines = [json.loads(line) for line in p.stdout.splitlines()]
        self.assertEqual([(j["ok"], j["file"]) for j in lines],
                         [(True, good), (False, bad), (True, good)])
        self.assertEqual(lines[1]["error"]["code"], "DATA_LOSS")
        self.assertIn(bad, p.stderr)
        # Exit code: the worst (an I/O error, 3, over bad data, 2); text output alike.
        p = run("frame", "scan", bad, missing, good, expect=3)
        self.assertIn(good + ": 1000 bytes decoded", p.stdout)
        self.assertEqual(p.stderr.count("error:"), 2, p.stderr)
        lines = [json.loads(line) for line in
                 run("frame", "scan", "--json", missing, good, expect=3).stdout.splitlines()]
        self.assertEqual([(j["ok"], j["file"]) for j in lines], [(False, missing), (True, good)])

    def test_frame_scan_runs_are_maximal(self):
        # One nonzero stretch of 1 MiB was reported as 16 runs (one per 64 KiB the walker
        # delivers at a time), although --dump shows no gap.
        f = self.path("runs.zst")
        data = b"\xff" * (1 << 20) + b"\0" * 100 + b"\1" * 70000 + b"\0" + b"\2"
        with open(f, "wb") as out:
            out.write(zstandard.ZstdCompressor().compress(data))
        j = json.loads(run("frame", "scan", "--json", f).stdout)
        self.assertEqual((j["runs"], j["nonzero_bytes"]), (3, (1 << 20) + 70001))
        self.assertIn("in 3 runs", run("frame", "scan", f).stdout)
        # Two frames: a run that crosses from one into the next is still one run.
        cctx = zstandard.ZstdCompressor()
        with open(f, "wb") as out:
            out.write(cctx.compress(b"\0" * 10 + b"\7" * 10) + cctx.compress(b"\7" * 10))
        self.assertEqual(json.loads(run("frame", "scan", "--json", f).stdout)["runs"], 1)

    # --- messages ---------------------------------------------------------------------------

    def test_a_reshaped_tensor_is_named_with_both_dtypes_and_shapes(self):
        p, n = self.fresh("reshape-p"), self.fresh("reshape-n")
        os.makedirs(p)
        os.makedirs(n)
        write_safetensors(os.path.join(p, "m.safetensors"), {"w": ("F32", [4, 4], bytes(64))})
        write_safetensors(os.path.join(n, "m.safetensors"), {"w": ("F32", [2, 8], bytes(64))})
        err = run("publish", "--parent", p, "--new", n, "--out", self.fresh("reshape-d"),
                  expect=2).stderr
        self.assertIn("tensor 'w' changed dtype or shape between parent (F32 [4, 4]) and new "
                      "(F32 [2, 8])", err)

    def test_output_paths_that_cannot_be_made_say_why(self):
        afile = self.path("a-regular-file")
        with open(afile, "w") as f:
            f.write("x")
        err = run("publish", "--parent", self.path("v1"), "--new", self.path("v2"), "--out",
                  os.path.join(afile, "sub"), expect=3).stderr
        self.assertIn(f"parent '{afile}' of '{afile}/sub' is not a directory", err)
        err = run("apply", "--parent", self.path("v1"), "--delta", self.path("d12"), "--out",
                  self.path("no-such-dir", "sub"), expect=3).stderr
        self.assertIn("does not exist", err)
        # A manifest.json that is a directory: which rename failed, in plain words.
        c = self.fresh("manifest-dir")
        shutil.copytree(self.path("v1"), c)
        manifest = os.path.join(c, "manifest.json")
        if os.path.exists(manifest):
            os.remove(manifest)
        os.makedirs(os.path.join(manifest, "inside"))
        err = run("checkpoint", "manifest", c, expect=3).stderr
        self.assertRegex(err, rf"cannot rename '{manifest}\.tmp\.\d+' to '{manifest}': ")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    args, rest = ap.parse_known_args()
    DELTAKV = os.path.abspath(args.deltakv)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
