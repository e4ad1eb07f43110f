"""End-to-end tests of `deltakv volume`: real processes on a real directory store, checked
against an independent reading of deltasync/VOLUME.md (manifest digests computed here in
Python), concurrent pushes and gc in separate processes, and, on a directory store, the
scenarios of volume_scenarios.py (a push killed with SIGKILL, racing pushes and tag moves).

Run: python3 tests/cli/volume_cli_test.py --deltakv build/sidecar/deltakv
"""
import argparse, hashlib, json, os, shutil, signal, subprocess, sys, tempfile, time, unittest

import volume_scenarios

DELTAKV = None


def run(*args, expect=0, env=None):
    p = subprocess.run([DELTAKV, *args], capture_output=True, text=True, env=env)
    if p.returncode != expect:
        raise AssertionError(f"deltakv {' '.join(args)}: exit {p.returncode}, wanted {expect}\n"
                             f"stdout: {p.stdout}\nstderr: {p.stderr}")
    return p


def vol(store, *args, expect=0):
    return run("volume", "--store", store, *args, expect=expect)


def vol_json(store, *args, expect=0):
    p = vol(store, *args, "--json", expect=expect)
    return json.loads(p.stdout.strip().splitlines()[-1])


write, tree = volume_scenarios.write, volume_scenarios.tree


