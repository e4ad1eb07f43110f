"""End-to-end tests of `deltakv volume sync s3://BUCKET/PREFIX NS/NAME`: plain files put into
moto's S3 server on loopback (tests/store/s3_helper.py) by an independent client (the aws CLI
from the moto venv) are sealed as a version, pulled back and compared byte for byte, and give
the digest `volume push` gives for the directory they were copied from. Faults: a missing
bucket or prefix, refused credentials, an object replaced while it is read, and a sync killed
part way (a proxy in front of moto holds the source's reads at a chosen point); keys that need
percent-encoding, signed as botocore signs them (tests/cli/s3_signed_source_stub.py). Skipped, with a
message, when the moto venv that scripts/setup-deps.sh makes is absent.

Run: python3 tests/cli/volume_sync_plain_test.py --deltakv build/sidecar/deltakv
"""
import argparse, http.client, http.server, json, os, random, shutil, signal, struct, subprocess
import sys, tempfile, threading, time, unittest

import volume_scenarios

DELTAKV = None
VENV = os.environ.get("DELTAKV_MOTO_VENV", os.path.expanduser("~/.cache/deltakv-venvs/moto"))
HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "store", "s3_helper.py")
MIB = 1 << 20


def have_venv():
    return os.path.exists(os.path.join(VENV, "bin", "aws"))


def start_moto(tmp, name, auth=False):
    """moto's S3 server on a free loopback port; returns (process, ready-file contents)."""
    ready = os.path.join(tmp, name + ".json")
    server = subprocess.Popen([os.path.join(VENV, "bin", "python"), HELPER, "moto", "--ready",
                               ready] + (["--auth"] if auth else []))
    deadline = time.time() + 60
    while not os.path.exists(ready):
        if server.poll() is not None or time.time() > deadline:
            server.kill()
            raise RuntimeError("moto server did not start")
        time.sleep(0.05)
    with open(ready) as f:
        return server, json.load(f)


def stop(server):
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=30)


def aws_env(tmp, endpoint, key="testing", secret="testing"):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and "proxy" not in k.lower()}
    env.update(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret, AWS_REGION="us-east-1",
               AWS_ENDPOINT_URL=endpoint, AWS_CONFIG_FILE=os.path.join(tmp, "no-config"),
               AWS_SHARED_CREDENTIALS_FILE=os.path.join(tmp, "no-credentials"))
    for name in ("no-config", "no-credentials"):
        open(os.path.join(tmp, name), "w").close()
    return env


def aws(env, *args):
    p = subprocess.run([os.path.join(VENV, "bin", "aws"), *args], capture_output=True, text=True,
                       env=env, timeout=60)
    if p.returncode != 0:
        raise AssertionError(f"aws {' '.join(args)}: exit {p.returncode}\n{p.stderr}")
    return p.stdout


def deltakv(env, *args, expect=0):
    p = subprocess.run([DELTAKV, *args], capture_output=True, text=True, env=env, timeout=60)
    if p.returncode != expect:
        raise AssertionError(f"deltakv {' '.join(args)}: exit {p.returncode}, wanted {expect}\n"
                             f"stdout: {p.stdout}\nstderr: {p.stderr}")
    return p


