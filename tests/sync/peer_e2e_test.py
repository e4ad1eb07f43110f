"""End-to-end tests of the peer protocol: a real etcd, real sidecars (one per "node") and their
real engine processes, one model group. A sync posted to one node reaches every node through
POST /v1/peer/prepare; etcd still holds membership and the decision.

Run: python3 tests/sync/peer_e2e_test.py --deltakv build/sidecar/deltakv \
        --engine build/shim/deltakv-demo-engine
Skips when /usr/bin/etcd (Debian's etcd-server) is missing.
"""
import argparse, os, signal, sys, time, unittest, urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common as base  # noqa: E402
import group_e2e_test as group  # noqa: E402

FINAL = ("live", "aborted", "diverged")


@unittest.skipUnless(os.path.exists(group.ETCD), "needs " + group.ETCD)
class PeerE2ETest(group.GroupE2ETest):
    PREFIX = "deltakv-peer-"

    def peer_status(self, node, key, token=base.TOKEN):
        path = "/v1/peer/status/" + urllib.parse.quote(key, safe="")
        return base.http("GET", self.nodes[node].url + path, token=token)

    def wait_all(self, key, nodes, timeout=30):
        """Each node's record of the sync `key`, once final."""
        deadline = time.time() + timeout
        out = {}
        while len(out) < len(nodes):
            for n in nodes:
                if n in out:
                    continue
                code, st = self.peer_status(n, key)
                if code == 200 and st["state"] in FINAL:
                    out[n] = self.nodes[n].wait(st["id"])
            self.assertLess(time.time(), deadline, (key, out))
            time.sleep(0.05)
        return out

    def post(self, node, version, delta):
        code, body = base.http("POST", self.nodes[node].url + "/v1/sync",
                               {"version": version, "delta": delta}, base.TOKEN)
        self.assertEqual(code, 202, body)
        return body

    def test_peer_sync_posted_to_one_node_goes_live_on_two_and_three(self):
        for members in ("a,b", "a,b,c"):
            names = members.split(",")
            for n in names:
                self.node(n, tp=1, members=members)
            started = self.post("a", "v2", self.t("d12"))
            self.assertEqual(started["group"]["coordinator"], "a", started)
            key = started["group"]["key"]
            recs = self.wait_all(key, names)
            self.assertEqual([r["state"] for r in recs.values()], ["live"] * len(names), recs)
            for n in names:
                self.nodes[n].assert_serves(self, self.t("v2"))
            # The coordinator's record lists every member's state: one node to poll.
            rec = self.nodes["a"].wait(started["id"])
            self.assertEqual(rec["group"]["members"], {n: "live" for n in names}, rec)
            # A repeated prepare returns the sync that ran, and starts nothing.
            body = {"sync_key": key, "version": "v2", "delta": self.t("d12"),
                    "attempt": int(key.rsplit("#", 1)[1])}
            code, st = base.http("POST", self.nodes["b"].url + "/v1/peer/prepare", body, base.TOKEN)
            self.assertEqual((code, st["state"]), (200, "live"), st)
            self.assertEqual(len(self.nodes["b"].status()["history"]), 1)
            for c in self.nodes.values():
                c.stop()
            self.nodes.clear()
            self.tearDown()
            self.setUp()

    def test_peer_calls_need_the_group_token_and_small_bodies(self):
        a, _ = self.node("a", tp=1), self.node("b", tp=1)
        body = {"sync_key": "syncs/v2@v1#0", "version": "v2", "delta": self.t("d12"), "attempt": 0}
        for token in (None, "wrong"):
            code, _ = base.http("POST", a.url + "/v1/peer/prepare", body, token)
            self.assertEqual(code, 401)
            code, _ = self.peer_status("a", "syncs/v2@v1#0", token=token)
            self.assertEqual(code, 401)
        code, _ = base.http("POST", a.url + "/v1/peer/prepare", None, base.TOKEN,
                            raw=b"x" * 10000)
        self.assertEqual(code, 413)
        for bad, why in (({**body, "attempt": 1}, "not the sync key's"),
                         ({k: v for k, v in body.items() if k != "delta"}, "'delta' is missing"),
                         ({**body, "sync_key": "v2"}, "syncs/<version>@<parent>#<attempt>")):
            code, err = base.http("POST", a.url + "/v1/peer/prepare", bad, base.TOKEN)
            self.assertEqual(code, 400, err)
            self.assertIn(why, err["error"]["message"])
        code, _ = self.peer_status("a", "syncs/v9@v1#0")
        self.assertEqual(code, 404)
        for token in (None, "wrong"):
            code, _ = base.http("POST", a.url + "/v1/peer/decided", {"sync_key": "k"}, token)
            self.assertEqual(code, 401)
        for bad in ({}, {"sync_key": ""}, {"sync_key": 3}, ["k"]):
            code, err = base.http("POST", a.url + "/v1/peer/decided", bad, base.TOKEN)
            self.assertEqual(code, 400, (bad, err))
            self.assertIn("sync_key", err["error"]["message"])
        code, ans = base.http("POST", a.url + "/v1/peer/decided", {"sync_key": "syncs/v9@v1#0"},
                              base.TOKEN)  # nobody waits on it: still 200, nothing happens
        self.assertEqual((code, ans), (200, {"node": "a", "sync_key": "syncs/v9@v1#0"}))
        self.assertEqual(a.status()["history"], [])  # nothing started

    def test_the_writer_of_the_decision_tells_the_others_at_once(self):
        # The nodes re-read etcd only every 5 s while they wait: the sync goes live well
        # before, because the node whose COMMIT stood sends POST /v1/peer/decided.
        # b stages late, so a is already waiting when b's COMMIT stands.
        self.node("a", tp=1, args=["--group-decision-poll-ms", "5000"])
        self.node("b", tp=1, args=["--group-decision-poll-ms", "5000"],
                  env={"DELTAKV_FAULT_STALL": "staged:1500"})
        key = self.post("a", "v2", self.t("d12"))["group"]["key"]
        recs = self.wait_all(key, ["a", "b"])
        self.assertEqual([r["state"] for r in recs.values()], ["live", "live"], recs)
        # "peer": a's wait ended on b's notice, not on its next read of etcd 5 s later.
        self.assertEqual(recs["a"]["group"]["decision_learnt"], "peer", recs)
        self.assertEqual(recs["b"]["group"]["decision_learnt"], "wrote", recs)
        for n in ("a", "b"):
            self.nodes[n].assert_serves(self, self.t("v2"))
        # An ABORT travels the same way: a waits for the decision while b, still staging, is
        # shut down; b writes ABORT on its way out and tells a.
        a, b = self.nodes["a"], self.nodes["b"]
        started = self.post("a", "v3", self.t("d23"))
        self.wait_prepared("a")
        # a reads etcd once right after its PREPARED, then every 5 s: b stops only after that
        # first read, so the ABORT can reach a in time only through b's notice.
        time.sleep(1.0)
        b.sidecar.send_signal(signal.SIGTERM)
        self.assertEqual(b.sidecar.wait(timeout=20), 0)
        rec = a.wait(started["id"])
        self.assertEqual(rec["state"], "aborted", rec)
        self.assertIn("node 'b': sidecar shutting down", rec["error"])
        self.assertEqual(rec["group"]["decision_learnt"], "peer", rec)
        a.assert_serves(self, self.t("v2"))

    def test_a_peer_with_another_group_token_refuses_and_the_sync_aborts(self):
        a = self.node("a", tp=1)
        other = os.path.join(self.dir, "other-token")
        base.write(other, b"another-group-token\n")
        b = self.node("b", tp=1, args=["--group-token-file", other])
        before = a.answers() + b.answers()
        rec = a.wait(self.post("a", "v2", self.t("d12"))["id"])
        self.assertEqual(rec["state"], "aborted", rec)
        self.assertIn("node 'b' refused the prepare: 401", rec["error"])
        self.assertEqual(b.status()["history"], [])
        self.assertEqual(a.answers() + b.answers(), before)

    def test_a_sync_the_delta_cannot_make_aborts_with_the_real_reason(self):
        # With v2 live, a delta from v1 that makes v2 posted as v3: the coordinator cannot run
        # the sync at all, and says so (not which sync key it would have used instead, from the
        # delta's parent), and so does the group.
        a, b = self.node("a", tp=1), self.node("b", tp=1)
        first = self.post("a", "v2", self.t("d12"))
        recs = self.wait_all(first["group"]["key"], ["a", "b"])
        self.assertEqual([r["state"] for r in recs.values()], ["live", "live"], recs)
        rec = a.wait(self.post("a", "v3", self.t("d12"))["id"])
        self.assertEqual(rec["state"], "aborted", rec)
        # Its own reason; or, when node b refused the same sync first, the group's ABORT that
        # quotes b's, which is the same reason.
        self.assertIn("the request names version 'v3' but the delta produces 'v2'", rec["error"])
        self.assertNotIn("sync key", rec["error"])
        for r in b.status()["history"]:  # b may have heard of it, or not (decided first)
            if r["version"] != "v3":
                continue
            self.assertIn("the request names version 'v3' but the delta produces 'v2'",
                          b.wait(r["id"])["error"])
        for n in ("a", "b"):
            self.nodes[n].assert_serves(self, self.t("v2"))

    def test_posting_to_every_node_still_converges_on_one_sync(self):
        self.node("a", tp=1)
        self.node("b", tp=2)
        recs = self.sync_all("v2", {"a": self.t("d12"), "b": self.t("d12")})
        self.assertEqual([r["state"] for r in recs.values()], ["live", "live"], recs)
        self.assertEqual(len({r["group"]["key"] for r in recs.values()}), 1)
        for n in ("a", "b"):
            self.assertEqual(len(self.nodes[n].status()["history"]), 1)  # one sync per node
            self.nodes[n].assert_serves(self, self.t("v2"))

    def test_coordinator_killed_before_the_decision_aborts_the_others(self):
        a = self.node("a", tp=1, prepare_ms=1500, env={"DELTAKV_FAULT_STALL": "staged:20000"})
        b = self.node("b", tp=1, prepare_ms=1500)
        before = b.answers()
        key = self.post("a", "v2", self.t("d12"))["group"]["key"]
        deadline = time.time() + 20
        while self.peer_status("b", key)[0] != 200:  # b runs its part
            self.assertLess(time.time(), deadline)
            time.sleep(0.02)
        a.sidecar.send_signal(signal.SIGKILL)
        a.sidecar.wait()
        rec = self.wait_all(key, ["b"])["b"]
        self.assertEqual(rec["state"], "aborted", rec)
        self.assertIn("missing: a", rec["error"])
        self.assertEqual(b.answers(), before)  # b's engine bytes unchanged
        b.assert_serves(self, self.t("v1"))
        # Restarted, the coordinator finds nothing committed and serves v1 too.
        a.start_sidecar()
        self.wait_until(lambda: a.status()["group"]["convergence"] == "converged")
        self.assertEqual(a.status()["live_version"], "v1")
        a.assert_serves(self, self.t("v1"))

    def test_coordinator_killed_after_the_decision_the_others_commit(self):
        a = self.node("a", tp=1, env={"DELTAKV_FAULT_STALL": "decided:20000"})
        b = self.node("b", tp=1)
        key = self.post("a", "v2", self.t("d12"))["group"]["key"]
        rec = self.wait_all(key, ["b"])["b"]
        self.assertEqual(rec["state"], "live", rec)
        a.sidecar.send_signal(signal.SIGKILL)
        a.sidecar.wait()
        b.assert_serves(self, self.t("v2"))
        # Restarted, the coordinator learns the COMMIT from etcd and applies it by itself.
        time.sleep(2.5)  # its ranks notice the dead sidecar and drop the staged plan
        self.assertEqual(a.rank_state(0)["version"], "v1")
        a.start_sidecar()
        rec = self.wait_converged(a)
        self.assertEqual(rec["state"], "live", rec)
        self.assertTrue(rec["group"]["catch_up"])
        a.assert_serves(self, self.t("v2"))

    def wait_converged(self, c, timeout=30):
        """The newest job of a restarted node once final, after its convergence check."""
        deadline = time.time() + timeout
        while True:
            hist = c.status()["history"]
            if hist and hist[0]["state"] in FINAL and c.status()["group"]["convergence"] in (
                    "converged", "cannot"):
                return hist[0]
            self.assertLess(time.time(), deadline, (c.status()["group"], hist[:1]))
            time.sleep(0.05)

    def test_coordinator_killed_during_its_fan_out_changes_nothing(self):
        # b does not answer (SIGSTOP) while the coordinator's prepare calls retry; the
        # coordinator is killed then. Whether or not a prepare reaches b afterwards, no node
        # goes live and a retry works.
        a = self.node("a", tp=1, prepare_ms=1500)
        b = self.node("b", tp=1, prepare_ms=1500)
        before = a.answers() + b.answers()
        b.sidecar.send_signal(signal.SIGSTOP)
        try:
            key = self.post("a", "v2", self.t("d12"))["group"]["key"]
            time.sleep(0.3)  # the fan-out is retrying
            a.sidecar.send_signal(signal.SIGKILL)
            a.sidecar.wait()
        finally:
            b.sidecar.send_signal(signal.SIGCONT)
        # Should a prepare have reached b, b's attempt ends once its prepare deadline passes
        # (later on a loaded machine): wait for every job of b to finish, then check them.
        time.sleep(3.0)
        active = ("queued", "fetching", "decoding", "staged", "committing")
        self.wait_until(lambda: all(h["state"] not in active for h in b.status()["history"]))
        for h in b.status()["history"]:
            self.assertEqual(h["state"], "aborted", h)
        self.assertEqual(a.answers() + b.answers(), before)
        a.start_sidecar()
        self.wait_until(lambda: a.status()["group"]["convergence"] == "converged")
        for c in (a, b):
            self.assertEqual(c.status()["live_version"], "v1")
            c.assert_serves(self, self.t("v1"))
        started = self.post("a", "v2", self.t("d12"))
        self.assertNotEqual(started["group"]["key"], key)
        recs = self.wait_all(started["group"]["key"], ["a", "b"])
        self.assertEqual([r["state"] for r in recs.values()], ["live", "live"], recs)
        for c in (a, b):
            c.assert_serves(self, self.t("v2"))

    def wait_until(self, cond, timeout=20):
        deadline = time.time() + timeout
        while not cond():
            self.assertLess(time.time(), deadline)
            time.sleep(0.05)

    def test_coordinator_killed_after_its_prepared_aborts_the_others(self):
        # The coordinator prepares; b, slow to stage, prepares after the coordinator died but
        # while its PREPARED still stands on its lease: b finds it silent and writes ABORT.
        a = self.node("a", tp=1)
        b = self.node("b", tp=1, env={"DELTAKV_FAULT_STALL": "staged:2000"})
        before = a.answers() + b.answers()
        key = self.post("a", "v2", self.t("d12"))["group"]["key"]
        self.wait_prepared("a")
        a.sidecar.send_signal(signal.SIGKILL)
        a.sidecar.wait()
        rec = self.wait_all(key, ["b"])["b"]
        self.assertEqual(rec["state"], "aborted", rec)
        self.assertIn("node 'a' does not answer", rec["error"])
        self.assertEqual(a.answers() + b.answers(), before)
        time.sleep(2.5)  # a's ranks drop the staged plan
        a.start_sidecar()
        self.wait_until(lambda: a.status()["group"]["convergence"] == "converged")
        for c in (a, b):
            c.assert_serves(self, self.t("v1"))

    def test_coordinator_killed_after_the_commit_comes_back_converged(self):
        a = self.node("a", tp=1)
        b = self.node("b", tp=1)
        key = self.post("a", "v2", self.t("d12"))["group"]["key"]
        recs = self.wait_all(key, ["a", "b"])
        self.assertEqual([r["state"] for r in recs.values()], ["live", "live"], recs)
        a.sidecar.send_signal(signal.SIGKILL)
        a.sidecar.wait()
        a.start_sidecar()
        self.wait_until(lambda: a.status()["group"]["convergence"] == "converged")
        self.assertEqual(a.status()["live_version"], "v2")
        self.assertEqual(a.status()["history"], [])  # nothing to apply
        for c in (a, b):
            c.assert_serves(self, self.t("v2"))
        # The group goes on from there, posted to the restarted coordinator.
        started = self.post("a", "v3", self.t("d23"))
        recs = self.wait_all(started["group"]["key"], ["a", "b"])
        self.assertEqual([r["state"] for r in recs.values()], ["live", "live"], recs)
        for c in (a, b):
            c.assert_serves(self, self.t("v3"))

    def test_a_stopped_peer_is_a_partition_then_converges(self):
        a = self.node("a", tp=1, prepare_ms=1500)
        b = self.node("b", tp=1, prepare_ms=1500)
        before = a.answers() + b.answers()
        b.sidecar.send_signal(signal.SIGSTOP)
        try:
            started = self.post("a", "v2", self.t("d12"))
            rec = a.wait(started["id"])
            self.assertEqual(rec["state"], "aborted", rec)
            self.assertRegex(rec["error"], r"missing: b|node 'b'")
        finally:
            b.sidecar.send_signal(signal.SIGCONT)
        # b wakes up to a prepare for a sync the group aborted: it runs nothing.
        time.sleep(1.0)
        for h in b.status()["history"]:
            self.assertEqual(h["state"], "aborted", h)
        self.assertEqual(a.answers() + b.answers(), before)
        for c in (a, b):
            c.assert_serves(self, self.t("v1"))
        # The next sync, posted to a, goes live on both (a new attempt of the step).
        started = self.post("a", "v2", self.t("d12"))
        self.assertTrue(started["group"]["key"].endswith("#1"), started)
        recs = self.wait_all(started["group"]["key"], ["a", "b"])
        self.assertEqual([r["state"] for r in recs.values()], ["live", "live"], recs)
        for c in (a, b):
            c.assert_serves(self, self.t("v2"))


# Only this file's cases: the inherited group cases run in group_e2e_test.
for _name in [n for n in vars(group.GroupE2ETest) if n.startswith("test_")]:
    if _name not in vars(PeerE2ETest):
        setattr(PeerE2ETest, _name, None)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    ap.add_argument("--engine", required=True)
    args, rest = ap.parse_known_args()
    base.DELTAKV, base.ENGINE = os.path.abspath(args.deltakv), os.path.abspath(args.engine)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
