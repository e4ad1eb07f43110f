"""End-to-end tests of live delta sync: the real `deltakv sidecar` process, real engine rank
processes (deltakv-demo-engine, linking libdeltakv through its C ABI), real shared memory and
real HTTP on loopback.

Run: python3 tests/sync/sync_e2e_test.py --deltakv build/sidecar/deltakv \
        --engine build/shim/deltakv-demo-engine
"""
import argparse
import concurrent.futures, json, os, shutil, signal, socket, subprocess, sys, tempfile, time, unittest
import http.client as http_client
import urllib.error, urllib.request
import numpy as np

DELTAKV = ENGINE = None
TOKEN = "test-token-123"


def read(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


def write(path, data):
    with open(path, "wb" if isinstance(data, (bytes, bytearray)) else "w") as f:
        f.write(data)


def http(method, url, body=None, token=None, raw=None, content_type=None):
    """(status, parsed JSON or bytes). A body is sent as urllib sends it
    (application/x-www-form-urlencoded) unless content_type says otherwise."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if content_type:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read()
            try:
                return r.status, json.loads(text or b"null")
            except ValueError:
                return r.status, text
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text


def load_safetensors(path):
    raw = read(path)
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    return {k: (v, raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def checkpoint_tensors(d):
    out = {}
    for f in sorted(x for x in os.listdir(d) if x.endswith(".safetensors")):
        out.update(load_safetensors(os.path.join(d, f)))
    return out


def expected_local(name, info, data, rank, tp, ep=1):
    """The demo engine's sharding rule, written plainly with numpy (`ep`: its --ep)."""
    shape = info["shape"]
    esize = len(data) // max(1, int(np.prod(shape))) if np.prod(shape) else 1
    arr = np.frombuffer(data, np.uint8).reshape(*shape, esize) if shape else np.frombuffer(data, np.uint8)
    if ("experts.w13" in name or "experts.w2" in name) and len(shape) == 3 and tp % ep == 0:
        # E/ep consecutive experts per group of tp/ep ranks; inside each, w13's [gate|up] rows
        # (dim 1) are each split over the group, w2's columns (dim 2) too.
        group = tp // ep
        e = shape[0] // ep
        mine = arr[(rank // group) * e:(rank // group + 1) * e]
        r = rank % group
        if "experts.w13" in name:
            half = shape[1] // 2
            k = half // group
            parts = [mine[:, p * half + r * k:p * half + (r + 1) * k] for p in (0, 1)]
            return np.ascontiguousarray(np.concatenate(parts, axis=1)).tobytes()
        k = shape[2] // group
        return np.ascontiguousarray(mine[:, :, r * k:(r + 1) * k]).tobytes()
    rows = any(p in name for p in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "embed_tokens"))
    cols = any(p in name for p in ("o_proj", "down_proj"))
    if rows and shape and shape[0] % tp == 0:
        k = shape[0] // tp
        return arr[rank * k:(rank + 1) * k].tobytes()
    if cols and len(shape) == 2 and shape[1] % tp == 0:
        k = shape[1] // tp
        return np.ascontiguousarray(arr[:, rank * k:(rank + 1) * k]).tobytes()
    return data


class Cluster:
    """A sidecar and an engine with `tp` rank processes."""

    def __init__(self, tmp, checkpoint, tp=2, poll=False, env=None, sidecar_args=(),
                 engine_prefix=(), first_rank=0, tp_world=0, engine_args=()):
        self.tmp, self.tp, self.poll = tmp, tp, poll
        # A slice of a larger group: ranks are global ranks first_rank.. of tp_world.
        self.first_rank, self.tp_world = first_rank, tp_world or tp
        engine_args = list(engine_args)
        self.ep = int(engine_args[engine_args.index("--ep") + 1]) if "--ep" in engine_args else 1
        self.sidecar_args = list(sidecar_args)
        self.shm = f"dkv-e2e-{os.getpid()}-{int(time.time() * 1000) % 100000}"
        self.token_file = os.path.join(tmp, "token")
        write(self.token_file, TOKEN + "\n")
        self.sidecar = None
        self.start_sidecar(env)
        self.ports = os.path.join(tmp, "ports-" + self.shm)
        os.makedirs(self.ports)
        args = [*engine_prefix, ENGINE, "--checkpoint", checkpoint, "--tp", str(tp), "--shm", self.shm,
                "--port-dir", self.ports]
        if poll:
            args.append("--poll")
        if tp_world:
            args += ["--tp-world", str(tp_world), "--first-rank", str(first_rank)]
        args += list(engine_args)
        self.engine = subprocess.Popen(args, stderr=open(os.path.join(tmp, "engine.log"), "ab"))
        self.rank_ports = []
        deadline = time.time() + 30
        while len(self.rank_ports) < tp:
            if time.time() > deadline:
                raise AssertionError("engine did not start: " + read(os.path.join(tmp, "engine.log"), "r"))
            self.rank_ports = [p for p in os.listdir(self.ports) if p.endswith(".port")]
            time.sleep(0.05)
        self.rank_ports = [int(read(os.path.join(self.ports, f"rank{r}.port"), "r")) for r in range(tp)]
        while len(self.status()["ranks"]) < tp:
            time.sleep(0.05)

    def restart_sidecar(self, env=None):
        """Stops the sidecar (SIGTERM) and starts a new one with `env` added."""
        self.sidecar.send_signal(signal.SIGTERM)
        self.sidecar.wait()
        self.start_sidecar(env)

    def start_sidecar(self, env=None):
        port_file = os.path.join(self.tmp, "sidecar.port")
        if os.path.exists(port_file):
            os.remove(port_file)
        e = dict(os.environ)
        e.pop("DELTAKV_FAULT_STALL", None)
        e.update(env or {})
        # A small body limit unless the test gives its own.
        body_limit = [] if "--max-body-bytes" in self.sidecar_args else ["--max-body-bytes", "4096"]
        self.sidecar = subprocess.Popen(
            [DELTAKV, "sidecar", "--listen", "127.0.0.1:0", "--port-file", port_file,
             "--token-file", self.token_file, "--shm-name", self.shm, *body_limit,
             *self.sidecar_args],
            env=e, stderr=open(os.path.join(self.tmp, "sidecar.log"), "ab"))
        deadline = time.time() + 20
        while not os.path.exists(port_file):
            if self.sidecar.poll() is not None or time.time() > deadline:
                raise AssertionError("sidecar did not start: " + read(os.path.join(self.tmp, "sidecar.log"), "r"))
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{int(read(port_file, 'r'))}"

    def status(self):
        return http("GET", self.url + "/v1/status")[1]

    def sync(self, version, delta, expect=202):
        code, body = http("POST", self.url + "/v1/sync", {"version": version, "delta": delta}, TOKEN)
        assert code == expect, (code, body)
        return body.get("id") if isinstance(body, dict) else None

    def wait(self, sync_id, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            code, rec = http("GET", f"{self.url}/v1/syncs/{sync_id}?wait_ms=1000")
            if rec["state"] in ("live", "aborted", "verified", "diverged", "failed"):
                return rec
        raise AssertionError("sync did not finish")

    def verify(self, checkpoint, **extra):
        code, body = http("POST", self.url + "/v1/verify", {"checkpoint": checkpoint, **extra}, TOKEN)
        assert code == 202, (code, body)
        return self.wait(body["id"])

    def scrub(self):
        code, body = http("POST", self.url + "/v1/scrub", None, TOKEN)
        assert code == 202, (code, body)
        return self.wait(body["id"])

    def corrupt(self, r, tensor, offset, xor=0x10):
        code, _ = http("POST", f"http://127.0.0.1:{self.rank_ports[r]}/v1/corrupt",
                       {"tensor": tensor, "offset": offset, "xor": xor})
        assert code == 200, code

    def metrics(self):
        return http("GET", self.url + "/metrics")[1].decode()

    def rank_state(self, r):
        return http("GET", f"http://127.0.0.1:{self.rank_ports[r]}/v1/state")[1]

    def dump(self, r):
        path = os.path.join(self.tmp, f"dump-{self.shm}-{r}.safetensors")
        code, _ = http("POST", f"http://127.0.0.1:{self.rank_ports[r]}/v1/dump", {"path": path})
        assert code == 200
        return {k: v[1] for k, v in load_safetensors(path).items()}

    def answers(self):
        return [self.rank_state(r)["answer"] for r in range(self.tp)]

    def assert_serves(self, test, checkpoint, some=False):
        """Every rank's tensors equal its share of `checkpoint`'s; with `some`, the engine
        holds only some of the tensors (a pipeline stage): returns their names."""
        tensors = checkpoint_tensors(checkpoint)
        names = set()
        for r in range(self.tp):
            local = self.dump(r)
            if some:
                test.assertTrue(set(local) <= set(tensors), set(local) - set(tensors))
                tensors = {k: v for k, v in tensors.items() if k in local}
                names |= set(local)
            else:
                test.assertEqual(set(local), set(tensors))
            for name, (info, data) in tensors.items():
                test.assertEqual(local[name], expected_local(name, info, data,
                                                             self.first_rank + r, self.tp_world,
                                                             self.ep),
                                 f"rank {r} tensor {name}")
        return names

    def stop(self):
        for p in (self.engine, self.sidecar):
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in (self.engine, self.sidecar):
            if p:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        for f in os.listdir("/dev/shm"):
            if f.startswith(self.shm):
                os.remove(os.path.join("/dev/shm", f))


def make_chain(t):
    """Checkpoints v1 -> v2 -> v3 (1 % of elements per step) and deltas d12, d23 under t(...);
    returns the CLI runner."""
    def k(*args):
        subprocess.run([DELTAKV, *args], check=True, capture_output=True)
    k("checkpoint", "generate", "--out", t("v1"), "--size-mib", "8", "--files", "2")
    k("checkpoint", "mutate", "--parent", t("v1"), "--out", t("v2"), "--density", "0.01", "--seed", "2")
    k("checkpoint", "mutate", "--parent", t("v2"), "--out", t("v3"), "--density", "0.01", "--seed", "3")
    k("publish", "--parent", t("v1"), "--new", t("v2"), "--out", t("d12"), "--frame-mib", "1")
    k("publish", "--parent", t("v2"), "--new", t("v3"), "--out", t("d23"))
    return k


class ChainFixture:
    """Class fixture of the e2e suites: a scratch directory (t(...) names paths in it) holding
    the checkpoint and delta chain of make_chain; cls.k runs the CLI."""
    PREFIX = "deltakv-e2e-"

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix=cls.PREFIX)
        t = lambda *p: os.path.join(cls.tmp, *p)
        cls.t = staticmethod(t)
        cls.k = staticmethod(make_chain(t))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)


class SyncE2ETest(ChainFixture, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        t, k = cls.t, cls.k
        # Bytes from v2 -> v3, but labelled as a delta from v1: only the checksums can tell.
        k("publish", "--parent", t("v2"), "--new", t("v3"), "--out", t("d23-as-v1"),
          "--parent-version", "v1", "--version", "v2")

    def setUp(self):
        self.clusters = []

    def tearDown(self):
        for c in self.clusters:
            c.stop()

    def cluster(self, **kw):
        c = Cluster(self.tmp, self.t("v1"), **kw)
        self.clusters.append(c)
        return c

    def copy_delta(self, name):
        dst = self.t(name + "-" + str(time.time_ns()))
        shutil.copytree(self.t(name), dst)
        return dst

    def expect_aborted(self, c, version, delta, text):
        before = c.answers()
        rec = c.wait(c.sync(version, delta))
        self.assertEqual(rec["state"], "aborted", rec)
        self.assertIn(text, rec["error"])
        self.assertEqual(c.answers(), before)  # device bytes unchanged
        for r in range(c.tp):
            self.assertEqual(c.rank_state(r)["policy_version"], 0)
        return rec

    def test_sync_twice_tp2(self):
        c = self.cluster(tp=2)
        c.assert_serves(self, self.t("v1"))
        rec = c.wait(c.sync("v2", self.t("d12")))
        self.assertEqual(rec["state"], "live", rec)
        for phase in ("fetch", "decode", "stage", "commit", "pause"):
            self.assertIn(phase, rec["phase_ms"])
        rec = c.wait(c.sync("v3", "file://" + self.t("d23")))
        self.assertEqual(rec["state"], "live", rec)
        c.assert_serves(self, self.t("v3"))
        for r in range(2):
            st = c.rank_state(r)
            self.assertEqual((st["policy_version"], st["version"]), (2, "v3"))
            self.assertGreater(st["derived_calls"], 0)  # the hook saw the touched regions
            self.assertGreater(st["derived_bytes"], 0)
            # deltakv_engine_get_sync_stats: the newest sync, committed, with its cost.
            ss = st["sync_stats"]
            self.assertEqual(ss["outcome"], 1, ss)
            self.assertGreaterEqual(ss["parts"], 1, ss)
            self.assertGreater(ss["bytes"], 0, ss)
            self.assertGreater(ss["stage_us"], 0, ss)
            self.assertGreater(ss["pause_us"], 0, ss)
        status = c.status()
        self.assertEqual(status["live_version"], "v3")
        self.assertEqual([h["state"] for h in status["history"]], ["live", "live"])
        metrics = urllib.request.urlopen(c.url + "/metrics").read().decode()
        self.assertIn('deltakv_syncs_total{result="live"} 2', metrics)
        self.assertIn("deltakv_engine_ranks 2", metrics)

    def test_touch_bound_times_the_lines_a_sync_changed(self):
        """The demo engine's touch-bound baseline: the lines that differ from the parent, timed
        at once or held and then timed by every rank from shared instants."""
        c = self.cluster(tp=2)
        rec = c.wait(c.sync("v2", self.t("d12")))
        self.assertEqual(rec["state"], "live", rec)
        urls = [f"http://127.0.0.1:{p}/v1/touch-bound" for p in c.rank_ports]
        code, now = http("POST", urls[0], {"parent": self.t("v1")})
        self.assertEqual(code, 200, now)
        self.assertGreater(now["lines"], 0)
        self.assertGreater(now["touch_ms"], 0)
        code, body = http("POST", urls[0], {"start_unix_ns": time.time_ns()})
        self.assertEqual(code, 400, body)  # nothing held
        self.assertIn("no lines held", body["error"])
        code, body = http("POST", urls[0], {"parent": self.t("v1"), "start_unix_ns": 1})
        self.assertEqual(code, 400, body)  # one or the other
        held = []
        for u in urls:
            code, body = http("POST", u, {"parent": self.t("v1"), "hold": True})
            self.assertEqual(code, 200, body)
            self.assertTrue(body["held"])
            held.append(body["lines"])
        self.assertEqual(held[0], now["lines"])
        self.assertGreater(sum(held), 0)
        start, round_ns = time.time_ns() + 200_000_000, 300_000_000
        for u, lines in zip(urls, held):
            code, body = http("POST", u, {"start_unix_ns": start, "rounds": 2, "round_ns": round_ns})
            self.assertEqual(code, 200, body)
            self.assertEqual(body["lines"], lines)
            ends = body["round_end_unix_ns"]
            self.assertEqual(len(ends), 2)
            for k, end in enumerate(ends):
                self.assertGreater(end, start + k * round_ns)  # no pass before its instant
            self.assertGreaterEqual(body["late_us"], 0)
            self.assertGreater(body["touch_ms"], 0)
        code, body = http("POST", urls[0], {"start_unix_ns": time.time_ns()})
        self.assertEqual(code, 400, body)  # the held lines were used up
        c.assert_serves(self, self.t("v2"))  # touching rewrote the bytes already there

    def arenas(self, c):
        """The sidecar's plan arenas: name -> inode."""
        return {f: os.stat(os.path.join("/dev/shm", f)).st_ino
                for f in os.listdir("/dev/shm") if f.startswith(c.shm + "-plan-")}

    def mapped_arenas(self, pid, shm):
        with open(f"/proc/{pid}/maps") as f:
            return {line.split("/dev/shm/")[1].strip() for line in f
                    if f"/dev/shm/{shm}-plan-" in line}

    def test_plan_arenas_are_reused_across_syncs_and_removed_at_shutdown(self):
        c = self.cluster(tp=2)
        self.assertEqual(c.wait(c.sync("v2", self.t("d12")))["state"], "live")
        first = self.arenas(c)
        # One pool per rank; this small delta takes one part per rank.
        self.assertEqual(sorted(first), [f"{c.shm}-plan-r0-a0", f"{c.shm}-plan-r1-a0"])
        pids = {r["rank"]: r["pid"] for r in c.status()["ranks"]}
        for r, pid in pids.items():
            # The rank keeps its arena mapped for the next part.
            self.assertEqual(self.mapped_arenas(pid, c.shm), {f"{c.shm}-plan-r{r}-a0"})
        self.assertEqual(c.wait(c.sync("v3", self.t("d23")))["state"], "live")
        self.assertEqual(self.arenas(c), first)  # the same segments, rewritten
        c.assert_serves(self, self.t("v3"))
        # A clean shutdown retires and unlinks them; the ranks drop their mappings.
        c.sidecar.send_signal(signal.SIGTERM)
        self.assertEqual(c.sidecar.wait(timeout=20), 0)
        self.assertEqual(self.arenas(c), {})
        deadline = time.time() + 10
        while any(self.mapped_arenas(pid, c.shm) for pid in pids.values()):
            self.assertLess(time.time(), deadline, "ranks kept retired arenas mapped")
            time.sleep(0.1)

    def test_expert_parallel_engine_syncs_and_verifies(self):
        # One node, world 4 = 2 expert groups x 2 ranks: stacked experts follow the moe_experts
        # layouts (each rank holds half the experts, split on the intermediate dim), the rest
        # the usual row/column/replicated rules.
        moe = {v: self.t("ep-" + v) for v in ("v1", "v2", "v3")}
        if not os.path.exists(moe["v3"]):
            self.k("checkpoint", "generate", "--out", moe["v1"], "--size-mib", "24", "--files",
                   "2", "--experts", "8")
            for prev, cur, seed in (("v1", "v2", "4"), ("v2", "v3", "5")):
                self.k("checkpoint", "mutate", "--parent", moe[prev], "--out", moe[cur],
                       "--density", "0.01", "--seed", seed)
                self.k("publish", "--parent", moe[prev], "--new", moe[cur], "--out",
                       self.t("ep-d-" + cur))
        bad = subprocess.run([ENGINE, "--checkpoint", moe["v1"], "--tp", "4", "--ep", "3",
                              "--shm", "dkv-e2e-bad-ep"], capture_output=True, text=True,
                             timeout=30)
        self.assertEqual(bad.returncode, 2, bad.stderr)
        self.assertIn("--ep 3 does not divide the world of 4 ranks", bad.stderr)
        c = Cluster(self.tmp, moe["v1"], tp=4, engine_args=["--ep", "2"])
        self.clusters.append(c)
        c.assert_serves(self, moe["v1"])
        self.assertEqual(c.verify(moe["v1"])["state"], "verified")
        for version in ("v2", "v3"):
            rec = c.wait(c.sync("ep-" + version, self.t("ep-d-" + version)))
            self.assertEqual(rec["state"], "live", rec)
            c.assert_serves(self, moe[version])
        self.assertEqual(c.verify(moe["v3"])["state"], "verified")
        self.assertEqual(c.scrub()["state"], "verified")

    def test_sync_over_http(self):
        server = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1",
                                   "--directory", self.tmp], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        try:
            port = int(server.stdout.readline().split("port ")[1].split()[0])
            c = self.cluster(tp=2)
            rec = c.wait(c.sync("v2", f"http://127.0.0.1:{port}/d12"))
            self.assertEqual(rec["state"], "live", rec)
            c.assert_serves(self, self.t("v2"))
            rec = c.wait(c.sync("v3", f"http://127.0.0.1:{port}/no-such-delta"))
            self.assertEqual(rec["state"], "aborted")
            self.assertIn("404", rec["error"])
        finally:
            server.terminate()
            server.wait()

    def push_volume(self, store, ns_name, version, *args):
        """Pushes a copy of checkpoint `version` (with its manifest.json) to the volume store."""
        src = self.t("vol-src", version)  # named like the checkpoint: its version id
        if not os.path.exists(src):
            shutil.copytree(self.t(version), src)
            self.k("checkpoint", "manifest", src)
        out = subprocess.run([DELTAKV, "volume", "--store", store, "push", src, ns_name, "--json",
                              "-q", *args], check=True, capture_output=True, text=True)
        return json.loads(out.stdout)

    def test_sync_from_a_volume(self):
        store = self.t("volumes-" + str(time.time_ns()))
        v1 = self.push_volume(store, "team/model", "v1")
        v2 = self.push_volume(store, "team/model", "v2", "--parent", v1["ref"])
        self.assertGreater(v2["chunks_xor"], 0, v2)
        v3 = self.push_volume(store, "team/model", "v3", "--parent", v2["ref"], "--tag", "next")
        c = self.cluster(tp=2, sidecar_args=["--volume-store", store])
        # The engine's bytes are verified against the checkpoint kept in the volume.
        rec = c.verify("vol://" + v1["ref"])
        self.assertEqual(rec["state"], "verified", rec)
        self.assertTrue(self.wait_verified(c)["checkpoint_verified"])
        rec = c.wait(c.sync("v2", "vol://" + v2["ref"]))
        self.assertEqual(rec["state"], "live", rec)
        c.assert_serves(self, self.t("v2"))
        rec = c.wait(c.sync("v3", "vol://team/model:next"))
        self.assertEqual(rec["state"], "live", rec)
        c.assert_serves(self, self.t("v3"))
        self.assertEqual(c.status()["live_version"], "v3")

    def test_volume_syncs_refuse_whole_chunks_and_corrupt_deltas(self):
        store = self.t("volumes-" + str(time.time_ns()))
        # The XOR volume first: a chunk the store already holds whole is never stored again.
        v1b = self.push_volume(store, "team/xor", "v1")
        xor = self.push_volume(store, "team/xor", "v2", "--parent", v1b["ref"])
        v1 = self.push_volume(store, "team/whole", "v1")
        whole = self.push_volume(store, "team/whole", "v2", "--parent", v1["ref"], "--no-xor")
        c = self.cluster(tp=2, sidecar_args=["--volume-store", store])
        self.expect_aborted(c, "v2", "vol://" + whole["ref"], "stored whole")
        self.expect_aborted(c, "v2", "vol://" + v1["ref"], "has no parent")
        self.expect_aborted(c, "v2", "vol://team/xor:missing", "does not exist")
        deltas = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(store, "xchunks"))
                  for f in fs if not f.startswith(".")]
        self.assertTrue(deltas)
        for path in deltas:
            data = bytearray(read(path))
            data[-1] ^= 0x01
            write(path, bytes(data))
        self.expect_aborted(c, "v2", "vol://" + xor["ref"], "sha256")
        # Without a volume store a vol:// location is refused before anything is read.
        c2 = self.cluster(tp=1)
        self.expect_aborted(c2, "v2", "vol://" + xor["ref"], "--volume-store")

    def test_sync_over_https(self):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "store"))
        import object_server  # local HTTP(S) object server; certificates from the openssl CLI
        certs = object_server.make_certs(self.t("tls-" + str(time.time_ns())))
        server = object_server.serve(self.tmp, certs["server"])
        try:
            url = f"https://127.0.0.1:{server.server_address[1]}/plain/d12"
            # The system CA store does not know the test CA: refused, nothing changes.
            c = self.cluster(tp=1)
            self.expect_aborted(c, "v2", url, "certificate")
            c = self.cluster(tp=2, sidecar_args=["--http-ca-file", certs["ca"]])
            rec = c.wait(c.sync("v2", url))
            self.assertEqual(rec["state"], "live", rec)
            c.assert_serves(self, self.t("v2"))
        finally:
            server.close()

    def test_poll_mode_engine(self):
        c = self.cluster(tp=1, poll=True)
        rec = c.wait(c.sync("v2", self.t("d12")))
        self.assertEqual(rec["state"], "live", rec)
        c.assert_serves(self, self.t("v2"))

    def test_rejections_change_nothing(self):
        c = self.cluster(tp=2)
        d = self.copy_delta("d12")
        shard = os.path.join(d, "shard-00000.zst")
        data = bytearray(read(shard))
        data[len(data) // 2] ^= 0x55
        write(shard, data)
        self.expect_aborted(c, "v2", d, "tensor '")

        d = self.copy_delta("d12")
        shard = os.path.join(d, "shard-00000.zst")
        write(shard, read(shard)[:-50])
        self.expect_aborted(c, "v2", d, "truncated")

        self.expect_aborted(c, "v3", self.t("d23"), "serves version 'v1'")        # wrong parent (ids)
        # Wrong parent (bytes): the ranks' own checksums disagree with the delta's parent, so the
        # sync is refused before anything is fetched beyond the manifest or decoded.
        rec = self.expect_aborted(c, "v2", self.t("d23-as-v1"), "the delta's parent is")
        self.assertIn("refused before decoding: the engine holds tensor '", rec["error"])
        self.assertNotIn("decode", rec["phase_ms"])
        self.assertEqual(rec["bytes_fetched"], 0)

        d = self.copy_delta("d12")
        m = json.loads(read(os.path.join(d, "manifest.json")))
        m["tensors"][0]["adler32"] = "00000001"
        write(os.path.join(d, "manifest.json"), json.dumps(m))
        self.expect_aborted(c, "v2", d, "checksum mismatch")

        # A shard whose recorded sha256 is wrong: caught while the object streams in.
        d = self.copy_delta("d12")
        m = json.loads(read(os.path.join(d, "manifest.json")))
        m["objects"][0]["sha256"] = "0" * 64
        write(os.path.join(d, "manifest.json"), json.dumps(m))
        self.expect_aborted(c, "v2", d, "sha256 mismatch")

        # A frame whose decoded bytes disagree with the manifest's xor_digest (FORMAT.md 2.5).
        d = self.copy_delta("d12")
        m = json.loads(read(os.path.join(d, "manifest.json")))
        frame = m["tensors"][-1]["frames"][0]
        self.assertEqual(len(frame["xor_digest"]), 32)
        frame["xor_digest"] = ("1" if frame["xor_digest"][0] != "1" else "2") + frame["xor_digest"][1:]
        write(os.path.join(d, "manifest.json"), json.dumps(m))
        self.expect_aborted(c, "v2", d, ", the manifest says " + frame["xor_digest"])

        d = self.copy_delta("d12")
        write(os.path.join(d, "manifest.json"), '{"format": "deltakv.delta/1", "metadata": ')
        self.expect_aborted(c, "v2", d, "invalid JSON")

        d = self.copy_delta("d12")
        m = json.loads(read(os.path.join(d, "manifest.json")))
        m["tensors"][0]["name"] = "model.no_such.weight"
        write(os.path.join(d, "manifest.json"), json.dumps(m))
        self.expect_aborted(c, "v2", d, "did not register")

        # The engine still takes a good delta afterwards.
        self.assertEqual(c.wait(c.sync("v2", self.t("d12")))["state"], "live")
        c.assert_serves(self, self.t("v2"))

    def test_plan_streamed_in_many_parts(self):
        # A plan buffer of 256 KiB: 64 KiB parts per rank at TP2, dozens of parts per sync.
        c = self.cluster(tp=2, sidecar_args=["--plan-buffer-bytes", str(256 << 10)])
        rec = c.wait(c.sync("v2", self.t("d12")))
        self.assertEqual(rec["state"], "live", rec)
        self.assertGreater(rec["plan_parts"], 2 * 4, rec)
        c.assert_serves(self, self.t("v2"))
        # Dozens of parts went through at most in flight + 1 = 2 arenas per rank.
        self.assertLessEqual(len(self.arenas(c)), 2 * 2, self.arenas(c))
        # Corruption in the last frames: earlier parts were staged by then, and are dropped.
        d = self.copy_delta("d23")
        m = json.loads(read(os.path.join(d, "manifest.json")))
        last = max((f for t in m["tensors"] for f in t["frames"]), key=lambda f: f["object_offset"])
        shard = os.path.join(d, last["object"])
        data = bytearray(read(shard))
        data[last["object_offset"] + last["compressed_length"] // 2] ^= 0x55
        write(shard, data)
        before = c.answers()
        committed_ids = [c.rank_state(r)["sync_stats"]["sync_id"] for r in range(c.tp)]
        rec = c.wait(c.sync("v3", d))
        self.assertEqual(rec["state"], "aborted", rec)
        self.assertIn("tensor '", rec["error"])
        self.assertEqual(c.answers(), before)
        for r in range(c.tp):
            self.assertEqual(c.rank_state(r)["policy_version"], 1)
            # The staged parts were dropped: the stats say so, with no pause.
            ss = c.rank_state(r)["sync_stats"]
            self.assertEqual((ss["outcome"], ss["pause_us"]), (2, 0), ss)
            self.assertGreater(ss["sync_id"], committed_ids[r], ss)  # the aborted sync's own
        rec = c.wait(c.sync("v3", self.t("d23")))
        self.assertEqual(rec["state"], "live", rec)
        c.assert_serves(self, self.t("v3"))
        self.assertLessEqual(len(self.arenas(c)), 2 * 2, self.arenas(c))

    def test_sidecar_owns_the_kv_pool(self):
        shm = f"dkv-kvpool-{os.getpid()}"
        config = os.path.join(self.tmp, "kv-config.json")
        write(config, json.dumps({"token_file": os.path.join(self.tmp, "kvtoken"),
                                  "shm_name": shm, "kv_block_bytes": 65536,
                                  "kv_capacity_slots": 64, "kv_numa_node": 0}))
        write(os.path.join(self.tmp, "kvtoken"), "t\n")
        port_file = os.path.join(self.tmp, "kv.port")
        log = os.path.join(self.tmp, "kv-sidecar.log")
        with open(log, "w") as err:
            p = subprocess.Popen([DELTAKV, "sidecar", "--config", config, "--listen",
                                  "127.0.0.1:0", "--port-file", port_file, "--kv-hugepages"],
                                 stderr=err)
        try:
            deadline = time.time() + 20
            while not os.path.exists(port_file):
                self.assertIsNone(p.poll())
                self.assertLess(time.time(), deadline)
                time.sleep(0.02)
            self.assertTrue(os.path.exists("/dev/shm/" + shm + ".kv"))
            url = f"http://127.0.0.1:{int(read(port_file, 'r'))}/metrics"
            metrics = urllib.request.urlopen(url).read().decode()
            self.assertIn("deltakv_kv_capacity_slots 64", metrics)
            self.assertIn("deltakv_kv_block_bytes 65536", metrics)
            self.assertIn("deltakv_kv_occupancy 0", metrics)
            self.assertIn("deltakv_kv_numa_node 0", metrics)
            # Pool-wide counters of every engine process, and copy throughput per direction.
            for series in ["deltakv_kv_hits_total", "deltakv_kv_misses_total",
                           "deltakv_kv_evictions_total", "deltakv_kv_bytes_in_total",
                           "deltakv_kv_bytes_out_total", "deltakv_kv_loads_total"]:
                self.assertIn(series + " 0\n", metrics)
            for direction in ["in", "out"]:
                for series in ["deltakv_kv_copy_gbps", "deltakv_kv_throughput_gbps",
                               "deltakv_kv_copy_busy_seconds_total"]:
                    self.assertIn(f'{series}{{direction="{direction}"}} 0\n', metrics)
            # Whether the huge-page advice can take effect is logged.
            thp = read("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r") \
                if os.path.exists("/sys/kernel/mm/transparent_hugepage/shmem_enabled") else ""
            mode = thp[thp.find("[") + 1:thp.find("]")] if "[" in thp else "absent"
            self.assertIn(f"NUMA node 0; huge pages requested, shmem THP '{mode}'", read(log, "r"))
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait()
            pool_left = os.path.exists("/dev/shm/" + shm + ".kv")
            for f in os.listdir("/dev/shm"):
                if f.startswith(shm):
                    os.remove(os.path.join("/dev/shm", f))
        self.assertFalse(pool_left)  # the owner removes the pool on a clean exit

    def test_kv_pool_on_a_missing_numa_node_is_refused(self):
        shm = f"dkv-kvnuma-{os.getpid()}"
        write(os.path.join(self.tmp, "kvtoken"), "t\n")
        r = subprocess.run([DELTAKV, "sidecar", "--token-file", os.path.join(self.tmp, "kvtoken"),
                            "--shm-name", shm, "--listen", "127.0.0.1:0",
                            "--kv-block-bytes", "65536", "--kv-capacity-slots", "16",
                            "--kv-numa-node", "4095"],
                           stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("NUMA node 4095 does not exist on this machine (nodes: 0", r.stderr)
        self.assertFalse(any(f.startswith(shm) for f in os.listdir("/dev/shm")))

    def test_http_refusals(self):
        c = self.cluster(tp=1)
        body = {"version": "v2", "delta": self.t("d12")}
        self.assertEqual(http("POST", c.url + "/v1/sync", body)[0], 401)
        self.assertEqual(http("POST", c.url + "/v1/sync", body, "wrong-token")[0], 401)
        code, err = http("POST", c.url + "/v1/sync", raw=b"x" * 10000, token=TOKEN)
        self.assertEqual(code, 413)
        self.assertEqual(http("POST", c.url + "/v1/sync", raw=b"{not json", token=TOKEN)[0], 400)
        self.assertEqual(http("POST", c.url + "/v1/sync", {"version": 3}, TOKEN)[0], 400)
        code, err = http("GET", c.url + "/v1/syncs/nope")
        self.assertEqual(code, 404)
        self.assertEqual(err["error"]["message"],
                         "no job 'nope' (the sidecar keeps the records of its last 64 jobs)")
        self.assertEqual(http("GET", c.url + "/healthz")[0], 200)
        self.assertEqual(c.rank_state(0)["policy_version"], 0)

    def test_refused_bodies_never_pass_for_requests(self):
        # A body the sidecar does not take (no token, or past --max-body-bytes, also chunked,
        # which declares no length) is never read as further requests on the connection: each
        # request gets one answer, and a chunked body past the limit is not held in memory.
        c = self.cluster(tp=1)
        port = int(c.url.rsplit(":", 1)[1])
        smuggled = b"GET /v1/syncs/smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
        pad = b'{"version": "v2", "pad": "' + b"x" * 2000 + b'"}' + smuggled

        def exchange(head, body, chunked, token):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            auth = f"Authorization: Bearer {token}\r\n" if token else ""
            framing = ("Transfer-Encoding: chunked\r\n" if chunked
                       else f"Content-Length: {len(body)}\r\n")
            sock.sendall(f"{head}\r\nHost: x\r\n{auth}{framing}\r\n".encode())
            try:
                sock.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if chunked else body)
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the sidecar answered and closed the connection before all was sent
            out = b""
            try:
                while chunk := sock.recv(65536):
                    out += chunk
            except ConnectionResetError:
                pass
            sock.close()
            return out

        for chunked in (False, True):
            # Refused for the token: one 401, and the next request on the connection (when it
            # stays open) is the health probe, never the bytes of the body.
            out = exchange("POST /v1/sync HTTP/1.1", pad, chunked, None)
            self.assertTrue(out.startswith(b"HTTP/1.1 401 "), out[:200])
            self.assertNotIn(b"smuggled", out)
            self.assertEqual(out.count(b"HTTP/1.1 "), out.count(b"HTTP/1.1 200 ") + 1, out)
            # Past the body limit (4096 here): 413, then the connection ends or stays in step.
            big = b'{"version": "v2", "pad": "' + b"x" * 20000 + b'"}' + smuggled
            out = exchange("POST /v1/sync HTTP/1.1", big, chunked, TOKEN)
            self.assertTrue(out.startswith(b"HTTP/1.1 413 "), out[:200])
            self.assertIn(b"RESOURCE_EXHAUSTED", out)
            self.assertNotIn(b"smuggled", out)
            self.assertEqual(out.count(b"HTTP/1.1 "), out.count(b"HTTP/1.1 200 ") + 1, out)
        self.assertEqual(c.status()["history"], [])  # nothing was started
        self.assertEqual(http("GET", c.url + "/healthz")[0], 200)

    def test_two_syncs_at_once_are_serialized(self):
        c = self.cluster(tp=1)
        c.restart_sidecar({"DELTAKV_FAULT_STALL": "staged:1500"})
        first = c.sync("v2", self.t("d12"))
        code, err = http("POST", c.url + "/v1/sync", {"version": "v3", "delta": self.t("d23")}, TOKEN)
        self.assertEqual(code, 409)
        self.assertIn(first, err["error"]["message"])
        self.assertEqual(c.wait(first)["state"], "live")

    def test_sync_from_an_s3_bucket(self):
        # moto's S3 server on loopback (the venv scripts/setup-deps.sh makes), the delta
        # uploaded by the aws CLI as a trainer would, read by the sidecar through s3://.
        venv = os.environ.get("DELTAKV_MOTO_VENV",
                              os.path.expanduser("~/.cache/deltakv-venvs/moto"))
        if not os.path.exists(os.path.join(venv, "bin", "aws")):
            self.skipTest(f"no moto venv at {venv} (scripts/setup-deps.sh makes it)")
        helper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "store",
                              "s3_helper.py")
        ready = self.t(f"moto-ready-{time.time_ns()}.json")
        server = subprocess.Popen([os.path.join(venv, "bin", "python"), helper, "moto",
                                   "--ready", ready])
        try:
            deadline = time.time() + 60
            while not os.path.exists(ready):
                self.assertTrue(server.poll() is None and time.time() < deadline,
                                "moto server did not start")
                time.sleep(0.05)
            with open(ready) as f:
                endpoint = f"http://127.0.0.1:{json.load(f)['port']}"
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith("AWS_") and "proxy" not in k.lower()}
            env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                       AWS_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint,
                       AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
            aws = lambda *a: subprocess.run([os.path.join(venv, "bin", "aws"), *a], env=env,
                                            check=True, capture_output=True)
            aws("s3", "mb", "s3://deltas")
            aws("s3", "cp", "--recursive", "--quiet", self.t("d12"), "s3://deltas/run-7/step-2")
            c = self.cluster(tp=2, env={k: v for k, v in env.items() if k.startswith("AWS_")})
            rec = c.wait(c.sync("v2", "s3://deltas/run-7/step-2"))
            self.assertEqual(rec["state"], "live", rec)
            c.assert_serves(self, self.t("v2"))
            missing = c.wait(c.sync("v3", "s3://deltas/run-7/step-3"))
            self.assertEqual(missing["state"], "aborted")
            self.assertIn("s3://deltas/run-7/step-3", missing["error"])
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)

    def test_long_poll_answers_when_the_job_ends(self):
        c = self.cluster(tp=1)
        c.restart_sidecar({"DELTAKV_FAULT_STALL": "staged:1500"})
        sid = c.sync("v2", self.t("d12"))
        # At most 8 requests wait at once: a ninth is answered at once, and health probes get
        # through at once, also past idle keep-alive connections and more clients that send
        # half a request than the API keeps threads (each holds one until its read times out).
        waits = []
        idle = []
        for _ in range(10):
            conn = http_client.HTTPConnection("127.0.0.1", int(c.url.rsplit(":", 1)[1]), timeout=10)
            conn.request("GET", "/healthz")
            conn.getresponse().read()  # kept open, idle
            idle.append(conn)
        halves = []
        for _ in range(40):
            half = socket.create_connection(("127.0.0.1", int(c.url.rsplit(":", 1)[1])))
            half.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the rest
            halves.append(half)
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            futures = [ex.submit(http, "GET", f"{c.url}/v1/syncs/{sid}?wait_ms=60000")
                       for _ in range(8)]
            time.sleep(0.3)
            t0 = time.time()
            code, rec = http("GET", f"{c.url}/v1/syncs/{sid}?wait_ms=30000")
            self.assertEqual(code, 200, rec)
            self.assertNotIn(rec["state"], ("live", "aborted"), rec)
            self.assertEqual(http("GET", f"{c.url}/healthz")[0], 200)
            self.assertLess(time.time() - t0, 1)
            waits = [f.result() for f in futures]
        self.assertEqual([(code, rec["state"]) for code, rec in waits], [(200, "live")] * 8)
        for half in halves:
            half.close()
        for conn in idle:
            conn.close()
        sid = c.sync("v3", self.t("d23"))
        # Not finished within a short wait: the record as it is, after about that long.
        t0 = time.time()
        code, rec = http("GET", f"{c.url}/v1/syncs/{sid}?wait_ms=200")
        self.assertEqual(code, 200, rec)
        self.assertNotIn(rec["state"], ("live", "aborted"), rec)
        self.assertGreaterEqual(time.time() - t0, 0.15)
        # A long wait returns as soon as the sync is live, well before its limit.
        t0 = time.time()
        code, rec = http("GET", f"{c.url}/v1/syncs/{sid}?wait_ms=60000")
        self.assertEqual((code, rec["state"]), (200, "live"), rec)
        self.assertLess(time.time() - t0, 30)
        # A finished job answers at once; bad waits and unknown jobs are refused.
        t0 = time.time()
        self.assertEqual(http("GET", f"{c.url}/v1/syncs/{sid}?wait_ms=60000")[1]["state"], "live")
        self.assertLess(time.time() - t0, 5)
        for bad in ("-1", "60001", "1.5", "x", ""):
            code, err = http("GET", f"{c.url}/v1/syncs/{sid}?wait_ms={bad}")
            self.assertEqual(code, 400, (bad, err))
            self.assertIn("wait_ms", err["error"]["message"])
        self.assertEqual(http("GET", f"{c.url}/v1/syncs/nope?wait_ms=10")[0], 404)

    def test_sidecar_killed_mid_sync(self):
        c = self.cluster(tp=2)
        c.restart_sidecar({"DELTAKV_FAULT_STALL": "staged:5000"})
        before = c.answers()
        sid = c.sync("v2", self.t("d12"))
        deadline = time.time() + 20
        while http("GET", f"{c.url}/v1/syncs/{sid}")[1]["state"] != "staged":
            self.assertLess(time.time(), deadline)
            time.sleep(0.02)
        c.sidecar.send_signal(signal.SIGKILL)
        c.sidecar.wait()
        time.sleep(2.5)  # ranks notice the dead sidecar and drop the staged plan
        self.assertEqual(c.answers(), before)
        for r in range(2):
            self.assertEqual(c.rank_state(r)["policy_version"], 0)
        left = self.arenas(c)  # the dead sidecar's arenas stay until a successor starts
        self.assertEqual(len(left), 2, left)
        c.start_sidecar()
        self.assertEqual(self.arenas(c), {})  # removed before the successor serves
        deadline = time.time() + 10
        while len(c.status()["ranks"]) < 2:
            self.assertLess(time.time(), deadline)
            time.sleep(0.05)
        rec = c.wait(c.sync("v2", self.t("d12")))
        self.assertEqual(rec["state"], "live", rec)
        c.assert_serves(self, self.t("v2"))
        # The successor's arenas are new segments under the same names.
        now = self.arenas(c)
        self.assertEqual(sorted(now), sorted(left))
        self.assertFalse(set(now.values()) & set(left.values()))

    # ---- the checksum chain: verify, scrub, early check, divergence after COMMIT

    Q = "model.layers.0.self_attn.q_proj.weight"      # row-sharded: each rank owns its rows
    DOWN = "model.layers.0.mlp.down_proj.weight"      # column-sharded
    NORM = "model.layers.0.input_layernorm.weight"    # replicated: rank 0 owns, rank 1 copies

    def wait_verified(self, c, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            ck = c.status()["checksums"]
            if ck["checkpoint_verified"] and ck["current"]:
                return ck
            time.sleep(0.05)
        raise AssertionError(f"no verified checksum table: {c.status()}")

    def test_verify_at_start_scrub_catches_a_bit_flip_and_refuses_syncs(self):
        state = self.t("state-" + str(time.time_ns()))
        c = self.cluster(tp=2, sidecar_args=["--verify-checkpoint", self.t("v1"), "--state-dir", state])
        ck = self.wait_verified(c)
        self.assertEqual(ck["version"], "v1")
        self.assertEqual(ck["diverged"], "")
        job = [h for h in c.status()["history"] if h["kind"] == "verify"][0]
        job = c.wait(job["id"])  # the table is stored just before the record finishes
        self.assertEqual(job["state"], "verified", job)
        self.assertGreater(job["bytes_checked"], 8 << 20)  # both ranks read their weights
        self.assertEqual(c.scrub()["state"], "verified")

        c.corrupt(1, self.DOWN, 5)
        rec = c.scrub()
        self.assertEqual(rec["state"], "diverged", rec)
        self.assertIn(f"tensor '{self.DOWN}' (rank 1): the engine holds Adler-32 0x", rec["error"])
        self.assertEqual(len(rec["mismatches"]), 1, rec)
        st = c.status()
        self.assertIn(self.DOWN, st["diverged"])
        m = c.metrics()
        self.assertIn("deltakv_engine_diverged 1", m)
        self.assertIn('deltakv_checks_total{kind="scrub",result="diverged"} 1', m)
        before = c.answers()
        rec = c.wait(c.sync("v2", self.t("d12")))
        self.assertEqual(rec["state"], "aborted", rec)
        self.assertIn("refused until the engine is verified again", rec["error"])
        self.assertEqual(c.answers(), before)

        # Still wrong: the verify fails and names the same tensor; repaired: it clears.
        self.assertEqual(c.verify(self.t("v1"))["state"], "diverged")
        c.corrupt(1, self.DOWN, 5)
        self.assertEqual(c.verify(self.t("v1"))["state"], "verified")
        self.assertEqual(c.status()["diverged"], "")
        self.assertIn("deltakv_engine_diverged 0", c.metrics())
        self.assertEqual(c.wait(c.sync("v2", self.t("d12")))["state"], "live")
        c.assert_serves(self, self.t("v2"))

    def test_verify_names_tensor_rank_and_values_of_flips_present_at_load(self):
        c = self.cluster(tp=2)
        c.corrupt(0, self.Q, 3)
        c.corrupt(1, self.NORM, 0, 0x01)
        rec = c.verify(self.t("v1"))
        self.assertEqual(rec["state"], "diverged", rec)
        mism = rec["mismatches"]
        self.assertEqual(len(mism), 2, mism)
        q = [x for x in mism if self.Q in x][0]
        self.assertRegex(q, r"\(rank 0\): the engine holds Adler-32 0x[0-9a-f]{8}, the checkpoint has 0x[0-9a-f]{8}")
        n = [x for x in mism if self.NORM in x][0]
        self.assertIn("rank 1 serves a replica that differs from its owners' bytes", n)
        # A checkpoint that is not there, or is another version, is a failed or diverged verify.
        self.assertEqual(c.verify(self.t("no-such-checkpoint"))["state"], "failed")

    def test_table_survives_restart_moves_with_syncs_and_the_early_check_catches_flips(self):
        state = self.t("state-" + str(time.time_ns()))
        c = self.cluster(tp=2, sidecar_args=["--state-dir", state])
        self.assertEqual(c.verify(self.t("v1"))["state"], "verified")
        table = json.loads(read(os.path.join(state, "checksums.json")))
        self.assertEqual(table["format"], "deltakv.checksum-table/1")
        self.assertEqual(table["version"], "v1")
        # A sidecar restart keeps the table; it is still current for the same rank processes.
        c.restart_sidecar()
        ck = self.wait_verified(c)
        self.assertEqual(ck["version"], "v1")
        # Each commit moves the table to the new checksums; a scrub then agrees with the bytes.
        rec = c.wait(c.sync("v2", self.t("d12")))
        self.assertEqual(rec["state"], "live", rec)
        self.assertNotIn("check", rec["phase_ms"])  # the table vouched for the parent
        self.assertEqual(c.status()["checksums"]["version"], "v2")
        # Its source names the job as the API does.
        self.assertTrue(c.status()["checksums"]["source"].startswith(f"sync {rec['id']} on "),
                        c.status()["checksums"])
        self.assertEqual(c.scrub()["state"], "verified")
        # A fresh sidecar without the table: the next sync checksums the live bytes first
        # (early check) and refuses a delta whose parent is not what the engine holds.
        c.sidecar.send_signal(signal.SIGTERM)
        c.sidecar.wait()
        c.sidecar_args = []
        c.start_sidecar()
        c.corrupt(0, self.Q, 11)
        before = c.answers()
        rec = c.wait(c.sync("v3", self.t("d23")))
        self.assertEqual(rec["state"], "aborted", rec)
        self.assertIn(f"refused before decoding: the engine holds tensor '{self.Q}' with Adler-32", rec["error"])
        self.assertIn("check", rec["phase_ms"])
        self.assertEqual(c.answers(), before)
        c.corrupt(0, self.Q, 11)
        rec = c.wait(c.sync("v3", self.t("d23")))
        self.assertEqual(rec["state"], "live", rec)
        c.assert_serves(self, self.t("v3"))

    def test_a_sync_stops_a_running_scrub(self):
        c = self.cluster(tp=2)
        self.assertEqual(c.verify(self.t("v1"))["state"], "verified")
        # 1 MB/s per rank: this scrub would take seconds.
        code, body = http("POST", c.url + "/v1/scrub", {"rate_gbps": 0.001}, TOKEN)
        self.assertEqual(code, 202, body)
        scrub = body["id"]
        while http("GET", f"{c.url}/v1/syncs/{scrub}")[1]["state"] != "verifying":
            time.sleep(0.01)
        t0 = time.time()
        sid = c.sync("v2", self.t("d12"))  # queued, not refused
        rec = c.wait(sid)
        self.assertEqual(rec["state"], "live", rec)
        self.assertLess(time.time() - t0, 3.0)
        srec = c.wait(scrub)
        self.assertEqual(srec["state"], "failed", srec)
        self.assertEqual(srec["error"], f"stopped for sync {sid}")
        c.assert_serves(self, self.t("v2"))
        self.assertEqual(c.scrub()["state"], "verified")

    def test_failure_after_commit_is_diverged_not_aborted(self):
        c = self.cluster(tp=2)
        code, _ = http("POST", f"http://127.0.0.1:{c.rank_ports[1]}/v1/fail-derived", {})
        self.assertEqual(code, 200)
        rec = c.wait(c.sync("v2", self.t("d12")))
        self.assertEqual(rec["state"], "diverged", rec)
        self.assertIn("decided COMMIT but not every rank applied it: ranks 0 serve 'v2'", rec["error"])
        self.assertIn("rank 1: rank 1: diverged: commit failed after the COMMIT decision", rec["error"])
        self.assertIn("derived-weights callback failed", rec["error"])
        # Every view agrees: both ranks hold v2's weights (rank 1's derived weights may be stale),
        # rank 1's handle says DIVERGED, the sidecar refuses syncs until a verify.
        self.assertEqual(c.rank_state(1)["engine_state"], 6)
        self.assertEqual(c.rank_state(0)["engine_state"], 1)
        st = c.status()
        self.assertEqual(st["live_version"], "v2")
        self.assertEqual({r["version"] for r in st["ranks"]}, {"v2"})
        self.assertIn("not every rank applied it", st["diverged"])
        self.assertIn('deltakv_syncs_total{result="diverged"} 1', c.metrics())
        c.assert_serves(self, self.t("v2"))
        rec = c.wait(c.sync("v3", self.t("d23")))
        self.assertEqual(rec["state"], "aborted", rec)
        self.assertEqual(c.verify(self.t("v2"))["state"], "verified")
        self.assertEqual(c.status()["diverged"], "")

    def test_failure_after_commit_in_poll_mode_names_the_new_version(self):
        # The same failure with the commit applied by deltakv_engine_poll: the new bytes are in
        # place, so the rank's tensor table names the version it now serves.
        c = self.cluster(tp=1, poll=True)
        code, _ = http("POST", f"http://127.0.0.1:{c.rank_ports[0]}/v1/fail-derived", {})
        self.assertEqual(code, 200)
        rec = c.wait(c.sync("v2", self.t("d12")))
        self.assertEqual(rec["state"], "diverged", rec)
        self.assertIn("derived-weights callback failed", rec["error"])
        self.assertEqual(c.rank_state(0)["engine_state"], 6)
        self.assertEqual({r["version"] for r in c.status()["ranks"]}, {"v2"})
        c.assert_serves(self, self.t("v2"))
        # deltakv_engine_poll said so with DATA_LOSS (a failed commit), not INTERNAL (a bug).
        log = read(os.path.join(c.tmp, "engine.log"), "r")
        self.assertIn("rank 0: poll: DATA_LOSS: ", log)

    def test_rank_killed_after_the_commit_decision_is_diverged(self):
        c = self.cluster(tp=2)
        code, _ = http("POST", f"http://127.0.0.1:{c.rank_ports[1]}/v1/slow-pause", {"ms": 3000})
        self.assertEqual(code, 200)
        victim = [r for r in c.status()["ranks"] if r["rank"] == 1][0]["pid"]
        sid = c.sync("v2", self.t("d12"))
        deadline = time.time() + 30
        while http("GET", f"{c.url}/v1/syncs/{sid}")[1]["state"] != "committing":
            self.assertLess(time.time(), deadline)
            time.sleep(0.01)
        os.kill(victim, signal.SIGKILL)
        rec = c.wait(sid)
        self.assertEqual(rec["state"], "diverged", rec)
        self.assertIn("ranks 0 serve 'v2'", rec["error"])
        self.assertIn("rank 1: engine rank 1", rec["error"])
        self.assertIn("died", rec["error"])
        # The survivor serves v2, and every view says so.
        local = c.dump(0)
        for name, (info, data) in checkpoint_tensors(self.t("v2")).items():
            self.assertEqual(local[name], expected_local(name, info, data, 0, 2), name)
        st = c.status()
        self.assertEqual(st["live_version"], "v2")
        self.assertIn("not every rank applied it", st["diverged"])
        dead = [r for r in st["ranks"] if r["rank"] == 1]
        self.assertTrue(not dead or not dead[0]["alive"], st["ranks"])
        self.assertIn('deltakv_syncs_total{result="diverged"} 1', c.metrics())

    def staged_then(self, c, act):
        """Starts v1 -> v2 with the sidecar held 3 s after every rank reported STAGED, runs
        act() in that window and returns the sync's record."""
        c.restart_sidecar({"DELTAKV_FAULT_STALL": "staged:3000"})
        sid = c.sync("v2", self.t("d12"))
        deadline = time.time() + 30
        while http("GET", f"{c.url}/v1/syncs/{sid}")[1]["state"] != "staged":
            self.assertLess(time.time(), deadline)
            time.sleep(0.01)
        act()
        return c.wait(sid)

    def test_rank_that_dies_after_staging_aborts_the_sync(self):
        c = self.cluster(tp=2)
        before = c.answers()
        victim = [r for r in c.status()["ranks"] if r["rank"] == 1][0]["pid"]
        rec = self.staged_then(c, lambda: os.kill(victim, signal.SIGKILL))
        self.assertEqual(rec["state"], "aborted", rec)
        self.assertIn("engine rank 1", rec["error"])
        self.assertIn("died", rec["error"])
        # The survivor dropped the sync: old answers, no policy change, and syncs go on.
        self.assertEqual(c.rank_state(0)["answer"], before[0])
        self.assertEqual(c.rank_state(0)["policy_version"], 0)
        self.assertFalse(c.status().get("diverged"), c.status())

    def test_sidecar_stalled_past_the_stale_threshold_after_staging_aborts(self):
        c = self.cluster(tp=2)
        before = c.answers()

        def stall():
            c.sidecar.send_signal(signal.SIGSTOP)  # the ranks judge it dead within ~1 s
            time.sleep(2.5)
            c.sidecar.send_signal(signal.SIGCONT)

        rec = self.staged_then(c, stall)
        self.assertEqual(rec["state"], "aborted", rec)
        self.assertIn("cannot decide COMMIT", rec["error"])
        self.assertLess(rec["total_ms"], 20000, rec)  # not the 120 s commit timeout
        self.assertEqual(c.answers(), before)
        self.assertFalse(c.status().get("diverged"), c.status())
        # Nothing to verify: the next sync runs and goes live.
        rec = c.wait(c.sync("v2", self.t("d12")))
        self.assertEqual(rec["state"], "live", rec)
        c.assert_serves(self, self.t("v2"))

    def test_rank_stopped_mid_sync_is_noticed_by_its_heartbeat(self):
        c = self.cluster(tp=2)
        c.restart_sidecar({"DELTAKV_FAULT_STALL": "planned:1500"})
        ranks = c.status()["ranks"]
        sid = c.sync("v2", self.t("d12"))
        time.sleep(0.3)
        victim = [r for r in ranks if r["rank"] == 1][0]["pid"]
        os.kill(victim, signal.SIGSTOP)
        try:
            rec = c.wait(sid, timeout=30)
        finally:
            os.kill(victim, signal.SIGCONT)
        self.assertEqual(rec["state"], "aborted", rec)
        self.assertIn("engine rank 1", rec["error"])
        self.assertIn("no heartbeat", rec["error"])
        self.assertLess(rec["total_ms"], 10000, rec)  # not the 120 s stage timeout

    def test_a_dead_ranks_tensor_table_is_removed(self):
        c = self.cluster(tp=2)
        table = f"/dev/shm/{c.shm}.tensors.1"
        self.assertTrue(os.path.exists(table))
        victim = [r for r in c.status()["ranks"] if r["rank"] == 1][0]["pid"]
        os.kill(victim, signal.SIGKILL)
        deadline = time.time() + 10
        while os.path.exists(table):
            self.assertLess(time.time(), deadline, "the dead rank's table stayed in /dev/shm")
            rec = c.scrub()  # any job reclaims dead ranks first
            self.assertEqual(rec["state"], "failed", rec)
            time.sleep(0.2)
        self.assertTrue(os.path.exists(f"/dev/shm/{c.shm}.tensors.0"))

    def test_rank_killed_mid_sync(self):
        c = self.cluster(tp=2)
        c.restart_sidecar({"DELTAKV_FAULT_STALL": "planned:1500"})
        before = c.answers()
        ranks = c.status()["ranks"]
        sid = c.sync("v2", self.t("d12"))
        time.sleep(0.5)
        victim = [r for r in ranks if r["rank"] == 1][0]["pid"]
        os.kill(victim, signal.SIGKILL)
        rec = c.wait(sid)
        self.assertEqual(rec["state"], "aborted", rec)
        self.assertIn("rank 1", rec["error"])
        self.assertIn("died", rec["error"])
        self.assertEqual(c.rank_state(0)["answer"], before[0])
        self.assertEqual(c.rank_state(0)["policy_version"], 0)


class PidNamespaceE2ETest(ChainFixture, unittest.TestCase):
    """The engine in a PID namespace of its own, as in a Kubernetes pod without
    shareProcessNamespace: the ranks' pids (1 and its children) mean nothing to the sidecar, and
    the sidecar's pid means nothing to them. Liveness rests on the token files in /dev/shm."""

    def test_sync_with_the_engine_in_its_own_pid_namespace(self):
        unshare = ["unshare", "--pid", "--fork", "--kill-child"]
        if subprocess.run([*unshare, "true"], capture_output=True).returncode != 0:
            self.skipTest("cannot create a PID namespace here (needs root)")
        c = Cluster(self.tmp, self.t("v1"), tp=2, engine_prefix=unshare)
        try:
            time.sleep(1.5)  # longer than the stale threshold: nobody was judged dead
            ranks = c.status()["ranks"]
            self.assertEqual(len(ranks), 2, ranks)
            self.assertTrue(all(r["alive"] for r in ranks), ranks)
            rec = c.wait(c.sync("v2", self.t("d12")))
            self.assertEqual(rec["state"], "live", rec)  # the ranks saw the sidecar alive
            c.assert_serves(self, self.t("v2"))
            # SIGKILL the engine (its namespace dies with it): both ranks read dead within ~2 s.
            c.engine.kill()
            c.engine.wait()
            deadline = time.time() + 2
            while any(r["alive"] for r in c.status()["ranks"]) and time.time() < deadline:
                time.sleep(0.05)
            self.assertFalse(any(r["alive"] for r in c.status()["ranks"]), c.status()["ranks"])
        finally:
            c.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    ap.add_argument("--engine", required=True)
    args, rest = ap.parse_known_args()
    DELTAKV, ENGINE = os.path.abspath(args.deltakv), os.path.abspath(args.engine)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