def vol_json(env, store, *args, expect=0):
    p = deltakv(env, "volume", "--store", store, *args, "--json", expect=expect)
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def write_safetensors(path, tensors):
    """A safetensors file of U8 tensors, in the given order (independent of deltakv)."""
    header, offset = {}, 0
    for name, data in tensors:
        header[name] = {"dtype": "U8", "shape": [len(data)],
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for _, data in tensors:
            f.write(data)


def sparse_step(data, step):
    out = bytearray(data)
    rng = random.Random(1000 + step)
    for _ in range(300):
        out[rng.randrange(len(out))] ^= rng.randrange(1, 255)
    return bytes(out)


def make_source(root, seed, weights_mib=9, step=0):
    """A model directory: a safetensors file (above the aws CLI's 8 MB multipart threshold by
    default), a binary file for content-defined chunks, text files, an empty file, a key with a
    space and a '+', nested directories. All files 0644, as S3 keeps no modes."""
    rng = random.Random(seed)
    os.makedirs(os.path.join(root, "tokenizer"))
    os.makedirs(os.path.join(root, "extra", "deep"))
    w1 = random.Random(7).randbytes(2 * MIB)
    write_safetensors(os.path.join(root, "model.safetensors"),
                      [("embed", rng.randbytes(weights_mib * MIB - 2 * MIB - 4096)),
                       ("norm", rng.randbytes(4096)), ("w1", sparse_step(w1, step) if step else w1)])
    with open(os.path.join(root, "tokenizer", "vocab.bin"), "wb") as f:
        f.write(rng.randbytes(1536 * 1024))
    with open(os.path.join(root, "config.json"), "w") as f:
        json.dump({"seed": seed, "hidden": 64}, f)
    with open(os.path.join(root, "extra", "deep", "notes v1+final.txt"), "w") as f:
        f.write("release notes\n" * 100)
    open(os.path.join(root, "extra", "empty"), "w").close()
    return root


def tree(root):
    """{relative path: bytes} of every regular file under root."""
    return {path: data for path, (data, _) in volume_scenarios.tree(root).items()}


class Proxy:
    """Forwards HTTP requests to moto, calling hook(method, path, headers) first; the hook may
    block or change the bucket. Runs on a thread of its own until close()."""

    def __init__(self, upstream_port, hook):
        outer = self
        self.release = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def forward(self):
                try:
                    self.relay()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client was killed

            def relay(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n) if n else b""
                hook(self.command, self.path, self.headers)
                conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=30)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("connection", "keep-alive")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() in ("transfer-encoding", "connection"):
                        continue
                    if k.lower() == "content-length" and self.command != "HEAD":
                        continue
                    self.send_header(k, v)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


class SyncPlainTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not have_venv():
            raise unittest.SkipTest(f"no moto venv at {VENV} (scripts/setup-deps.sh makes it)")
        cls.tmp = tempfile.mkdtemp(prefix="deltakv-sync-plain-")
        cls.server, ready = start_moto(cls.tmp, "moto")
        cls.port = ready["port"]
        cls.env = aws_env(cls.tmp, f"http://127.0.0.1:{cls.port}")
        for bucket in ("plain", "vols"):
            aws(cls.env, "s3", "mb", f"s3://{bucket}")

    @classmethod
    def tearDownClass(cls):
        stop(cls.server)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def upload(self, src, url):
        aws(self.env, "s3", "cp", "--recursive", "--quiet", src, url)

    def test_sync_seals_what_push_seals_and_pulls_back(self):
        src = make_source(os.path.join(self.tmp, "one"), seed=1)
        self.upload(src, "s3://plain/models/one/")
        # Neither a sibling prefix nor a console's folder marker is part of the source.
        aws(self.env, "s3api", "put-object", "--bucket", "plain", "--key", "models/one-b/x",
            "--body", os.path.join(src, "config.json"))
        aws(self.env, "s3api", "put-object", "--bucket", "plain", "--key", "models/one/folder/")
        store = "s3://vols/store1"
        r, stderr = vol_json(self.env, store, "sync", "s3://plain/models/one", "team/m",
                             "--tag", "v1")
        self.assertEqual(r["files"], len(tree(src)))
        self.assertEqual(r["chunks_uploaded"], r["chunks_total"])
        self.assertEqual(r["source"], "s3://plain/models/one")
        self.assertIn(f"deltakv volume sync: {r['files']}/{r['files']} files, 10.50 MiB of "
                      "10.50 MiB read", stderr)
        # The same directory pushed: the same version, nothing to upload.
        p, _ = vol_json(self.env, store, "push", src, "team/m")
        self.assertEqual(p["digest"], r["digest"])
        self.assertEqual(p["chunks_uploaded"], 0)
        # Synced again: the same version, nothing to upload.
        again, _ = vol_json(self.env, store, "sync", "s3://plain/models/one/", "team/m", "-q")
        self.assertEqual(again["digest"], r["digest"])
        self.assertEqual(again["chunks_uploaded"], 0)
        out = os.path.join(self.tmp, "out1")
        deltakv(self.env, "volume", "--store", store, "pull", "team/m:v1", out, "-q")
        self.assertEqual(tree(out), tree(src))
        # file:// reads the directory itself, as push does.
        d, _ = vol_json(self.env, store, "sync", "file://" + src, "team/m", "-q")
        self.assertEqual(d["digest"], r["digest"])

    def test_sync_with_parent_stores_xor_chunks_as_push_does(self):
        v0 = make_source(os.path.join(self.tmp, "x0"), seed=5, weights_mib=4)
        v1 = make_source(os.path.join(self.tmp, "x1"), seed=5, weights_mib=4, step=1)
        self.upload(v0, "s3://plain/xor/v0/")
        self.upload(v1, "s3://plain/xor/v1/")
        store = os.path.join(self.tmp, "xorstore")
        piece = ["--piece-size", str(512 << 10)]
        a, _ = vol_json(self.env, store, "sync", "s3://plain/xor/v0", "team/x", "--tag", "v0",
                        "-q", *piece)
        b, _ = vol_json(self.env, store, "sync", "s3://plain/xor/v1", "team/x", "--parent",
                        "team/x:v0", "-q", *piece)
        self.assertEqual(b["parent"], a["digest"])
        self.assertEqual(b["chunks_xor"], 4, "the four pieces of w1 change sparsely")
        self.assertLess(b["bytes_uploaded"], 200_000)
        p, _ = vol_json(self.env, store, "push", v1, "team/x", "--parent", "team/x:v0", "-q",
                        *piece)
        self.assertEqual(p["digest"], b["digest"])
        self.assertEqual(p["chunks_uploaded"], 0)
        out = os.path.join(self.tmp, "xout")
        deltakv(self.env, "volume", "--store", store, "pull", f"team/x@{b['digest']}", out, "-q")
        self.assertEqual(tree(out), tree(v1))

    def test_missing_bucket_empty_prefix_and_bad_sources(self):
        store = os.path.join(self.tmp, "errstore")
        cases = [
            (["s3://no-such-bucket/x"], "bucket 'no-such-bucket' does not exist"),
            (["s3://plain/nothing/here"], "no objects under s3://plain/nothing/here/"),
            (["s3://Bad_Bucket/x"], "bucket 'Bad_Bucket'"),
            (["http://127.0.0.1:1/x"], "an http(s):// URL serves a volume store"),
            (["file://relative/dir"], "is not file:///ABSOLUTE/PATH"),
            (["team/m:v1"], "--from STORE names the store it is in"),
            (["s3://plain/models", "--from", store], "is a plain source, read directly"),
            (["team/m:v1", "--from", store, "--piece-size", "65536"],
             "--piece-size applies to a plain source"),
        ]
        for args, message in cases:
            r, stderr = vol_json(self.env, store, "sync", *args, "team/m", expect=2)
            self.assertFalse(r["ok"])
            self.assertIn(message, r["error"]["message"], args)
            self.assertIn(message, stderr, args)
        aws(self.env, "s3api", "put-object", "--bucket", "plain", "--key", "markers/only/")
        r, _ = vol_json(self.env, store, "sync", "s3://plain/markers", "team/m", expect=2)
        self.assertIn("only empty folder markers", r["error"]["message"])
        listed, _ = vol_json(self.env, store, "ls")
        self.assertEqual(listed["volumes"], [])

    def test_object_replaced_while_it_is_read(self):
        src = make_source(os.path.join(self.tmp, "chg"), seed=9)
        self.upload(src, "s3://plain/chg/")
        replaced = []
        other = os.path.join(self.tmp, "other.bin")
        with open(other, "wb") as f:
            f.write(b"x" * 1000)

        def hook(method, path, headers):
            # The second ranged GET of the safetensors file (its first 8 MiB were asked for).
            rng = headers.get("Range", "")
            if (method == "GET" and path.startswith("/plain/chg/model.safetensors")
                    and rng and not rng.startswith("bytes=0-") and not replaced):
                replaced.append(rng)
                aws(self.env, "s3", "cp", "--quiet", other, "s3://plain/chg/model.safetensors")

        proxy = Proxy(self.port, hook)
        try:
            env = dict(self.env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{proxy.port}")
            store = os.path.join(self.tmp, "chgstore")
            r, _ = vol_json(env, store, "sync", "s3://plain/chg", "team/c", "--tag", "t",
                            expect=2)
        finally:
            proxy.close()
        self.assertTrue(replaced)
        message = r["error"]["message"]
        self.assertIn("s3://plain/chg/model.safetensors changed since it was listed", message)
        self.assertEqual(r["error"]["code"], "FAILED_PRECONDITION")
        listed, _ = vol_json(self.env, store, "ls")
        self.assertEqual(listed["volumes"], [])
        deltakv(self.env, "volume", "--store", store, "show", "team/c:t", expect=2)

    def test_killed_sync_leaves_no_version_and_a_rerun_uploads_only_missing_chunks(self):
        src = make_source(os.path.join(self.tmp, "kill"), seed=11, weights_mib=3)
        for i in range(6):
            with open(os.path.join(src, f"shard-{i}.bin"), "wb") as f:
                f.write(random.Random(100 + i).randbytes(600_000))
        self.upload(src, "s3://plain/kill/")
        store = os.path.join(self.tmp, "killstore")
        answered, held = [0], threading.Event()

        def hook(method, path, headers):
            if method != "GET" or "Range" not in headers:
                return
            with lock:
                answered[0] += 1
                hold = answered[0] > 5
            if hold:  # this read never gets an answer: the sync is stuck here until killed
                held.set()
                proxy.release.wait()

        lock = threading.Lock()
        proxy = Proxy(self.port, hook)
        env = dict(self.env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{proxy.port}")
        proc = subprocess.Popen([DELTAKV, "volume", "--store", store, "sync", "s3://plain/kill",
                                 "team/k", "--tag", "t", "-q"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        try:
            self.assertTrue(held.wait(20), "the sync did not reach its sixth read")
            chunks_dir = os.path.join(store, "chunks")
            deadline = time.time() + 10
            while time.time() < deadline and not self.count_chunks(chunks_dir):
                time.sleep(0.05)
            time.sleep(0.3)  # let uploads of the files already read land
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=10)
        finally:
            proc.kill()
            proxy.close()
        stored = self.count_chunks(chunks_dir)
        self.assertGreater(stored, 0)
        listed, _ = vol_json(self.env, store, "ls")
        self.assertEqual(listed["volumes"], [])
        deltakv(self.env, "volume", "--store", store, "show", "team/k:t", expect=2)
        r, _ = vol_json(self.env, store, "sync", "s3://plain/kill", "team/k", "--tag", "t", "-q")
        self.assertLess(stored, r["chunks_total"])
        self.assertEqual(r["chunks_uploaded"], r["chunks_total"] - stored)
        p, _ = vol_json(self.env, store, "push", src, "team/k", "-q")
        self.assertEqual(p["digest"], r["digest"])
        self.assertEqual(p["chunks_uploaded"], 0)

    @staticmethod
    def count_chunks(chunks_dir):
        n = 0
        for _, _, files in os.walk(chunks_dir):
            n += sum(1 for f in files if not f.startswith("."))
        return n


class SyncPlainCredentialsTest(unittest.TestCase):
    """moto checking every request's SigV4 signature (s3_helper.py moto --auth)."""

    @classmethod
    def setUpClass(cls):
        if not have_venv():
            raise unittest.SkipTest(f"no moto venv at {VENV} (scripts/setup-deps.sh makes it)")
        cls.tmp = tempfile.mkdtemp(prefix="deltakv-sync-auth-")
        cls.server, ready = start_moto(cls.tmp, "moto-auth", auth=True)
        cls.secret = ready["secret"]
        cls.env = aws_env(cls.tmp, f"http://127.0.0.1:{ready['port']}", ready["key"],
                          ready["secret"])

    @classmethod
    def tearDownClass(cls):
        stop(cls.server)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_refused_credentials_are_reported_without_the_secret(self):
        src = os.path.join(self.tmp, "src")
        os.makedirs(src)
        with open(os.path.join(src, "weights.bin"), "wb") as f:
            f.write(random.Random(3).randbytes(300_000))
        with open(os.path.join(src, "config.json"), "w") as f:
            f.write("{}")
        # The whole bucket: moto's signature check refuses ListObjectsV2 with a '/' in the
        # prefix, whoever signs it (VOLUME.md 2.1).
        aws(self.env, "s3", "cp", "--recursive", "--quiet", src, "s3://authed/")
        store = os.path.join(self.tmp, "store")
        r, _ = vol_json(self.env, store, "sync", "s3://authed", "team/a", "-q")
        p, _ = vol_json(self.env, store, "push", src, "team/a", "-q")
        self.assertEqual(p["digest"], r["digest"])
        wrong = dict(self.env, AWS_SECRET_ACCESS_KEY="not-the-secret")
        r, stderr = vol_json(wrong, store, "sync", "s3://authed", "team/a", "-q", expect=3)
        self.assertIn("HTTP 403 SignatureDoesNotMatch", r["error"]["message"])
        self.assertNotIn("not-the-secret", stderr + json.dumps(r))
        unknown = dict(self.env, AWS_ACCESS_KEY_ID="AKIAUNKNOWNKEY000000")
        r, stderr = vol_json(unknown, store, "sync", "s3://authed", "team/a", "-q", expect=3)
        self.assertIn("HTTP 403 InvalidAccessKeyId", r["error"]["message"])
        self.assertNotIn(self.secret, stderr + json.dumps(r))


class SyncPlainSignatureTest(unittest.TestCase):
    """Keys that need percent-encoding, read from a stub that checks every signature with
    botocore's S3SigV4Auth (s3_signed_source_stub.py) and lists keys encoded as AWS does."""

    def test_encoded_keys_are_signed_as_botocore_signs_them(self):
        if not have_venv():
            self.skipTest(f"no moto venv at {VENV} (scripts/setup-deps.sh makes it)")
        tmp = tempfile.mkdtemp(prefix="deltakv-sync-sig-")
        self.addCleanup(shutil.rmtree, tmp, True)
        src = os.path.join(tmp, "src")
        os.makedirs(os.path.join(src, "dir with space", "(x)"))
        names = ["a b+c.txt", "caf\u00e9~1.bin", "dir with space/(x)/p&q=r;s.json", "100%.txt"]
        for i, name in enumerate(names):
            with open(os.path.join(src, name), "wb") as f:
                f.write(random.Random(i).randbytes(50_000 * i + 10))
        ready = os.path.join(tmp, "ready.json")
        stub = subprocess.Popen([os.path.join(VENV, "bin", "python"),
                                 os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              "s3_signed_source_stub.py"),
                                 "--ready", ready, "--dir", src, "--bucket", "signed",
                                 "--prefix", "pre"])
        self.addCleanup(stop, stub)
        deadline = time.time() + 30
        while not os.path.exists(ready):
            self.assertIsNone(stub.poll(), "stub exited")
            self.assertLess(time.time(), deadline, "stub did not start")
            time.sleep(0.05)
        with open(ready) as f:
            port = json.load(f)["port"]
        env = aws_env(tmp, f"http://127.0.0.1:{port}", "AKIDEXAMPLE", "wJalr/K7+MDENG")
        store = os.path.join(tmp, "store")
        r, _ = vol_json(env, store, "sync", "s3://signed/pre", "team/s", "-q")
        self.assertEqual(r["files"], len(names))
        out = os.path.join(tmp, "out")
        deltakv(env, "volume", "--store", store, "pull", f"team/s@{r['digest']}", out, "-q")
        self.assertEqual(tree(out), tree(src))
        p, _ = vol_json(env, store, "push", src, "team/s", "-q")
        self.assertEqual(p["digest"], r["digest"])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/__checked")
        verified, refused = map(int, conn.getresponse().read().split())
        conn.close()
        self.assertEqual(refused, 0)
        self.assertGreaterEqual(verified, len(names) + 1)


def main():
    global DELTAKV
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    args, rest = ap.parse_known_args()
    DELTAKV = os.path.abspath(args.deltakv)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
