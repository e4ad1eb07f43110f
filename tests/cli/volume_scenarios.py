"""Scenarios of `deltakv volume` run against each kind of store: volume_cli_test.py runs them on
a directory store, volume_s3_test.py on moto's S3 server. Each takes a Store: its URL, the
environment deltakv runs with, and a way to list and read the store's keys with a client of its
own (the file system, the aws CLI), so what a scenario checks does not depend on deltakv's
reading of the store.
"""
import hashlib, json, os, signal, subprocess, time

KIB = 1 << 10


class Store:
    def __init__(self, deltakv, url, env, list_keys, read_key):
        self.deltakv = deltakv
        self.url = url
        self.env = env
        self.list_keys = list_keys  # () -> sorted keys, relative to the store's root
        self.read_key = read_key    # (key) -> bytes of a plain object

    def argv(self, *args):
        return [self.deltakv, "volume", "--store", self.url, *args]

    def run(self, *args, expect=0):
        p = subprocess.run(self.argv(*args), capture_output=True, text=True, env=self.env)
        if p.returncode != expect:
            raise AssertionError(f"deltakv volume {' '.join(args)}: exit {p.returncode}, wanted "
                                 f"{expect}\nstdout: {p.stdout}\nstderr: {p.stderr}")
        return p

    def json(self, *args, expect=0):
        return json.loads(self.run(*args, "--json", "-q", expect=expect).stdout)

    def chunk_objects(self):
        return [k for k in self.list_keys()
                if k.startswith("chunks/sha256/") or k.startswith("xchunks/sha256/")]


def write(path, data, mode=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    if mode is not None:
        os.chmod(path, mode)


def tree(root):
    """{relative path: (bytes, executable)} of every regular file under root."""
    out = {}
    for d, _, files in os.walk(root):
        for name in files:
            full = os.path.join(d, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, root)] = (f.read(), bool(os.stat(full).st_mode & 0o100))
    return out


def pulls_exactly(tc, store, ref, src, out):
    store.run("pull", ref, out, "-q")
    tc.assertEqual(tree(out), tree(src), ref)


def push_killed_midway_then_repushed(tc, store, tmp, files, file_bytes, settle=lambda: None):
    """SIGKILLs a push after its first chunk upload, counts the chunk objects the store holds
    then (at least one, fewer than the version has: the kill was midway), and checks that a new
    push of the same directory uploads exactly the others and pulls back byte for byte. Tries
    again with new contents and one thread if the push finished before it was killed.
    `settle` waits until writes the killed process had sent have landed."""
    for attempt, threads in enumerate(["0", "1", "1"]):
        src = os.path.join(tmp, f"kill-src{attempt}")  # new bytes: nothing to dedup against
        for i in range(files):
            write(os.path.join(src, f"part{i}.bin"), os.urandom(file_bytes))
        volume = f"demo/killed{attempt}"
        before = set(store.chunk_objects())
        p = subprocess.Popen(store.argv("push", src, volume, "--threads", threads),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env=store.env)
        line = p.stderr.readline()  # the first progress line: one chunk is stored
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        p.stderr.close()
        settle()
        tc.assertIn("chunks checked", line)
        present = len(set(store.chunk_objects()) - before)
        tc.assertGreaterEqual(present, 1)
        listing = store.json("ls", "demo")["volumes"]  # the killed push sealed nothing
        tc.assertEqual([d for v in listing if v["name"] == volume[5:] for d in v["versions"]], [])
        # Its lease keeps what it uploaded from gc until it expires; a new push completes it.
        r = store.json("push", src, volume)
        if present == r["chunks_total"]:
            continue  # it had finished uploading: not midway
        tc.assertLess(present, r["chunks_total"])
        tc.assertEqual(r["chunks_uploaded"], r["chunks_total"] - present, (present, r))
        pulls_exactly(tc, store, r["ref"], src, os.path.join(tmp, f"kill-out{attempt}"))
        return
    tc.fail("every push finished before it could be killed")


def two_pushes_and_a_tag_move_race(tc, store, tmp, rounds=3):
    """Each round starts at once, as separate processes, two pushes of different versions of
    one volume with --tag T and a `tag` that moves T to the first version, while `show T` runs
    in a loop. All succeed; every show finds a whole version; T then names one of the three;
    every version pulls back exactly; the store holds only whole objects: each manifest hashes
    to its name and has its info record, no lease is left, and no chunk object is
    unreferenced."""
    base = os.path.join(tmp, "race-v0")
    write(os.path.join(base, "shared.bin"), b"s" * (200 * KIB))
    write(os.path.join(base, "own.bin"), os.urandom(100 * KIB))
    v0 = store.json("push", base, "demo/race", "--tag", "T")
    sources = {v0["digest"]: base}
    for r in range(rounds):
        dirs = []
        for side in "ab":
            d = os.path.join(tmp, f"race-{r}{side}")
            write(os.path.join(d, "shared.bin"), b"s" * (200 * KIB))  # chunks both push at once
            write(os.path.join(d, "own.bin"), os.urandom(300 * KIB))
            write(os.path.join(d, "bin/run.sh"), f"#!/bin/sh\necho {r}{side}\n".encode(), 0o755)
            dirs.append(d)
        cmds = [store.argv("push", d, "demo/race", "--tag", "T", "--json", "-q") for d in dirs]
        cmds.append(store.argv("tag", v0["ref"], "T", "--json", "-q"))
        procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=store.env) for c in cmds]
        try:
            # Meanwhile a reader resolves T and verifies its manifest: always a whole version.
            seen = []
            while any(p.poll() is None for p in procs):
                seen.append(store.json("show", "demo/race:T")["digest"])
            outs = [p.communicate(timeout=60) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.communicate()
        for p, (out, err) in zip(procs, outs):
            tc.assertEqual(p.returncode, 0, f"{' '.join(p.args)}\n{out}\n{err}")
        pushed = [json.loads(outs[i][0])["digest"] for i in range(2)]
        tc.assertNotEqual(pushed[0], pushed[1])
        sources.update(zip(pushed, dirs))
        tc.assertLessEqual(set(seen), set(sources), f"round {r}")
        tag = store.json("show", "demo/race:T")["digest"]
        tc.assertIn(tag, [v0["digest"], *pushed], f"round {r}")
    listing = store.json("ls", "demo")["volumes"]
    tc.assertEqual(len(listing), 1)
    tc.assertEqual(sorted(listing[0]["versions"]), sorted(sources))
    tc.assertEqual([t["tag"] for t in listing[0]["tags"]], ["T"])
    for i, (digest, src) in enumerate(sorted(sources.items())):
        pulls_exactly(tc, store, "demo/race@" + digest, src, os.path.join(tmp, f"race-out{i}"))
    keys = store.list_keys()
    prefix = "volumes/demo/race/"
    manifests = [k for k in keys if k.startswith(prefix + "versions/")]
    tc.assertEqual(len(manifests), len(sources))
    for k in manifests:
        hexdigest = k[len(prefix + "versions/"):-len(".json")]
        tc.assertEqual(hashlib.sha256(store.read_key(k)).hexdigest(), hexdigest, k)
        tc.assertIn(prefix + "info/" + hexdigest + ".json", keys)
    tc.assertEqual([k for k in keys if "/pushes/" in k], [])
    tc.assertEqual(store.json("gc", "--dry-run")["chunks_deleted"], 0)
