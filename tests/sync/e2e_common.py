"""What the end-to-end sync suites share: HTTP and file helpers, a Cluster (the real `deltakv
sidecar` process and deltakv-demo-engine rank processes, linking libdeltakv through its C ABI,
on real shared memory and loopback HTTP), the checkpoint chain fixture, the SyncCase base of
the single-node suites and their main().

Each suite runs as: python3 tests/sync/<suite>.py --deltakv build/sidecar/deltakv \
        --engine build/shim/deltakv-demo-engine
"""
import argparse
import json, os, shutil, signal, subprocess, sys, tempfile, time, unittest
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


class SyncCase(ChainFixture, unittest.TestCase):
    """A single-node suite: each test starts its clusters with cluster() and they are stopped
    after it."""

    # Tensors of the generated model the tests corrupt or look at.
    Q = "model.layers.0.self_attn.q_proj.weight"      # row-sharded: each rank owns its rows
    DOWN = "model.layers.0.mlp.down_proj.weight"      # column-sharded
    NORM = "model.layers.0.input_layernorm.weight"    # replicated: rank 0 owns, rank 1 copies

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

    def arenas(self, c):
        """The sidecar's plan arenas: name -> inode."""
        return {f: os.stat(os.path.join("/dev/shm", f)).st_ino
                for f in os.listdir("/dev/shm") if f.startswith(c.shm + "-plan-")}

    def wait_verified(self, c, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            ck = c.status()["checksums"]
            if ck["checkpoint_verified"] and ck["current"]:
                return ck
            time.sleep(0.05)
        raise AssertionError(f"no verified checksum table: {c.status()}")


def main():
    """Runs the suites of the calling module: --deltakv and --engine name the binaries."""
    global DELTAKV, ENGINE
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    ap.add_argument("--engine", required=True)
    args, rest = ap.parse_known_args()
    DELTAKV, ENGINE = os.path.abspath(args.deltakv), os.path.abspath(args.engine)
    unittest.main(module="__main__", argv=[sys.argv[0], *rest], verbosity=2)
