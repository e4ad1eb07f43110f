"""End-to-end tests of `deltakv volume` on an S3 store: moto's S3 server on loopback
(tests/store/s3_helper.py), objects written by deltakv read back with an independent client
(the aws CLI and boto3 from the moto venv, plain HTTP) and objects written by that client read
by deltakv, the scenarios of volume_scenarios.py (a push killed with SIGKILL, racing pushes
and tag moves) on S3, writes whose answers are lost on the way back (lost_answer_proxy.py) and
an endpoint that is not S3.
Skipped, with a message, when the moto venv that scripts/setup-deps.sh makes is absent.

Run: python3 tests/cli/volume_s3_test.py --deltakv build/sidecar/deltakv
"""
import argparse, hashlib, json, os, shutil, signal, subprocess, sys, tempfile, time, unittest
import urllib.parse, urllib.request, xml.etree.ElementTree as ET

import volume_scenarios
from lost_answer_proxy import LostAnswerProxy

DELTAKV = None
VENV = os.environ.get("DELTAKV_MOTO_VENV", os.path.expanduser("~/.cache/deltakv-venvs/moto"))
HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "store", "s3_helper.py")


def have_venv():
    return os.path.exists(os.path.join(VENV, "bin", "aws"))


class S3VolumeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not have_venv():
            raise unittest.SkipTest(f"no moto venv at {VENV} (scripts/setup-deps.sh makes it)")
        cls.tmp = tempfile.mkdtemp(prefix="deltakv-s3-")
        ready = os.path.join(cls.tmp, "ready.json")
        cls.server = subprocess.Popen([os.path.join(VENV, "bin", "python"), HELPER, "moto",
                                       "--ready", ready])
        deadline = time.time() + 60
        while not os.path.exists(ready):
            if cls.server.poll() is not None or time.time() > deadline:
                raise RuntimeError("moto server did not start")
            time.sleep(0.05)
        with open(ready) as f:
            port = json.load(f)["port"]
        cls.endpoint = f"http://127.0.0.1:{port}"
        cls.env = {k: v for k, v in os.environ.items()
                   if not k.startswith("AWS_") and "proxy" not in k.lower()}
        cls.env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                       AWS_REGION="us-east-1", AWS_ENDPOINT_URL=cls.endpoint,
                       AWS_CONFIG_FILE=os.path.join(cls.tmp, "no-config"),
                       AWS_SHARED_CREDENTIALS_FILE=os.path.join(cls.tmp, "no-credentials"))
        open(cls.env["AWS_CONFIG_FILE"], "w").close()
        open(cls.env["AWS_SHARED_CREDENTIALS_FILE"], "w").close()
        cls.aws("s3", "mb", "s3://vols")

    @classmethod
    def tearDownClass(cls):
        cls.server.send_signal(signal.SIGTERM)
        try:
            cls.server.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a test left a client behind: do not leave moto too
            cls.server.kill()
            cls.server.wait()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def aws(cls, *args):
        p = subprocess.run([os.path.join(VENV, "bin", "aws"), "--endpoint-url", cls.endpoint,
                            *args], capture_output=True, text=True, env=cls.env)
        if p.returncode != 0:
            raise AssertionError(f"aws {' '.join(args)}: exit {p.returncode}\n{p.stderr}")
        return p.stdout

    def deltakv(self, *args, expect=0, env=None):
        p = subprocess.run([DELTAKV, *args], capture_output=True, text=True, env=env or self.env)
        if (p.returncode == 0) if expect == "fail" else (p.returncode != expect):
            raise AssertionError(f"deltakv {' '.join(args)}: exit {p.returncode}, wanted "
                                 f"{expect}\nstdout: {p.stdout}\nstderr: {p.stderr}")
        return p

    def vol_json(self, store, *args, expect=0, env=None):
        p = self.deltakv("volume", "--store", store, *args, "--json", expect=expect, env=env)
        return json.loads(p.stdout.strip().splitlines()[-1])

    def make_dir(self, name, seed):
        d = os.path.join(self.tmp, name)
        os.makedirs(os.path.join(d, "sub"))
        data = hashlib.sha256(seed.encode()).digest() * 20000  # 640 KB: several chunks
        with open(os.path.join(d, "weights.bin"), "wb") as f:
            f.write(data)
        with open(os.path.join(d, "sub", "config.json"), "w") as f:
            f.write('{"seed": "%s"}' % seed)
        return d

    def tree(self, root):
        out = {}
        for d, _, files in os.walk(root):
            for n in files:
                full = os.path.join(d, n)
                with open(full, "rb") as f:
                    out[os.path.relpath(full, root)] = f.read()
        return out

    def test_push_then_read_with_the_aws_cli(self):
        src = self.make_dir("src1", "one")
        r = self.vol_json("s3://vols/pushed", "push", src, "team/model", "--tag", "v1")
        digest = r["digest"].split(":")[1]
        listing = self.aws("s3", "ls", "--recursive", "s3://vols/pushed/")
        self.assertIn(f"pushed/volumes/team/model/versions/{digest}.json", listing)
        self.assertIn("pushed/volumes/team/model/tags/v1.json", listing)
        # The manifest as the aws CLI reads it hashes to the version's digest.
        manifest = os.path.join(self.tmp, "manifest.json")
        self.aws("s3", "cp", f"s3://vols/pushed/volumes/team/model/versions/{digest}.json",
                 manifest)
        with open(manifest, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), digest)
        # The whole tree, downloaded by the aws CLI, is a directory store deltakv can pull from:
        # every plain object has the same bytes in S3 as a directory store would hold.
        mirror = os.path.join(self.tmp, "mirror1")
        self.aws("s3", "cp", "--recursive", "--quiet", "s3://vols/pushed/", mirror)
        chunks = [k for k in self.tree(mirror) if k.startswith("chunks/sha256/")]
        self.assertEqual(len(chunks), r["chunks_total"])
        out = os.path.join(self.tmp, "out1")
        self.deltakv("volume", "--store", mirror, "pull", f"team/model@sha256:{digest}", out)
        self.assertEqual(self.tree(out), self.tree(src))
        # And deltakv pulls it back from S3, by tag and by digest.
        out2 = os.path.join(self.tmp, "out2")
        self.deltakv("volume", "--store", "s3://vols/pushed", "pull", "team/model:v1", out2)
        self.assertEqual(self.tree(out2), self.tree(src))
        # Pushing the same content again uploads nothing.
        again = self.vol_json("s3://vols/pushed", "push", src, "team/model")
        self.assertEqual(again["digest"], r["digest"])
        self.assertEqual(again["chunks_uploaded"], 0)

    def test_objects_written_by_the_aws_cli_are_read_and_synced(self):
        src = self.make_dir("src2", "two")
        dirstore = os.path.join(self.tmp, "dirstore2")
        r = self.vol_json(dirstore, "push", src, "team/other")
        ref = f"team/other@{r['digest']}"
        # Tags are versioned objects, whose directory-store files carry a generation header
        # (VOLUME.md 2.2): copy only the plain objects.
        self.aws("s3", "cp", "--recursive", "--quiet", "--exclude", "*/tags/*", dirstore,
                 "s3://vols/copied/")
        listed = self.vol_json("s3://vols/copied", "ls")
        self.assertIn("team", json.dumps(listed))
        shown = self.vol_json("s3://vols/copied", "show", ref)
        self.assertIn("weights.bin", json.dumps(shown))
        out = os.path.join(self.tmp, "out3")
        self.deltakv("volume", "--store", "s3://vols/copied", "pull", ref, out)
        self.assertEqual(self.tree(out), self.tree(src))
        # sync: S3 -> a new directory store, and that back into another S3 prefix.
        back = os.path.join(self.tmp, "dirstore3")
        s = self.vol_json(back, "sync", ref, "team/other", "--from", "s3://vols/copied",
                          "--tag", "synced")
        self.assertEqual(s["digest"], r["digest"])
        s2 = self.vol_json("s3://vols/resynced", "sync", "team/other:synced", "team/other",
                           "--from", back, "--tag", "t")
        self.assertEqual(s2["digest"], r["digest"])
        out4 = os.path.join(self.tmp, "out4")
        self.deltakv("volume", "--store", "s3://vols/resynced", "pull", "team/other:t", out4)
        self.assertEqual(self.tree(out4), self.tree(src))

    def test_tag_rm_restore_gc_on_s3(self):
        store = "s3://vols/life"
        a = self.vol_json(store, "push", self.make_dir("src5", "five"), "ns/v", "--tag", "latest")
        b = self.vol_json(store, "push", self.make_dir("src6", "six"), "ns/v", "--tag", "latest")
        self.assertNotEqual(a["digest"], b["digest"])
        # The tag's generation (its ETag), read from ls or show, is what a guarded move takes.
        [tag] = self.vol_json(store, "ls")["volumes"][0]["tags"]
        self.assertEqual((tag["tag"], tag["digest"]), ("latest", b["digest"]))
        shown = self.vol_json(store, "show", "ns/v:latest")
        self.assertEqual(shown["tag_generation"], tag["generation"])
        self.vol_json(store, "tag", f"ns/v@{a['digest']}", "latest", "--expect-generation",
                      tag["generation"])
        self.vol_json(store, "tag", f"ns/v@{b['digest']}", "latest", "--expect-generation",
                      tag["generation"], expect=2)
        self.vol_json(store, "rm", f"ns/v@{a['digest']}")
        self.vol_json(store, "restore", f"ns/v@{a['digest']}")
        gc = self.vol_json(store, "gc")
        self.assertEqual(gc.get("chunks_deleted", 0), 0)

    def scenario_store(self, prefix):
        """A volume store at s3://vols/PREFIX, its keys listed and read with plain HTTP
        requests to moto (path-style; moto here checks no signatures)."""
        bucket_url = f"{self.endpoint}/vols"

        def list_keys():
            keys, token = [], None
            while True:
                query = {"list-type": "2", "prefix": prefix + "/"}
                if token:
                    query["continuation-token"] = token
                with urllib.request.urlopen(f"{bucket_url}?{urllib.parse.urlencode(query)}") as r:
                    root = ET.fromstring(r.read())
                ns = root.tag[:root.tag.index("}") + 1] if root.tag.startswith("{") else ""
                keys += [e.text[len(prefix) + 1:] for e in root.iter(ns + "Key")]
                token = root.findtext(ns + "NextContinuationToken")
                if not token:
                    return sorted(keys)

        def read_key(key):
            # moto refuses anonymous GetObject; any Authorization header makes it a user's.
            auth = ("AWS4-HMAC-SHA256 Credential=testing/20240101/us-east-1/s3/aws4_request, "
                    "SignedHeaders=host, Signature=0")
            req = urllib.request.Request(f"{bucket_url}/{prefix}/{key}",
                                         headers={"Authorization": auth})
            with urllib.request.urlopen(req) as r:
                return r.read()
        return volume_scenarios.Store(DELTAKV, f"s3://vols/{prefix}", self.env, list_keys,
                                      read_key)

    def test_push_killed_midway_uploads_the_rest_when_pushed_again(self):
        store = self.scenario_store("killed")

        def settle():
            # A PUT that the killed push had sent whole may still be landing: wait until two
            # listings a moment apart agree.
            last = store.list_keys()
            while True:
                time.sleep(0.3)
                now = store.list_keys()
                if now == last:
                    return
                last = now
        volume_scenarios.push_killed_midway_then_repushed(
            self, store, self.tmp, files=4, file_bytes=2 << 20, settle=settle)

    def test_two_pushes_and_a_tag_move_race(self):
        volume_scenarios.two_pushes_and_a_tag_move_race(self, self.scenario_store("race"),
                                                        self.tmp)

    def test_virtual_hosted_addressing(self):
        # BUCKET.localhost:PORT, which curl resolves to loopback itself; moto takes the bucket
        # from the host name.
        env = dict(self.env, AWS_ENDPOINT_URL=self.endpoint.replace("127.0.0.1", "localhost"),
                   AWS_S3_ADDRESSING_STYLE="virtual")
        src = self.make_dir("src-vh", "virtual")
        r = self.vol_json("s3://vols/virtual", "push", src, "team/vh", "--tag", "t", env=env)
        out = os.path.join(self.tmp, "out-vh")
        self.deltakv("volume", "--store", "s3://vols/virtual", "pull", "team/vh:t", out, env=env)
        self.assertEqual(self.tree(out), self.tree(src))
        listed = self.vol_json("s3://vols/virtual", "ls", env=env)["volumes"]
        self.assertEqual(listed[0]["versions"], [r["digest"]])
        # The objects are in bucket vols under the prefix, as a path-style client sees them.
        keys = self.scenario_store("virtual").list_keys()
        self.assertIn(f"volumes/team/vh/versions/{r['digest'][len('sha256:'):]}.json", keys)
        self.assertEqual(len([k for k in keys if k.startswith("chunks/")]), r["chunks_total"])
        # A bucket named only in the host name that does not exist is S3's NoSuchBucket.
        p = self.deltakv("volume", "--store", "s3://no-such-bucket", "ls", expect="fail", env=env)
        self.assertIn("NoSuchBucket", p.stderr)

    def through_proxy(self):
        """A LostAnswerProxy in front of moto, and the environment that sends deltakv to it."""
        proxy = LostAnswerProxy(int(self.endpoint.rsplit(":", 1)[1]))
        self.addCleanup(proxy.close)
        return proxy, dict(self.env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{proxy.port}")

    def test_gc_whose_marker_answer_was_lost_holds_and_releases_the_marker(self):
        # The marker PUT lands, its answer is lost, the retry gets 412: the marker names this
        # gc as holder, so gc goes on and releases it, and pushes are not blocked for an hour.
        store = self.scenario_store("lostgc")
        src = self.make_dir("src-lostgc", "lostgc")
        self.vol_json(store.url, "push", src, "team/a")
        proxy, env = self.through_proxy()
        proxy.arm(b"PUT /vols/lostgc/gc/sweep.json")
        self.vol_json(store.url, "gc", env=env)
        self.assertEqual(proxy.lost, 1)
        self.assertEqual(json.loads(store.read_key("gc/sweep.json")), {"expires": 0})
        with open(os.path.join(src, "sub", "config.json"), "w") as f:
            f.write("changed")
        self.vol_json(store.url, "push", src, "team/a")

    def test_push_and_restore_whose_lease_answer_was_lost_go_on(self):
        # The lease id is random: a lease found under it on the retry is the command's own.
        store = self.scenario_store("lostlease")
        proxy, env = self.through_proxy()
        proxy.arm(b"PUT /vols/lostlease/volumes/team/a/pushes/")
        r = self.vol_json(store.url, "push", self.make_dir("src-lost", "lost"), "team/a",
                          "--tag", "t", env=env)
        self.assertEqual(proxy.lost, 1)
        self.assertEqual([k for k in store.list_keys() if "/pushes/" in k], [])
        ref = f"team/a@{r['digest']}"
        self.vol_json(store.url, "rm", ref)
        proxy.arm(b"PUT /vols/lostlease/volumes/team/a/pushes/")
        self.vol_json(store.url, "restore", ref, env=env)
        self.assertEqual(proxy.lost, 2)
        self.assertEqual([k for k in store.list_keys() if "/pushes/" in k], [])
        self.assertEqual(self.vol_json(store.url, "show", "team/a:t")["digest"], r["digest"])

    def test_an_endpoint_that_is_not_s3_is_an_environment_error(self):
        # A web server answering 404 without an S3 error code is a wrong endpoint, not a
        # missing tag or volume: exit 3, naming the endpoint.
        ready = os.path.join(self.tmp, "not-s3.json")
        web = subprocess.Popen([os.path.join(VENV, "bin", "python"), HELPER, "not-s3",
                                "--ready", ready])
        self.addCleanup(web.wait)
        self.addCleanup(web.send_signal, signal.SIGTERM)
        while not os.path.exists(ready):
            self.assertIsNone(web.poll(), "not-s3 server did not start")
            time.sleep(0.05)
        with open(ready) as f:
            endpoint = f"http://127.0.0.1:{json.load(f)['port']}"
        env = dict(self.env, AWS_ENDPOINT_URL=endpoint)
        src = self.make_dir("src-not-s3", "not-s3")
        for args in (("show", "team/m:latest"), ("ls",), ("push", src, "team/m"), ("gc",)):
            p = self.deltakv("volume", "--store", "s3://vols/pre", *args, expect=3, env=env)
            self.assertIn(f"is {endpoint} an S3 endpoint?", p.stderr)
            self.assertNotIn("does not exist", p.stderr)

    def test_bad_credentials_and_config_errors(self):
        env = dict(self.env, AWS_SECRET_ACCESS_KEY="other-secret")
        # moto here accepts any credentials; the message must still never show the secret.
        p = self.deltakv("volume", "--store", "s3://no-such-bucket", "ls", expect="fail", env=env)
        self.assertIn("NoSuchBucket", p.stderr)
        self.assertNotIn("other-secret", p.stderr + p.stdout)
        env = {k: v for k, v in self.env.items() if not k.startswith("AWS_ACCESS")}
        env["AWS_SECRET_ACCESS_KEY"] = "s"
        p = self.deltakv("volume", "--store", "s3://vols/x", "ls", expect="fail", env=env)
        self.assertIn("AWS_ACCESS_KEY_ID", p.stderr)


def main():
    global DELTAKV
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    args, rest = ap.parse_known_args()
    DELTAKV = os.path.abspath(args.deltakv)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