def small_manifest_digest(ns, name, files):
    """The digest of a version whose files are all shorter than the content-defined minimum
    (16 KiB, so one chunk each), built from the spec's byte rules (VOLUME.md section 5)."""
    entries = []
    for path in sorted(files, key=lambda p: p.encode()):
        data, executable = files[path]
        h = hashlib.sha256(data).hexdigest()
        chunks = [{"digest": "sha256:" + h, "offset": 0, "size": len(data)}] if data else []
        entries.append({"chunks": chunks, "mode": "0755" if executable else "0644", "path": path,
                        "sha256": h, "size": len(data)})
    manifest = {"files": entries, "format": "deltakv.volume.v1", "name": name, "ns": ns}
    text = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class VolumeCli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="deltakv-volume-cli-")
        self.store = os.path.join(self.tmp, "store")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def small_dir(self, name="src", extra=b""):
        root = self.path(name)
        write(os.path.join(root, "bin/run.sh"), b"#!/bin/sh\n", 0o755)
        write(os.path.join(root, "empty"), b"")
        write(os.path.join(root, "hello.txt"), b"hello\n" + extra)
        return root

    def test_spec_vector_and_independent_digest(self):
        src = self.small_dir()
        r = vol_json(self.store, "push", src, "demo/tiny", "--tag", "prod", "-q")
        # The tiny-manifest vector of VOLUME.md section 9.
        self.assertEqual(r["digest"], "sha256:2a9cfe9e15928775426c28359dc75fcc5f5073e96f577b0809624c5020e627fd")
        self.assertEqual(r["digest"], "sha256:" + small_manifest_digest("demo", "tiny", tree(src)))
        self.assertEqual((r["files"], r["bytes"], r["chunks_total"], r["chunks_uploaded"]), (3, 16, 2, 2))
        self.assertEqual(r["tag"], "prod")
        # Other contents, names and a non-ASCII path, checked the same way.
        other = self.small_dir("other", extra=b"more")
        write(os.path.join(other, "d\u00e9j\u00e0/vu.txt"), b"x" * 100)
        r2 = vol_json(self.store, "push", other, "team.a/model-1_x", "-q")
        self.assertEqual(r2["digest"],
                         "sha256:" + small_manifest_digest("team.a", "model-1_x", tree(other)))
        again = vol_json(self.store, "push", src, "demo/tiny", "-q")
        self.assertEqual(again["digest"], r["digest"])
        self.assertEqual(again["chunks_uploaded"], 0)

    def test_show_ls_tag_pull_round_trip(self):
        src = self.small_dir()
        pushed = vol_json(self.store, "push", src, "demo/tiny", "--tag", "prod", "-q")
        shown = vol_json(self.store, "show", "demo/tiny:prod")
        self.assertEqual(shown["ref"], pushed["ref"])
        self.assertEqual([f["path"] for f in shown["files"]], ["bin/run.sh", "empty", "hello.txt"])
        self.assertEqual([f["mode"] for f in shown["files"]], ["0755", "0644", "0644"])
        self.assertEqual(shown["bytes"], 16)
        self.assertIsInstance(shown["created"], int)
        t = vol_json(self.store, "tag", pushed["ref"], "stable", "--create")
        self.assertEqual(t["digest"], pushed["digest"])
        vol(self.store, "tag", pushed["ref"], "stable", "--create", expect=2)
        vol(self.store, "tag", pushed["ref"], "stable", "--expect-generation", "1", expect=2)
        moved = vol_json(self.store, "tag", pushed["ref"], "stable", "--expect-generation", t["generation"])
        self.assertNotEqual(moved["generation"], t["generation"])
        listing = vol_json(self.store, "ls")["volumes"]
        self.assertEqual(len(listing), 1)
        self.assertEqual(listing[0]["versions"], [pushed["digest"]])
        self.assertEqual(sorted(x["tag"] for x in listing[0]["tags"]), ["prod", "stable"])
        # A tag's generation is read without moving it: from ls and from show of the tag.
        listed = {x["tag"]: x for x in listing[0]["tags"]}
        self.assertEqual(listed["stable"]["generation"], moved["generation"])
        self.assertEqual(listed["stable"]["digest"], pushed["digest"])
        shown = vol_json(self.store, "show", "demo/tiny:stable")
        self.assertEqual((shown["tag"], shown["tag_generation"]), ("stable", moved["generation"]))
        self.assertNotIn("tag_generation", vol_json(self.store, "show", pushed["ref"]))
        vol_json(self.store, "tag", pushed["ref"], "prod", "--expect-generation",
                 listed["prod"]["generation"])
        out = self.path("out")
        p = vol(self.store, "pull", "demo/tiny:stable", out)
        self.assertIn("pull: 3/3 files", p.stderr)  # progress on stderr
        self.assertEqual(tree(out), tree(src))
        # The environment variable names the store too.
        env = dict(os.environ, DELTAKV_VOLUME_STORE=self.store)
        p = run("volume", "show", "demo/tiny:prod", "--json", env=env)
        self.assertEqual(json.loads(p.stdout)["ref"], pushed["ref"])

    def test_checkpoint_history_uploads_only_changed_tensor_chunks(self):
        v0, v1 = self.path("v0"), self.path("v1")
        run("checkpoint", "generate", "--out", v0, "--size-mib", "8", "--files", "2")
        run("checkpoint", "mutate", "--parent", v0, "--out", v1, "--density", "0.0005", "--seed", "3")
        first = vol_json(self.store, "push", v0, "rl/policy", "--tag", "latest", "-q",
                         "--piece-size", str(256 << 10))
        second = vol_json(self.store, "push", v1, "rl/policy", "--parent", "rl/policy:latest",
                          "--tag", "latest", "-q", "--piece-size", str(256 << 10))
        self.assertEqual(second["parent"], first["digest"])
        self.assertGreater(second["chunks_total"], 8)
        self.assertLess(second["chunks_uploaded"], second["chunks_total"])
        self.assertGreater(second["chunks_uploaded"], 0)
        out = self.path("out")
        vol(self.store, "pull", "rl/policy:latest", out, "-q")
        self.assertEqual(tree(out), tree(v1))
        vol(self.store, "push", v1, "rl/policy", "--parent", "other/vol:latest", expect=2)

    def test_bad_input_is_refused_with_nothing_written(self):
        src = self.small_dir()
        r = vol_json(self.store, "push", src, "demo/tiny", "-q")
        for bad in ["demo", "Demo/tiny", "demo/tiny@sha256:abc", "demo/tiny:", "demo/tiny:-x"]:
            p = vol(self.store, "show", bad, expect=2)
            self.assertIn("error", p.stderr)
        err = vol_json(self.store, "show", "demo/tiny:none", expect=2)
        self.assertEqual(err["error"]["code"], "NOT_FOUND")
        p = run("volume", "ls", expect=2, env={k: v for k, v in os.environ.items()
                                               if k != "DELTAKV_VOLUME_STORE"})
        self.assertIn("no volume store", p.stderr)
        vol(self.store, "push", self.path("missing"), "demo/tiny", expect=2)
        os.symlink("/etc/passwd", os.path.join(src, "link"))
        p = vol(self.store, "push", src, "demo/tiny", expect=2)
        self.assertIn("symbolic link", p.stderr)
        os.unlink(os.path.join(src, "link"))
        # A non-empty target is left alone.
        full = self.path("full")
        write(os.path.join(full, "keep"), b"mine")
        vol(self.store, "pull", r["ref"], full, expect=2)
        self.assertEqual(tree(full), {"keep": (b"mine", False)})
        # A corrupt chunk: pull fails with DataLoss and leaves neither target nor partial files.
        h = hashlib.sha256(b"hello\n").hexdigest()
        chunk = os.path.join(self.store, "chunks/sha256", h[:2], h)
        with open(chunk, "r+b") as f:
            f.seek(-1, os.SEEK_END)
            last = f.read(1)
            f.seek(-1, os.SEEK_END)
            f.write(bytes([last[0] ^ 1]))
        err = vol_json(self.store, "pull", r["ref"], self.path("out"), "-q", expect=2)
        self.assertEqual(err["error"]["code"], "DATA_LOSS")
        self.assertIn("hello.txt", err["error"]["message"])
        self.assertEqual([n for n in os.listdir(self.tmp) if n.startswith("out")], [])

    def test_a_file_the_push_cannot_reach_fails_the_push(self):
        # Deep trees: a path past the 4096-byte limit is refused (exit 2), and a file whose
        # joined path passes the system's limit fails the push (exit 3) instead of being left
        # out of a version that looks complete.
        def deep(root, length):
            """top.txt and one file whose path inside `root` is `length` bytes long, made
            directory by directory (the joined path passes the system's limit)."""
            write(os.path.join(root, "top.txt"), b"top\n")
            fd = os.open(root, os.O_DIRECTORY)
            left = length
            while left > 250:
                os.mkdir("d" * 200, dir_fd=fd)
                sub = os.open("d" * 200, os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd, left = sub, left - 201
            f = os.open("f" * left, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
            os.write(f, b"deep\n")
            os.close(f)
            os.close(fd)

        over = self.path("over")
        deep(over, 4300)
        err = vol_json(self.store, "push", over, "demo/deep", "-q", expect=2)
        self.assertEqual(err["error"]["code"], "INVALID_ARGUMENT")
        self.assertIn("longer than 4096 bytes", err["error"]["message"])
        near = self.path("near")
        deep(near, 4085)  # within the limit, but not once joined to the directory's own path
        err = vol_json(self.store, "push", os.path.abspath(near), "demo/deep", "-q", expect=3)
        self.assertIn("too long", err["error"]["message"])
        self.assertNotIn("demo/deep", vol(self.store, "ls").stdout)

    def test_an_interrupted_pull_leaves_nothing_behind(self):
        # SIGINT, SIGTERM or SIGHUP mid-pull: the command still dies of the signal, but its
        # temporary directory is removed first and the target is never made.
        src = self.path("big")
        os.makedirs(src)
        for i in range(4):
            with open(os.path.join(src, f"f{i}.bin"), "wb") as f:
                f.write(os.urandom(16 << 20))
        ref = vol_json(self.store, "push", src, "demo/big", "-q")["ref"]
        interrupted = 0
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) * 2:
            target = self.path(f"out-{sig.name}-{interrupted}")
            p = subprocess.Popen([DELTAKV, "volume", "--store", self.store, "pull", "-q", ref,
                                  target], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.time() + 30
            while not [n for n in os.listdir(self.tmp) if n.startswith(os.path.basename(target))]:
                self.assertLess(time.time(), deadline)
                time.sleep(0.002)
            p.send_signal(sig)
            rc = p.wait(timeout=60)
            left = [n for n in os.listdir(self.tmp) if n.startswith(os.path.basename(target))]
            if rc == 0:  # finished before the signal came: a whole target, nothing else
                self.assertEqual(left, [os.path.basename(target)])
                continue
            self.assertEqual(rc, -sig, sig)
            self.assertEqual(left, [])
            interrupted += 1
        self.assertGreater(interrupted, 0)

    def test_only_writers_create_a_directory_store(self):
        typo = self.path("stroe")
        for args in [["ls"], ["gc"], ["show", "demo/tiny:latest"], ["rm", "demo/tiny:latest"],
                     ["tag", "demo/tiny:latest", "x"], ["pull", "demo/tiny:latest", self.path("o")]]:
            for store in [typo, "dir://" + typo]:
                err = vol_json(store, *args, expect=2)
                self.assertEqual(err["error"]["code"], "NOT_FOUND", args)
                self.assertIn("no such directory", err["error"]["message"])
                self.assertFalse(os.path.exists(typo), args)
        write(self.path("file"), b"x")
        err = vol_json(self.path("file"), "ls", expect=2)
        self.assertEqual(err["error"]["code"], "INVALID_ARGUMENT")
        # A sync from a store that does not exist does not create it.
        other = self.path("other")
        err = vol_json(other, "sync", "demo/tiny:latest", "demo/tiny", "--from", typo, expect=2)
        self.assertEqual(err["error"]["code"], "NOT_FOUND")
        self.assertFalse(os.path.exists(typo))
        # push creates the store (and the directories above it).
        nested = self.path("a", "b", "store")
        vol_json(nested, "push", self.small_dir(), "demo/tiny", "--tag", "latest", "-q")
        self.assertEqual(vol_json(nested, "ls")["volumes"][0]["name"], "tiny")

    def test_remove_restore_and_gc(self):
        a = self.small_dir("a")
        b = self.path("b")
        write(os.path.join(b, "big.bin"), os.urandom(300_000))
        ra = vol_json(self.store, "push", a, "demo/a", "-q")
        rb = vol_json(self.store, "push", b, "demo/b", "--tag", "prod", "-q")
        removed = vol_json(self.store, "rm", "demo/b:prod")
        self.assertEqual(removed["removed"], rb["ref"])
        self.assertEqual(removed["tags"], ["prod"])
        self.assertEqual(removed["restorable_until"] - removed["removed_at"], 7 * 24 * 3600)
        err = vol_json(self.store, "show", rb["ref"], expect=2)
        self.assertIn("removed", err["error"]["message"])
        listing = {v["name"]: v for v in vol_json(self.store, "ls", "demo")["volumes"]}
        self.assertEqual(listing["b"]["versions"], [])
        self.assertEqual(listing["b"]["removed"][0]["digest"], rb["digest"])
        gc = vol_json(self.store, "gc")
        self.assertEqual(gc["chunks_deleted"], 0)  # b is still restorable
        vol(self.store, "restore", "demo/b:prod")
        vol(self.store, "pull", "demo/b:prod", self.path("out-b"), "-q")
        self.assertEqual(tree(self.path("out-b")), tree(b))
        # An orphan chunk (from a failed push) is reclaimed; live chunks are kept.
        orphan = os.path.join(self.store, "chunks/sha256/ee", "e" * 64)
        write(orphan, b"x")
        dry = vol_json(self.store, "gc", "--dry-run")
        self.assertEqual(dry["chunks_deleted"], 1)
        self.assertTrue(os.path.exists(orphan))
        gc = vol_json(self.store, "gc")
        self.assertEqual((gc["chunks_deleted"], gc["bytes_freed"]), (1, 1))
        self.assertFalse(os.path.exists(orphan))
        vol(self.store, "pull", ra["ref"], self.path("out-a"), "-q")
        self.assertEqual(tree(self.path("out-a")), tree(a))

    def test_gc_reports_progress_and_ls_a_summary(self):
        a = self.small_dir("a")
        r = vol_json(self.store, "push", a, "demo/a", "--tag", "prod", "-q")
        write(os.path.join(self.store, "chunks/sha256/ee", "e" * 64), b"orphan")
        p = vol(self.store, "gc", "--dry-run")
        lines = p.stderr.strip().splitlines()
        self.assertTrue(all(line.startswith("deltakv volume gc: ") for line in lines), lines)
        # 3 chunk objects and 1 manifest; the orphan's 6 bytes would go.
        self.assertIn("4 objects scanned, 3/3 chunks checked, 1 to delete, 6 B to free", lines[-1])
        p = vol(self.store, "gc", "--json")
        self.assertIn("3/3 chunks checked, 1 deleted, 6 B freed", p.stderr.splitlines()[-1])
        out = p.stdout.strip().splitlines()
        self.assertEqual(len(out), 1)  # --json: one object on stdout, as before
        self.assertEqual(json.loads(out[0]), {
            "ok": True, "dry_run": False, "chunks_kept": 2, "chunks_deleted": 1, "bytes_freed": 6,
            "versions_purged": 0, "leases_expired": 0, "temporaries_removed": 0})
        self.assertEqual(vol(self.store, "gc", "-q").stderr, "")
        vol_json(self.store, "push", self.small_dir("b", extra=b"b"), "demo/b", "-q")
        vol(self.store, "rm", r["ref"], "-q")
        p = vol(self.store, "ls")
        self.assertEqual(p.stdout.splitlines()[-1], "2 volumes, 1 live version, 1 tag, 1 removed")
        # The removed version's tag is shown beside it.
        self.assertIn(f"  @sha256:{r['digest'][7:]}  removed at ", p.stdout)
        self.assertTrue([line for line in p.stdout.splitlines()
                         if r["digest"][7:] in line and line.endswith("  tags: prod")], p.stdout)
        self.assertEqual(json.loads(vol(self.store, "ls", "--json").stdout)["volumes"][0]["name"], "a")

    def test_retention_days_flag(self):
        a = self.small_dir("a")
        r = vol_json(self.store, "push", a, "demo/a", "--tag", "keep", "-q")
        removed = vol_json(self.store, "rm", r["ref"], "--retention-days", "0.5")
        self.assertEqual(removed["restorable_until"] - removed["removed_at"], 43200)
        # The window is not stored with the version: each command applies its own.
        listed = vol_json(self.store, "ls", "--retention-days", "2")["volumes"][0]["removed"][0]
        self.assertEqual(listed["restorable_until"] - listed["removed_at"], 2 * 86400)
        for bad in ["abc", "-1", "nan", "inf", "36501", "", "1d"]:
            p = vol(self.store, "gc", f"--retention-days={bad}", expect=1)
            self.assertIn("--retention-days", p.stderr)
        p = run("volume", "--store", self.store, "gc", expect=1,
                env=dict(os.environ, DELTAKV_VOLUME_RETENTION_DAYS="-2"))
        self.assertIn("outside 0..36500", p.stderr)
        err = vol_json(self.store, "restore", r["ref"], "--retention-days", "0", expect=2)
        self.assertEqual(err["error"]["code"], "FAILED_PRECONDITION")
        self.assertIn("retention window ended", err["error"]["message"])
        gc = vol_json(self.store, "gc", "-q")  # 7 days by default: kept
        self.assertEqual((gc["chunks_deleted"], gc["versions_purged"]), (0, 0))
        gc = vol_json(self.store, "gc", "-q", "--retention-days", "0.25")  # not over yet
        self.assertEqual((gc["chunks_deleted"], gc["versions_purged"]), (0, 0))
        p = run("volume", "--store", self.store, "gc", "--json", "-q",
                env=dict(os.environ, DELTAKV_VOLUME_RETENTION_DAYS="0"))
        gc = json.loads(p.stdout)
        self.assertEqual((gc["chunks_deleted"], gc["versions_purged"]), (2, 1))
        err = vol_json(self.store, "restore", r["ref"], expect=2)
        self.assertEqual(err["error"]["code"], "NOT_FOUND")
        # The tag outlives its purged version: ls shows it on its own line and counts it.
        p = vol(self.store, "ls")
        self.assertIn(f"  tag keep -> @sha256:{r['digest'][7:]}  (version purged)", p.stdout)
        self.assertEqual(p.stdout.splitlines()[-1], "1 volume, 0 live versions, 1 tag, 0 removed")

    def test_sync_between_stores(self):
        src = self.path("src")
        write(os.path.join(src, "w.bin"), os.urandom(200_000))
        r = vol_json(self.store, "push", src, "demo/w", "--tag", "prod", "-q")
        other = self.path("other-store")
        s = vol_json(other, "sync", "demo/w:prod", "demo/w", "--from", self.store, "--tag", "prod", "-q")
        self.assertEqual(s["digest"], r["digest"])
        self.assertEqual(s["chunks_uploaded"], s["chunks_total"])
        again = vol_json(other, "sync", r["ref"], "demo/w", "--from", self.store, "-q")
        self.assertEqual(again["chunks_uploaded"], 0)
        vol(other, "pull", "demo/w:prod", self.path("out"), "-q")
        self.assertEqual(tree(self.path("out")), tree(src))
        vol(other, "sync", "demo/w:nope", "demo/w", "--from", self.store, expect=2)

    def test_tag_create_race_has_one_winner(self):
        src = self.small_dir()
        r = vol_json(self.store, "push", src, "demo/tiny", "-q")
        for round_ in range(5):
            procs = [subprocess.Popen([DELTAKV, "volume", "--store", self.store, "tag", r["ref"],
                                       f"race{round_}", "--create", "-q"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                     for _ in range(4)]
            codes = sorted(p.wait() for p in procs)
            self.assertEqual(codes, [0, 2, 2, 2])

    def test_concurrent_pushes_and_gcs_lose_nothing(self):
        dirs = []
        for i in range(6):
            d = self.path(f"src{i}")
            write(os.path.join(d, "shared.bin"), b"s" * 50_000)  # the same chunks in every version
            write(os.path.join(d, "own.bin"), os.urandom(120_000))
            dirs.append(d)

        def push_until_done(d, i):
            # Pushes refuse to start while a gc holds the sweep marker: retry, as users would.
            for _ in range(200):
                p = subprocess.run([DELTAKV, "volume", "--store", self.store, "push", d,
                                    f"demo/v{i}", "--json", "-q"], capture_output=True, text=True)
                if p.returncode == 0:
                    return json.loads(p.stdout)
                self.assertIn("gc", p.stderr)
                time.sleep(0.01)
            self.fail("push never got past gc")

        import concurrent.futures
        stop = False
        gcs = {"ran": 0}
        os.makedirs(self.store)  # gc runs on the store from the start; only pushes create it

        def gc_loop():
            while not stop:
                p = subprocess.run([DELTAKV, "volume", "--store", self.store, "gc", "-q"],
                                   capture_output=True, text=True)
                if p.returncode == 0:
                    gcs["ran"] += 1
                else:
                    self.assertIn("another gc holds", p.stderr)

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            gc_futures = [pool.submit(gc_loop) for _ in range(2)]
            pushes = [pool.submit(push_until_done, d, i) for i, d in enumerate(dirs)]
            results = [f.result() for f in pushes]
            stop = True
            for f in gc_futures:
                f.result()
        self.assertGreater(gcs["ran"], 0)
        vol(self.store, "gc", "-q")
        for i, r in enumerate(results):
            out = self.path(f"out{i}")
            vol(self.store, "pull", r["ref"], out, "-q")
            self.assertEqual(tree(out), tree(dirs[i]))

    def test_read_only_http_store(self):
        src = self.small_dir()
        r = vol_json(self.store, "push", src, "demo/web", "--tag", "prod", "-q")
        server = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind",
                                   "127.0.0.1", "--directory", self.store],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            port = int(server.stdout.readline().split("port ")[1].split()[0])
            web = f"http://127.0.0.1:{port}"
            # Show and pull by digest and by tag (the directory store's tag file form).
            shown = vol_json(web, "show", "demo/web:prod")
            self.assertEqual(shown["digest"], r["digest"])
            vol(web, "pull", r["ref"], self.path("out"), "-q")
            self.assertEqual(tree(self.path("out")), tree(src))
            # Copy from the web store into another store, chunk by chunk, verified.
            other = self.path("other")
            c = vol_json(other, "sync", "demo/web:prod", "demo/web", "--from", web, "-q")
            self.assertEqual(c["digest"], r["digest"])
            vol(other, "pull", "demo/web@" + r["digest"], self.path("out2"), "-q")
            self.assertEqual(tree(self.path("out2")), tree(src))
            # Writes and listings are refused, naming the store; missing tags are NotFound.
            p = vol(web, "push", src, "demo/web", "-q", expect=2)
            self.assertIn("read-only", p.stderr)
            p = vol(web, "ls", expect=2)
            self.assertIn("cannot list", p.stderr)
            p = vol(web, "gc", expect=2)  # not taken for another gc's marker
            self.assertIn("read-only", p.stderr)
            self.assertNotIn("another gc", p.stderr)
            vol(web, "show", "demo/web:nope", expect=2)
        finally:
            server.kill()
            server.wait()
            server.stdout.close()

    def scenario_store(self):
        def list_keys():
            # The directory store's own temporary and lock files start with '.': not keys.
            return sorted(os.path.relpath(os.path.join(d, n), self.store)
                          for d, _, files in os.walk(self.store) for n in files
                          if not n.startswith("."))

        def read_key(key):
            with open(os.path.join(self.store, key), "rb") as f:
                return f.read()
        return volume_scenarios.Store(DELTAKV, self.store, None, list_keys, read_key)

    def temporary_files(self):
        return [n for d, _, files in os.walk(self.store) for n in files if ".tmp." in n]

    def test_push_killed_midway_uploads_the_rest_when_pushed_again(self):
        volume_scenarios.push_killed_midway_then_repushed(self, self.scenario_store(), self.tmp,
                                                          files=8, file_bytes=4 << 20)
        # At most the files being written when it was killed: 8 uploads run at once by default.
        self.assertLessEqual(len(self.temporary_files()), 8)

    def test_two_pushes_and_a_tag_move_race(self):
        volume_scenarios.two_pushes_and_a_tag_move_race(self, self.scenario_store(), self.tmp)
        self.assertEqual(self.temporary_files(), [])

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    args, rest = ap.parse_known_args()
    DELTAKV = os.path.abspath(args.deltakv)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
