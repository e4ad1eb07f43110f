"""End-to-end tests of multi-node sync: a real etcd, two real sidecars (one per "node", each
with its own shared memory) and their real engine processes, one model group. Every node
commits a sync or none does, and the decision is read from etcd before any byte is written.

Run: python3 tests/sync/group_e2e_test.py --deltakv build/sidecar/deltakv \
        --engine build/shim/deltakv-demo-engine
Skips when /usr/bin/etcd (Debian's etcd-server) is missing.
"""
import argparse, base64, json, os, shutil, signal, socket, subprocess, sys, tempfile, threading
import time, unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common as base  # noqa: E402

ETCD = "/usr/bin/etcd"


def free_ports(n):
    """n distinct loopback ports that were free a moment ago (all held open together, so
    they differ; another process may still take one before etcd binds it: see Etcd)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port():
    return free_ports(1)[0]


class Etcd:
    """A single-member etcd on loopback. A port taken between choosing it and etcd binding
    it makes etcd exit at once; that start is retried on fresh ports."""

    def __init__(self, tmp, attempts=3):
        self.log_path = os.path.join(tmp, "etcd.log")
        for attempt in range(attempts):
            if self._start(tmp, attempt):
                return
        with open(self.log_path, "rb") as f:
            tail = f.read()[-2000:].decode(errors="replace")
        raise AssertionError("etcd did not start; its log ends:\n" + tail)

    def _start(self, tmp, attempt):
        client, peer_port = free_ports(2)
        self.url = f"http://127.0.0.1:{client}"
        peer = f"http://127.0.0.1:{peer_port}"
        data = os.path.join(tmp, "etcd" if attempt == 0 else f"etcd{attempt}")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [ETCD, "--data-dir", data, "--listen-client-urls", self.url,
             "--advertise-client-urls", self.url, "--listen-peer-urls", peer,
             "--initial-advertise-peer-urls", peer, "--initial-cluster", "default=" + peer],
            stdout=subprocess.DEVNULL, stderr=self._log)
        deadline = time.time() + 30
        while True:
            try:
                code, _ = base.http("GET", self.url + "/health")
                if code == 200:
                    return True
            except OSError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                return False
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self._log.close()


class TcpProxy:
    """Forwards a loopback port to `target_port`. cut() closes the listener and every
    connection (a network partition: connections are refused), heal() listens again on the
    same port."""

    def __init__(self, target_port):
        self.target = target_port
        self.port = free_port()
        self.lock = threading.Lock()
        self.conns = []
        self.listener = None
        self.heal()

    def heal(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(64)
        self.listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def cut(self):
        with self.lock:
            self.listener.close()
            for c in self.conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self.conns = []

    def _accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def etcd_keys(url, prefix):
    """The keys under `prefix` (etcd's v3 JSON gateway), read straight from etcd."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    b64 = lambda t: base64.b64encode(t.encode()).decode()
    code, body = base.http("POST", url + "/v3/kv/range",
                           {"key": b64(prefix), "range_end": b64(end), "keys_only": True})
    assert code == 200, (code, body)
    return [base64.b64decode(kv["key"]).decode() for kv in body.get("kvs", [])]


@unittest.skipUnless(os.path.exists(ETCD), "needs " + ETCD)
class GroupE2ETest(base.ChainFixture, unittest.TestCase):
    PREFIX = "deltakv-group-"

    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=self.tmp)
        self.etcd = Etcd(self.dir)
        self.group = f"g{time.time_ns()}"
        self.nodes = {}

    def tearDown(self):
        for c in self.nodes.values():
            c.stop()
        self.etcd.stop()

    def node(self, name, tp, prepare_ms=3000, members="a,b", checkpoint="v1", env=None,
             first_rank=0, tp_world=0, topology=None, args=(), etcd_url=None, engine_args=()):
        d = os.path.join(self.dir, "node-" + name)
        os.makedirs(d, exist_ok=True)
        extra = (["--topology", topology] if topology else []) + list(args)
        c = base.Cluster(d, self.t(checkpoint), tp=tp, env=env, first_rank=first_rank,
                         tp_world=tp_world, engine_args=engine_args, sidecar_args=[
            "--group", self.group, "--node", name, "--group-members", members,
            "--etcd-endpoints", etcd_url or self.etcd.url,
            "--group-prepare-timeout-ms", str(prepare_ms),
            "--group-in-doubt-timeout-ms", "500", *extra])
        self.nodes[name] = c
        return c

    def corrupt_copy(self, delta):
        """A copy of the delta `delta` whose first shard has one byte flipped."""
        bad = self.t(f"{delta}-bad-{time.time_ns()}")
        shutil.copytree(self.t(delta), bad)
        shard = sorted(f for f in os.listdir(bad) if f != "manifest.json")[0]
        data = bytearray(base.read(os.path.join(bad, shard)))
        data[len(data) // 2] ^= 0x5A
        base.write(os.path.join(bad, shard), data)
        return bad

    def sync_all(self, version, deltas):
        ids = {n: self.nodes[n].sync(version, d) for n, d in deltas.items()}
        return {n: self.nodes[n].wait(i) for n, i in ids.items()}

    def test_every_node_commits_together(self):
        a, b = self.node("a", tp=1), self.node("b", tp=2)
        recs = self.sync_all("v2", {"a": self.t("d12"), "b": self.t("d12")})
        for n, rec in recs.items():
            self.assertEqual(rec["state"], "live", (n, rec))
            self.assertIn("group", rec["phase_ms"])  # waited for the group's decision
        a.assert_serves(self, self.t("v2"))
        b.assert_serves(self, self.t("v2"))
        recs = self.sync_all("v3", {"a": self.t("d23"), "b": self.t("d23")})
        self.assertEqual([r["state"] for r in recs.values()], ["live", "live"])
        a.assert_serves(self, self.t("v3"))
        b.assert_serves(self, self.t("v3"))

    def assert_group_view(self, recs, nodes):
        """Every node's record has its own pause and the group's view with every node's pause
        and a resume skew >= 0 that agrees with the reported resume times."""
        for n, rec in recs.items():
            g = rec["group"]
            self.assertEqual(g["node"], n)
            self.assertGreater(g["commit_at_unix_ns"], 0)
            self.assertLessEqual(g["commit_wait_ms"], 50.0 + 1e-6)  # never past the margin
            own = g["pause"]
            self.assertGreater(own["pause_start_ns"], 0)
            self.assertGreaterEqual(own["resume_ns"], own["pause_start_ns"])
            v = g["view"]
            self.assertEqual(sorted(v["nodes"]), sorted(nodes), (n, v))
            self.assertEqual(v["missing"], [])
            self.assertEqual(v["nodes"][n], own)
            resumes = [p["resume_ns"] for p in v["nodes"].values()]
            self.assertAlmostEqual(v["resume_skew_ms"], (max(resumes) - min(resumes)) / 1e6, 3)
            self.assertGreaterEqual(v["resume_skew_ms"], 0)
            # One machine, one clock: the nodes resume within seconds of each other.
            self.assertLess(v["resume_skew_ms"], 5000)
            # Each node paused no earlier than a small tolerance before the commit point.
            self.assertGreater(own["pause_start_ns"], g["commit_at_unix_ns"] - 50_000_000)

    def test_pauses_and_resume_skew_are_reported(self):
        a, b = self.node("a", tp=1), self.node("b", tp=2)
        recs = self.sync_all("v2", {"a": self.t("d12"), "b": self.t("d12")})
        self.assertEqual([r["state"] for r in recs.values()], ["live", "live"], recs)
        self.assert_group_view(recs, ["a", "b"])
        # The same view in /v1/status's history and the skew in /metrics.
        for n, c in (("a", a), ("b", b)):
            hist = c.status()["history"][0]
            self.assertEqual(hist["group"]["view"], recs[n]["group"]["view"])
            self.assertEqual(c.status()["group"]["convergence"], "converged")
            latest = c.status()["group"]["latest"]  # the commit compared with
            self.assertEqual((latest["version"], latest["parent"]), ("v2", "v1"), latest)
            m = c.metrics()
            skew = [l for l in m.splitlines() if l.startswith("deltakv_group_resume_skew_ms ")]
            self.assertEqual(len(skew), 1, m)
            self.assertAlmostEqual(float(skew[0].split()[1]),
                                   recs[n]["group"]["view"]["resume_skew_ms"], 3)
            for node in ("a", "b"):
                self.assertIn(f'deltakv_group_node_pause_ms{{node="{node}"}}', m)

    def test_three_nodes_commit_at_one_point(self):
        nodes = {n: self.node(n, tp=1, members="a,b,c") for n in ("a", "b", "c")}
        recs = self.sync_all("v2", {n: self.t("d12") for n in nodes})
        self.assertEqual([r["state"] for r in recs.values()], ["live"] * 3, recs)
        self.assert_group_view(recs, ["a", "b", "c"])
        self.assertEqual(len({r["group"]["commit_at_unix_ns"] for r in recs.values()}), 1)
        for c in nodes.values():
            c.assert_serves(self, self.t("v2"))

    def test_a_node_restarted_after_the_commit_converges(self):
        a = self.node("a", tp=1)
        # b stops between reading COMMIT and deciding it for its ranks, and is killed there.
        b = self.node("b", tp=2, env={"DELTAKV_FAULT_STALL": "decided:20000"})
        ids = {"a": a.sync("v2", self.t("d12")), "b": b.sync("v2", self.t("d12"))}
        rec_a = a.wait(ids["a"])
        self.assertEqual(rec_a["state"], "live", rec_a)
        self.assertEqual(rec_a["group"]["view"]["missing"], ["b"])  # bounded wait, b silent
        deadline = time.time() + 20
        while "group" not in base.http("GET", f"{b.url}/v1/syncs/{ids['b']}")[1]["phase_ms"]:
            self.assertLess(time.time(), deadline)
            time.sleep(0.02)
        b.sidecar.send_signal(signal.SIGKILL)
        b.sidecar.wait()
        time.sleep(2.5)  # b's ranks notice the dead sidecar and drop the staged plan
        for r in range(2):
            self.assertEqual(b.rank_state(r)["version"], "v1")
        b.start_sidecar()  # no stall now
        deadline = time.time() + 30
        while True:
            g = b.status()["group"]
            hist = b.status()["history"]
            if hist and hist[0]["state"] in ("live", "aborted", "diverged"):
                break
            self.assertLess(time.time(), deadline, (g, hist))
            time.sleep(0.05)
        rec = hist[0]
        self.assertEqual(rec["state"], "live", rec)
        self.assertTrue(rec["group"]["catch_up"])
        self.assertEqual(rec["version"], "v2")
        self.assertEqual(b.status()["group"]["convergence"], "converged")
        self.assertEqual(b.status()["live_version"], "v2")
        b.assert_serves(self, self.t("v2"))
        a.assert_serves(self, self.t("v2"))

    def test_a_node_that_cannot_converge_says_why(self):
        a, b = self.node("a", tp=1), self.node("b", tp=1)
        recs = self.sync_all("v2", {"a": self.t("d12"), "b": self.t("d12")})
        self.assertEqual([r["state"] for r in recs.values()], ["live", "live"], recs)
        # b comes back with an engine on v3: neither the committed v2 nor its parent v1.
        b.stop()
        del self.nodes["b"]
        b = self.node("b", tp=1, checkpoint="v3")
        g = self.checked_convergence(b)
        self.assertEqual(g["convergence"], "cannot", g)
        self.assertIn("serves 'v3'", g["reason"])
        self.assertIn("'v2'", g["reason"])
        self.assertEqual(g["latest"]["version"], "v2")
        self.assertEqual(b.status()["history"], [])  # nothing was attempted
        self.assertEqual(b.rank_state(0)["version"], "v3")

    def test_one_node_failing_aborts_every_node(self):
        # Each node runs the delta posted to it: no peer prepare may bring the other's first
        # (their peer URLs lead nowhere; the coordinator would give up only after 3 s).
        a, b = (self.node(n, tp=1, args=["--peer-url", f"http://127.0.0.1:{free_port()}"])
                for n in ("a", "b"))
        before = a.answers() + b.answers()
        # Node b's copy of the delta has a corrupt shard: b fails, so a must not commit.
        bad = self.corrupt_copy("d12")
        recs = self.sync_all("v2", {"a": self.t("d12"), "b": bad})
        self.assertEqual(recs["b"]["state"], "aborted", recs["b"])
        self.assertEqual(recs["a"]["state"], "aborted", recs["a"])
        self.assertIn("decided ABORT", recs["a"]["error"])
        self.assertIn("node 'b'", recs["a"]["error"])
        self.assertEqual(a.answers() + b.answers(), before)  # nobody wrote a byte
        for c in (a, b):
            self.assertEqual(c.rank_state(0)["version"], "v1")
            self.assertEqual(c.status()["live_version"], "v1")
        # A retry with good data on both goes live (a new attempt of the same step). A node
        # about to COMMIT asks the others' peer URLs whether they hold the staged plan, so the
        # nodes come back with URLs that answer.
        for n in ("a", "b"):
            self.nodes.pop(n).stop()
        a, b = self.node("a", tp=1), self.node("b", tp=1)
        recs = self.sync_all("v2", {"a": self.t("d12"), "b": self.t("d12")})
        self.assertEqual([r["state"] for r in recs.values()], ["live", "live"], recs)
        a.assert_serves(self, self.t("v2"))
        b.assert_serves(self, self.t("v2"))

    def test_a_node_that_never_prepares_times_the_sync_out(self):
        a = self.node("a", tp=1, prepare_ms=1000)
        # b advertises a peer URL where nothing listens: a's prepare never reaches it.
        self.node("b", tp=1, prepare_ms=1000,
                  args=["--peer-url", f"http://127.0.0.1:{free_port()}"])
        before = a.answers()
        t0 = time.time()
        rec = a.wait(a.sync("v2", self.t("d12")))  # b is never asked
        self.assertEqual(rec["state"], "aborted", rec)
        self.assertRegex(rec["error"], r"missing: b|node 'b' did not accept the prepare")
        self.assertLess(time.time() - t0, 15)
        self.assertEqual(a.answers(), before)

    def test_etcd_down_aborts_every_node(self):
        a, b = self.node("a", tp=1), self.node("b", tp=1)
        before = a.answers() + b.answers()
        self.etcd.stop()
        recs = self.sync_all("v2", {"a": self.t("d12"), "b": self.t("d12")})
        for n, rec in recs.items():
            self.assertEqual(rec["state"], "aborted", (n, rec))
            self.assertIn("etcd", rec["error"])
        self.assertEqual(a.answers() + b.answers(), before)

    def wait_prepared(self, node, timeout=20):
        """Waits until `node`'s PREPARED key of some sync is in etcd."""
        deadline = time.time() + timeout
        while not any(k.endswith("/prepared/" + node)
                      for k in etcd_keys(self.etcd.url, f"/deltakv/{self.group}/syncs/")):
            self.assertLess(time.time(), deadline, f"node {node} never prepared")
            time.sleep(0.02)

    def wait_history(self, c, predicate, timeout=30):
        """Waits until the newest job in `c`'s history satisfies `predicate`; returns it."""
        deadline = time.time() + timeout
        while True:
            hist = c.status()["history"]
            if hist and predicate(hist[0]):
                return hist[0]
            self.assertLess(time.time(), deadline, (c.status()["group"], hist[:1]))
            time.sleep(0.05)

    def test_a_node_killed_between_prepared_and_the_decision_aborts_every_node(self):
        # a prepares late (it stalls before its PREPARED); b prepares and is killed while its
        # PREPARED still stands on its lease (10 s). a must not count it: b does not answer.
        a = self.node("a", tp=1, env={"DELTAKV_FAULT_STALL": "staged:2500"})
        b = self.node("b", tp=2)
        before = a.answers() + b.answers()
        ids = {"a": a.sync("v2", self.t("d12")), "b": b.sync("v2", self.t("d12"))}
        self.wait_prepared("b")
        b.sidecar.send_signal(signal.SIGKILL)
        b.sidecar.wait()
        rec = a.wait(ids["a"])
        self.assertEqual(rec["state"], "aborted", rec)
        self.assertIn("node 'b' does not answer", rec["error"])
        self.assertEqual(a.answers() + b.answers(), before)  # nobody wrote a byte
        time.sleep(2.5)  # b's ranks notice the dead sidecar and drop the staged plan
        b.start_sidecar()
        self.assertEqual(self.checked_convergence(b)["convergence"], "converged")
        self.assert_on_v1_then_a_retry_goes_live(a, b)

    def checked_convergence(self, c, timeout=20):
        """`c`'s group standing once its convergence check ran."""
        deadline = time.time() + timeout
        while c.status()["group"]["convergence"] == "unchecked":
            self.assertLess(time.time(), deadline)
            time.sleep(0.05)
        return c.status()["group"]

    def assert_on_v1_then_a_retry_goes_live(self, a, b):
        for c in (a, b):
            self.assertEqual(c.status()["live_version"], "v1")
            c.assert_serves(self, self.t("v1"))
        recs = self.sync_all("v2", {"a": self.t("d12"), "b": self.t("d12")})
        self.assertEqual([r["state"] for r in recs.values()], ["live", "live"], recs)
        a.assert_serves(self, self.t("v2"))
        b.assert_serves(self, self.t("v2"))

    def test_etcd_stopped_while_the_nodes_wait_for_the_decision(self):
        # Both nodes reach PREPARED-or-about-to and etcd stops answering (SIGSTOP): neither can
        # learn or write a decision, both give up (in doubt) and keep the old version. Once etcd
        # answers again, each node settles the attempt as ABORT and a retry goes live.
        a = self.node("a", tp=1, prepare_ms=1500, env={"DELTAKV_FAULT_STALL": "staged:800"})
        b = self.node("b", tp=1, prepare_ms=1500)
        before = a.answers() + b.answers()
        ids = {"a": a.sync("v2", self.t("d12")), "b": b.sync("v2", self.t("d12"))}
        self.wait_prepared("b")
        self.etcd.proc.send_signal(signal.SIGSTOP)
        try:
            recs = {n: c.wait(ids[n]) for n, c in (("a", a), ("b", b))}
        finally:
            self.etcd.proc.send_signal(signal.SIGCONT)
        for n, rec in recs.items():
            self.assertEqual(rec["state"], "aborted", (n, rec))
            self.assertRegex(rec["error"], "decision is unknown|etcd", (n, rec))
        self.assertEqual(a.answers() + b.answers(), before)
        key = recs["b"]["group"]["key"]
        deadline = time.time() + 30
        while True:  # the nodes settle the attempt they gave up on
            decided = [k for k in etcd_keys(self.etcd.url, f"/deltakv/{self.group}/{key}/")
                       if k.endswith("/decision")]
            if decided and all(c.status()["group"]["convergence"] == "converged" for c in (a, b)):
                break
            self.assertLess(time.time(), deadline, (a.status()["group"], b.status()["group"]))
            time.sleep(0.05)
        self.assert_on_v1_then_a_retry_goes_live(a, b)

    def test_a_node_cut_off_from_etcd_after_prepared_converges_on_the_commit(self):
        # a prepares, then loses etcd (a partition: its endpoint is a proxy that is cut). b,
        # which still reaches etcd and a's peer API, prepares and writes COMMIT. a gives up
        # waiting, drops its plan and serves v1; when etcd answers again it learns the COMMIT
        # and applies it: both end on v2.
        proxy = TcpProxy(int(self.etcd.url.rsplit(":", 1)[1]))
        a = self.node("a", tp=1, prepare_ms=2000, etcd_url=f"http://127.0.0.1:{proxy.port}")
        b = self.node("b", tp=2, prepare_ms=6000, env={"DELTAKV_FAULT_STALL": "staged:1000"})
        ids = {"a": a.sync("v2", self.t("d12")), "b": b.sync("v2", self.t("d12"))}
        self.wait_prepared("a")
        proxy.cut()
        rec_b = b.wait(ids["b"])
        self.assertEqual(rec_b["state"], "live", rec_b)
        rec_a = a.wait(ids["a"])
        self.assertEqual(rec_a["state"], "aborted", rec_a)
        self.assertIn("decision is unknown", rec_a["error"])
        self.assertEqual(a.rank_state(0)["version"], "v1")
        proxy.heal()
        rec = self.wait_history(a, lambda r: r["id"] != ids["a"] and
                                r["state"] in ("live", "aborted", "failed"))
        self.assertEqual(rec["state"], "live", rec)
        self.assertTrue(rec["group"]["catch_up"])
        self.assertEqual(a.status()["group"]["convergence"], "converged")
        a.assert_serves(self, self.t("v2"))
        b.assert_serves(self, self.t("v2"))
        proxy.cut()

    def test_a_node_shut_down_while_waiting_for_the_decision_aborts_the_group(self):
        a = self.node("a", tp=1, prepare_ms=10000)
        b = self.node("b", tp=1, prepare_ms=10000, env={"DELTAKV_FAULT_STALL": "staged:2000"})
        before = a.answers() + b.answers()
        ids = {"a": a.sync("v2", self.t("d12")), "b": b.sync("v2", self.t("d12"))}
        self.wait_prepared("a")
        t0 = time.time()
        a.sidecar.send_signal(signal.SIGTERM)
        self.assertEqual(a.sidecar.wait(timeout=20), 0)  # a clean exit, not the timeout's
        self.assertLess(time.time() - t0, 5)
        rec = b.wait(ids["b"])
        self.assertEqual(rec["state"], "aborted", rec)
        self.assertIn("node 'a' is shutting down", rec["error"])
        self.assertEqual(b.answers(), before[1:])
        b.assert_serves(self, self.t("v1"))
        self.assertEqual(a.rank_state(0)["version"], "v1")

    def topology(self, nodes, world=4, tp=None, pp=1):
        path = os.path.join(self.dir, "topology.json")
        base.write(path, json.dumps({"format": "deltakv.topology/1", "world": world,
                                     "tp": tp or world, "pp": pp, "nodes": nodes}).encode())
        return path

    def split_nodes(self, env_b=None):
        """One TP-4 model over two nodes: a serves global ranks 0-1, b ranks 2-3."""
        topo = self.topology({"a": [0, 1], "b": [2, 3]})
        a = self.node("a", tp=2, first_rank=0, tp_world=4, topology=topo)
        b = self.node("b", tp=2, first_rank=2, tp_world=4, topology=topo, env=env_b)
        return a, b

    def stage_nodes(self, stages=("a", "b"), tp=2, env=None):
        """One model cut into pipeline stages, one node per stage, each serving its stage at
        TP `tp` (global ranks s*tp..s*tp+tp-1 of a tp x pp topology)."""
        pp = len(stages)
        topo = self.topology({n: list(range(s * tp, s * tp + tp)) for s, n in enumerate(stages)},
                             world=tp * pp, tp=tp, pp=pp)
        return [self.node(n, tp=tp, topology=topo, members=",".join(stages),
                          env=(env or {}).get(n),
                          engine_args=["--pp", str(pp), "--pp-stage", str(s)])
                for s, n in enumerate(stages)]

    def assert_stages_serve(self, nodes, checkpoint):
        """Each node serves its stage's tensors of `checkpoint`, and the stages cut the model
        into disjoint parts that cover every tensor."""
        held = [c.assert_serves(self, self.t(checkpoint), some=True) for c in nodes]
        self.assertTrue(all(held), held)
        self.assertEqual(sum(len(h) for h in held), len(set().union(*held)))
        self.assertEqual(set().union(*held), set(base.checkpoint_tensors(self.t(checkpoint))))

    def big_model(self):
        """A 128 MiB model whose large tensors span several 1 MiB frames: ({"v1", "v2"}
        checkpoint directories, the v1 -> v2 delta)."""
        big = {v: self.t("big-" + v) for v in ("v1", "v2")}
        if not os.path.exists(big["v2"]):
            self.k("checkpoint", "generate", "--out", big["v1"], "--size-mib", "128", "--files", "1")
            self.k("checkpoint", "mutate", "--parent", big["v1"], "--out", big["v2"],
                   "--density", "0.02", "--seed", "5")
            self.k("publish", "--parent", big["v1"], "--new", big["v2"], "--out",
                   self.t("big-d12"), "--frame-mib", "1")
        return big, self.t("big-d12")

    def test_pipeline_stages_fetch_only_their_frames(self):
        big, delta = self.big_model()
        topo = self.topology({"a": [0], "b": [1]}, world=2, tp=1, pp=2)
        a, b = (self.node(n, tp=1, topology=topo, checkpoint="big-v1",
                          engine_args=["--pp", "2", "--pp-stage", str(s)])
                for s, n in enumerate(("a", "b")))
        recs = self.sync_all("big-v2", {"a": delta, "b": delta})
        whole = self.delta_bytes(delta)
        for n, rec in recs.items():
            self.assertEqual(rec["state"], "live", (n, rec))
            self.assertLess(rec["bytes_fetched"], whole, (n, rec))
        self.assert_stages_serve([a, b], "big-v2")

    def test_pipeline_stages_on_two_nodes_each_sync_their_stage(self):
        a, b = self.stage_nodes()
        whole = self.delta_bytes(self.t("d12"))
        for step, (version, delta) in enumerate((("v2", "d12"), ("v3", "d23"))):
            recs = self.sync_all(version, {"a": self.t(delta), "b": self.t(delta)})
            for n, rec in recs.items():
                self.assertEqual(rec["state"], "live", (n, rec))
                # Each node reads the frames of its own stage's tensors only (this small
                # delta's frames share one fetch window, so no fewer bytes here).
                self.assertLessEqual(rec["bytes_fetched"], whole, (n, rec))
                self.assertGreater(rec["nonzero_bytes"], 0, (n, rec))
            self.assert_stages_serve([a, b], version)

    def test_expert_parallel_groups_on_two_nodes_sync_their_experts(self):
        # A mixture-of-experts model served at world 4 with ep 2: node a's ranks 0..1 are expert
        # group 0 (the first half of every layer's experts, split over its two ranks), node b's
        # ranks 2..3 are group 1. Each node fetches the frames of its own experts (plus the
        # shared tensors), and both go live together.
        moe = {v: self.t("moe-" + v) for v in ("v1", "v2", "v3")}
        if not os.path.exists(moe["v3"]):
            self.k("checkpoint", "generate", "--out", moe["v1"], "--size-mib", "96", "--files", "1",
                   "--experts", "4")
            for prev, cur, seed in (("v1", "v2", "7"), ("v2", "v3", "8")):
                self.k("checkpoint", "mutate", "--parent", moe[prev], "--out", moe[cur],
                       "--density", "0.02", "--seed", seed)
                self.k("publish", "--parent", moe[prev], "--new", moe[cur], "--out",
                       self.t(f"moe-d-{cur}"), "--frame-mib", "1")
        names = base.checkpoint_tensors(moe["v1"])
        self.assertTrue(any(n.endswith("mlp.experts.w13_weight") for n in names), list(names))
        topo = self.topology({"a": [0, 1], "b": [2, 3]})
        a = self.node("a", tp=2, first_rank=0, tp_world=4, topology=topo, checkpoint="moe-v1",
                      engine_args=["--ep", "2"])
        b = self.node("b", tp=2, first_rank=2, tp_world=4, topology=topo, checkpoint="moe-v1",
                      engine_args=["--ep", "2"])
        a.assert_serves(self, moe["v1"])
        b.assert_serves(self, moe["v1"])
        for version in ("v2", "v3"):
            delta = self.t(f"moe-d-{version}")
            recs = self.sync_all("moe-" + version, {"a": delta, "b": delta})
            whole = self.delta_bytes(delta)
            for n, rec in recs.items():
                self.assertEqual(rec["state"], "live", (n, rec))
                # Half of every expert tensor's frames belong to the other node's group.
                self.assertLess(rec["bytes_fetched"], whole, (n, rec))
            a.assert_serves(self, moe[version])
            b.assert_serves(self, moe[version])
        self.assertEqual(a.verify(moe["v3"])["state"], "verified")
        self.assertEqual(b.verify(moe["v3"])["state"], "verified")

    def test_a_tensor_no_stage_holds_aborts_every_node(self):
        # Both engines serve stage 0 of 2: stage 1's tensors are held by no node.
        topo = self.topology({"a": [0, 1], "b": [2, 3]}, world=4, tp=2, pp=2)
        a, b = (self.node(n, tp=2, topology=topo, engine_args=["--pp", "2", "--pp-stage", "0"])
                for n in ("a", "b"))
        before = a.answers() + b.answers()
        recs = self.sync_all("v2", {"a": self.t("d12"), "b": self.t("d12")})
        for n, rec in recs.items():
            self.assertEqual(rec["state"], "aborted", (n, rec))
            self.assertIn("which no node's engine registered (pipeline stages)", rec["error"])
        self.assertEqual(a.answers() + b.answers(), before)

    def delta_bytes(self, delta):
        m = json.loads(base.read(os.path.join(delta, "manifest.json")))
        return sum(o["size"] for o in m["objects"])

    def test_two_nodes_serve_one_tp4_model(self):
        a, b = self.split_nodes()
        whole = self.delta_bytes(self.t("d12"))
        recs = self.sync_all("v2", {"a": self.t("d12"), "b": self.t("d12")})
        for n, rec in recs.items():
            self.assertEqual(rec["state"], "live", (n, rec))
            # Each node reads only frames that overlap its ranks' bytes. The test model's tensors
            # are each one frame (< 1 MiB, the smallest frame size), so here every changed
            # tensor has a frame both nodes need: no node reads more than the delta.
            self.assertLessEqual(rec["bytes_fetched"], whole, (n, rec))
        a.assert_serves(self, self.t("v2"))
        b.assert_serves(self, self.t("v2"))
        recs = self.sync_all("v3", {"a": self.t("d23"), "b": self.t("d23")})
        self.assertEqual([r["state"] for r in recs.values()], ["live", "live"], recs)
        a.assert_serves(self, self.t("v3"))
        b.assert_serves(self, self.t("v3"))

    def test_split_nodes_verify_their_part_against_the_checkpoint(self):
        # a verifies at start, b on request; each compares only the bytes its ranks hold.
        topo = self.topology({"a": [0, 1], "b": [2, 3]})
        a = self.node("a", tp=2, first_rank=0, tp_world=4, topology=topo,
                      args=["--verify-checkpoint", self.t("v1")])
        b = self.node("b", tp=2, first_rank=2, tp_world=4, topology=topo)
        ChainTest = base.SyncCase
        ck = ChainTest.wait_verified(self, a)
        self.assertEqual(ck["version"], "v1")
        rec = b.verify(self.t("v1"))
        self.assertEqual(rec["state"], "verified", rec)
        self.assertTrue(b.status()["checksums"]["checkpoint_verified"], b.status())
        self.assertEqual(b.scrub()["state"], "verified")

        # One bit flipped in b's memory of a split tensor (column shard: every row is split
        # between the nodes): b's verify names the tensor, the node and both sums; a is fine.
        down = ChainTest.DOWN
        b.corrupt(1, down, 5, 0x01)
        rec = b.verify(self.t("v1"))
        self.assertEqual(rec["state"], "diverged", rec)
        self.assertEqual(len(rec["mismatches"]), 1, rec)
        self.assertRegex(rec["mismatches"][0],
                         rf"tensor '{down}' \(split over nodes; node 'b' holds part of it at "
                         r"global ranks 2\.\.3 of 4; differing: local rank 1\): the engine's part "
                         r"has Adler-32 partial sums S1 \d+ S2 \d+, the checkpoint's bytes there "
                         r"give S1 \d+ S2 \d+")
        self.assertIn(down, b.status()["diverged"])
        self.assertEqual(a.verify(self.t("v1"))["state"], "verified")

        # Repaired and verified again: the group syncs, and the tables move with it.
        b.corrupt(1, down, 5, 0x01)
        self.assertEqual(b.verify(self.t("v1"))["state"], "verified")
        self.assertTrue(b.status()["checksums"]["checkpoint_verified"], b.status())
        recs = self.sync_all("v2", {"a": self.t("d12"), "b": self.t("d12")})
        self.assertEqual([r["state"] for r in recs.values()], ["live", "live"], recs)
        a.assert_serves(self, self.t("v2"))
        b.assert_serves(self, self.t("v2"))
        self.assertEqual(a.scrub()["state"], "verified")
        self.assertEqual(b.scrub()["state"], "verified")
        self.assertEqual(b.verify(self.t("v2"))["state"], "verified")

    def test_a_diverged_node_aborts_the_group_and_a_retry_after_verify_goes_live(self):
        a, b = self.node("a", tp=1), self.node("b", tp=1)
        down = base.SyncCase.DOWN
        b.corrupt(0, down, 5, 0x01)
        self.assertEqual(b.verify(self.t("v1"))["state"], "diverged")
        before = a.answers() + b.answers()
        recs = self.sync_all("v2", {"a": self.t("d12"), "b": self.t("d12")})
        for n, rec in recs.items():
            self.assertEqual(rec["state"], "aborted", (n, rec))
        self.assertIn("verified again", recs["b"]["error"], recs["b"])
        # b's refusal is the group's ABORT: a does not wait for b's PREPARED until its deadline.
        self.assertIn("node 'b'", recs["a"]["error"], recs["a"])
        self.assertEqual(a.answers() + b.answers(), before)
        b.corrupt(0, down, 5, 0x01)
        self.assertEqual(b.verify(self.t("v1"))["state"], "verified")
        recs = self.sync_all("v2", {"a": self.t("d12"), "b": self.t("d12")})
        self.assertEqual([r["state"] for r in recs.values()], ["live", "live"], recs)
        a.assert_serves(self, self.t("v2"))
        b.assert_serves(self, self.t("v2"))

    def test_split_nodes_fetch_only_their_frames_and_a_frame_only_b_reads_aborts_both(self):
        big, delta = self.big_model()
        m = json.loads(base.read(os.path.join(delta, "manifest.json")))
        # The last frame of a tensor split by rows belongs to the last global rank (node b).
        gate = next(t for t in m["tensors"] if t["name"].endswith("mlp.gate_proj.weight")
                    and len(t["frames"]) >= 2)
        last = gate["frames"][-1]
        bad = self.t("big-d12-bad-" + str(time.time_ns()))
        shutil.copytree(delta, bad)
        path = os.path.join(bad, last["object"])
        data = bytearray(base.read(path))
        data[last["object_offset"] + last["compressed_length"] // 2] ^= 0x40
        base.write(path, bytes(data))

        topo = self.topology({"a": [0, 1], "b": [2, 3]})
        a = self.node("a", tp=2, first_rank=0, tp_world=4, topology=topo, checkpoint="big-v1")
        b = self.node("b", tp=2, first_rank=2, tp_world=4, topology=topo, checkpoint="big-v1")
        before = a.answers() + b.answers()
        recs = self.sync_all("big-v2", {"a": bad, "b": bad})
        for n, rec in recs.items():
            self.assertEqual(rec["state"], "aborted", (n, rec))
        # b read the bad frame and failed; a read none of it and aborted on b's word.
        self.assertEqual(recs["a"]["bytes_fetched"] < self.delta_bytes(delta), True, recs["a"])
        self.assertIn("node 'b'", recs["a"]["error"], recs["a"])
        self.assertEqual(a.answers() + b.answers(), before)  # nothing written on either node

        recs = self.sync_all("big-v2", {"a": delta, "b": delta})
        whole = self.delta_bytes(delta)
        for n, rec in recs.items():
            self.assertEqual(rec["state"], "live", (n, rec))
            self.assertLess(rec["bytes_fetched"], whole, (n, rec))
        a.assert_serves(self, big["v2"])
        b.assert_serves(self, big["v2"])

    def test_a_bad_topology_is_refused_at_start(self):
        for nodes, why in (({"a": [0, 1, 2], "b": [2, 3]}, "served by two nodes"),
                           ({"a": [0, 1], "b": [3]}, "served by no node"),
                           ({"a": [0, 1], "b": [2, 3], "c": []}, "not among the group's members"),
                           ({"a": [0, 1], "b": [2, 3, 4]}, "outside the world")):
            r = subprocess.run([base.DELTAKV, "sidecar", "--listen", "127.0.0.1:0", "--token", "x",
                                "--group", "g", "--node", "a", "--group-members", "a,b",
                                "--etcd-endpoints", self.etcd.url,
                                "--topology", self.topology(nodes)],
                               capture_output=True, text=True, timeout=30)
            self.assertNotEqual(r.returncode, 0, nodes)
            self.assertIn(why, r.stderr, nodes)

    def test_group_flags_are_checked_at_start(self):
        r = subprocess.run([base.DELTAKV, "sidecar", "--listen", "127.0.0.1:0", "--token", "x",
                            "--group", "g", "--node", "c", "--group-members", "a,b",
                            "--etcd-endpoints", self.etcd.url],
                           capture_output=True, text=True, timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not among the group's members", r.stderr)
        r = subprocess.run([base.DELTAKV, "sidecar", "--listen", "127.0.0.1:0", "--token", "x",
                            "--group", "g", "--node", "a"], capture_output=True, text=True,
                           timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("go together", r.stderr)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    ap.add_argument("--engine", required=True)
    args, rest = ap.parse_known_args()
    base.DELTAKV, base.ENGINE = os.path.abspath(args.deltakv), os.path.abspath(args.engine)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
