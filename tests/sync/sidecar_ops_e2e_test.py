"""End-to-end tests of the sidecar's operations: JSON logs through a sync, and graceful
shutdown on SIGTERM (idle, before a sync's commit decision, after it). The real sidecar and
demo engine processes, with the Cluster of e2e_common.py.

Run: python3 tests/sync/sidecar_ops_e2e_test.py --deltakv build/sidecar/deltakv \
        --engine build/shim/deltakv-demo-engine
"""
import argparse, json, os, re, shutil, signal, socket, sys, tempfile, threading, time, unittest
import http.server as http_server

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common as e2e  # noqa: E402
from e2e_common import TOKEN, http  # noqa: E402

RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


class SidecarOpsE2ETest(e2e.ChainFixture, unittest.TestCase):
    PREFIX = "deltakv-ops-e2e-"

    def setUp(self):
        self.clusters = []
        # Each test its own directory: the sidecar's log is read back whole.
        self.run_dir = tempfile.mkdtemp(prefix="run-", dir=self.tmp)

    def tearDown(self):
        for c in self.clusters:
            c.stop()

    def cluster(self, env=None, sidecar_args=(), **kw):
        c = e2e.Cluster(self.run_dir, self.t("v1"),
                        sidecar_args=["--log-format", "json", *sidecar_args], **kw)
        self.clusters.append(c)
        if env is not None:
            self.restart_sidecar(c, env)
        return c

    def restart_sidecar(self, c, env):
        c.sidecar.send_signal(signal.SIGTERM)
        self.assertEqual(c.sidecar.wait(timeout=30), 0)
        os.remove(os.path.join(self.run_dir, "sidecar.log"))
        c.start_sidecar(env)

    def log_lines(self):
        """Every stderr line of the sidecar, each parsed as JSON (the test fails on one that is
        not)."""
        with open(os.path.join(self.run_dir, "sidecar.log")) as f:
            text = f.read()
        out = []
        for line in text.splitlines():
            try:
                j = json.loads(line)
            except ValueError:
                self.fail(f"not a JSON log line: {line!r}")
            self.assertIsInstance(j, dict, line)
            self.assertRegex(j["ts"], RFC3339_UTC)
            self.assertIn(j["level"], ("info", "warn", "error"))
            self.assertIsInstance(j["msg"], str)
            out.append(j)
        return out

    def wait_state(self, c, sid, state, timeout=30):
        deadline = time.time() + timeout
        while http("GET", f"{c.url}/v1/syncs/{sid}")[1]["state"] != state:
            self.assertLess(time.time(), deadline, f"sync {sid} never reached {state}")
            time.sleep(0.02)

    def terminate(self, c, timeout=30):
        c.sidecar.send_signal(signal.SIGTERM)
        rc = c.sidecar.wait(timeout=timeout)
        return rc

    def test_json_logs_through_a_sync(self):
        c = self.cluster(tp=2)
        sid = c.sync("v2", self.t("d12"))
        self.assertEqual(c.wait(sid)["state"], "live")
        bad = c.sync("v9", self.t("d12"))  # wrong parent now: aborted
        self.assertEqual(c.wait(bad)["state"], "aborted")
        self.assertEqual(self.terminate(c), 0)
        lines = self.log_lines()
        msgs = [j["msg"] for j in lines]
        self.assertEqual(msgs[0], "listening", msgs)
        self.assertRegex(lines[0]["addr"], r"^127\.0\.0\.1:\d+$")
        self.assertEqual(lines[0]["shm"], c.shm)
        self.assertEqual(msgs[-2:], ["shutting down", "stopped"])
        by_sync = [j for j in lines if j["msg"].startswith("sync ")]
        self.assertEqual([(j["msg"], j["sync_id"]) for j in by_sync],
                         [("sync started", sid), ("sync live", sid),
                          ("sync started", bad), ("sync aborted", bad)])
        self.assertEqual(by_sync[0]["version"], "v2")
        self.assertEqual(by_sync[0]["delta"], self.t("d12"))
        self.assertGreater(by_sync[1]["ms"], 0)
        self.assertEqual(by_sync[3]["level"], "warn")
        self.assertTrue(by_sync[3]["error"])
        # Every line a job wrote carries its id.
        for j in lines:
            if j["msg"].startswith(("sync ", "verify ", "scrub ")):
                self.assertIn("sync_id", j)

    def test_credentials_in_a_location_never_reach_logs_or_records(self):
        c = self.cluster(tp=1)
        secret = "s3cr3t-pw"
        sid = c.sync("v2", f"http://user:{secret}@127.0.0.1:1/deltas/d12")
        rec = c.wait(sid)
        self.assertEqual(rec["state"], "aborted")
        self.assertEqual(rec["delta"], "http://***@127.0.0.1:1/deltas/d12")
        vrec = c.verify(f"https://admin:{secret}@127.0.0.1:1/ckpt")
        verify = vrec["id"]
        self.assertEqual(vrec["checkpoint"], "https://***@127.0.0.1:1/ckpt")
        # A store that answers: errors that quote the location are redacted too.
        served = tempfile.mkdtemp(dir=self.run_dir)

        class Quiet(http_server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw):
                super().__init__(*a, directory=served, **kw)

            def log_message(self, *a):
                pass

        srv = http_server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            port = srv.server_address[1]
            missing = c.verify(f"http://user:{secret}@127.0.0.1:{port}/nope")
            self.assertEqual(missing["state"], "failed")
            self.assertIn(f"'http://***@127.0.0.1:{port}/nope' has no manifest.json",
                          missing["error"])
            gone = c.wait(c.sync("v2", f"http://u:{secret}@127.0.0.1:{port}/d?X-Sig={secret}"))
            self.assertEqual(gone["state"], "aborted")
        finally:
            srv.shutdown()
            srv.server_close()
        # Local paths and volume references are shown as given.
        ok = c.sync("v2", self.t("d12"))
        self.assertEqual(c.wait(ok)["delta"], self.t("d12"))
        status = json.dumps(c.status())
        records = json.dumps([http("GET", f"{c.url}/v1/syncs/{i}")[1]
                              for i in (sid, verify, missing["id"], gone["id"])])
        self.assertEqual(self.terminate(c), 0)
        with open(os.path.join(self.run_dir, "sidecar.log")) as f:
            log = f.read()
        for where, text in (("log", log), ("status", status), ("records", records)):
            self.assertNotIn(secret, text, where)
        self.assertIn("http://***@127.0.0.1:1/deltas/d12", log)

    def test_bodies_of_any_content_type_up_to_the_limit(self):
        # curl -d sends application/x-www-form-urlencoded: such a body is read as JSON like any
        # other, up to --max-body-bytes (65536 by default), not refused above 8 KiB.
        c = self.cluster(tp=1, sidecar_args=["--max-body-bytes", "65536"])

        def post(body, ctype):
            return http("POST", c.url + "/v1/sync", raw=body, token=TOKEN, content_type=ctype)

        body = json.dumps({"version": "v2", "delta": self.t("d12")}).encode()
        padded = body + b" " * (20000 - len(body))
        code, rec = post(padded, "application/x-www-form-urlencoded")
        self.assertEqual(code, 202, rec)
        self.assertEqual(c.wait(rec["id"])["state"], "live")
        code, err = post(body + b" " * 70000, "application/x-www-form-urlencoded")
        self.assertEqual((code, err["error"]["code"]), (413, "RESOURCE_EXHAUSTED"), err)
        code, err = post(b"{" + b" " * 20000, "text/plain")
        self.assertEqual(code, 400, err)

    def segments(self, c):
        return {f for f in os.listdir("/dev/shm") if f.startswith(c.shm)}

    def test_a_stopped_sidecar_that_was_replaced_stops_when_it_resumes(self):
        c = self.cluster(tp=2)
        old = c.sidecar
        try:
            old.send_signal(signal.SIGSTOP)
            time.sleep(1.5)  # past the 1 s stale threshold: judged dead, so another may adopt
            c.start_sidecar()
            deadline = time.time() + 20
            while len(c.status()["ranks"]) < c.tp:
                self.assertLess(time.time(), deadline, "the ranks never showed up")
                time.sleep(0.05)
            sid = c.sync("v2", self.t("d12"))  # the new sidecar's plan arenas exist now
            self.assertEqual(c.wait(sid)["state"], "live")
            arenas = {f for f in self.segments(c) if "-plan-" in f}
            self.assertTrue(arenas)
            old.send_signal(signal.SIGCONT)
            self.assertEqual(old.wait(timeout=30), 3)
        finally:
            if old.poll() is None:
                old.kill()
                old.wait()
        lines = self.log_lines()  # both sidecars' lines
        stops = [j for j in lines if j["msg"] == "another sidecar took over the control segment; stopping"]
        self.assertEqual(len(stops), 1, [j["msg"] for j in lines])
        self.assertEqual(stops[0]["level"], "error")
        self.assertEqual(stops[0]["shm"], c.shm)
        # It left the new sidecar's arenas (same names) in place, and the new one goes on.
        self.assertLessEqual(arenas, self.segments(c))
        sid = c.sync("v3", self.t("d23"))
        self.assertEqual(c.wait(sid)["state"], "live")
        c.assert_serves(self, self.t("v3"))
        self.assertEqual(self.terminate(c), 0)

    def lone_sidecar(self, name, *flags):
        """The command line of a sidecar without an engine, on its own control segment (removed
        when the test ends: a sidecar leaves it, also one that failed to start)."""
        token_file = os.path.join(self.run_dir, "lone.token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        shm = f"dkv-{name}-{os.getpid()}"
        self.addCleanup(lambda: os.path.exists(f"/dev/shm/{shm}") and os.remove(f"/dev/shm/{shm}"))
        return [e2e.DELTAKV, "sidecar", "--token-file", token_file, "--shm-name", shm, *flags]

    def test_a_second_sidecar_on_the_same_port_is_refused(self):
        # The port is this sidecar's alone: a second process cannot bind it beside the first
        # (and take a share of its connections), and says why.
        c = self.cluster(tp=1)
        port = int(c.url.rsplit(":", 1)[1])
        other = e2e.subprocess.run(self.lone_sidecar("port", "--listen", f"127.0.0.1:{port}"),
                                   capture_output=True, text=True, timeout=60)
        self.assertEqual(other.returncode, 3, other.stderr)
        self.assertIn(f"cannot listen on 127.0.0.1:{port}: Address already in use", other.stderr)
        self.assertEqual(http("GET", f"{c.url}/healthz")[0], 200)
        # The first one still owns every connection: a sync goes live through it.
        sid = c.sync("v2", self.t("d12"))
        self.assertEqual(c.wait(sid)["state"], "live")

    def test_listens_on_an_ipv6_address_in_brackets(self):
        try:
            with socket.socket(socket.AF_INET6) as probe:
                probe.bind(("::1", 0))
        except OSError:
            self.skipTest("no IPv6 loopback")
        port_file = os.path.join(self.run_dir, "v6.port")
        log = os.path.join(self.run_dir, "v6.log")
        p = e2e.subprocess.Popen(
            self.lone_sidecar("v6", "--listen", "[::1]:0", "--port-file", port_file),
            stderr=open(log, "w"))
        try:
            deadline = time.time() + 20
            while not os.path.exists(port_file):
                self.assertIsNone(p.poll(), open(log).read())
                self.assertLess(time.time(), deadline, open(log).read())
                time.sleep(0.02)
            port = int(open(port_file).read())
            self.assertEqual(http("GET", f"http://[::1]:{port}/healthz")[0], 200)
            self.assertIn(f"listening addr=[::1]:{port}", open(log).read())
        finally:
            p.send_signal(signal.SIGTERM)
            rc = p.wait(timeout=30)
        self.assertEqual(rc, 0)

    def test_sigterm_when_idle(self):
        c = self.cluster(tp=1)
        before = self.segments(c)
        self.assertEqual(self.terminate(c, timeout=10), 0)
        after = self.segments(c)
        # What stays is what the engine still maps (its control block and tensor tables); the
        # sidecar leaves no plan arena or segment of its own behind.
        self.assertLessEqual(after, before)
        self.assertFalse([f for f in after if "-plan-" in f], after)
        self.assertEqual([j["msg"] for j in self.log_lines()][-2:], ["shutting down", "stopped"])

    def test_job_ids_go_on_across_restarts_with_a_state_dir(self):
        # With --state-dir a restarted sidecar does not hand out an id it used before (a client
        # polling its job across the restart would read another job's record).
        state = os.path.join(self.run_dir, "state")
        c = self.cluster(tp=1, sidecar_args=["--state-dir", state])
        first = c.sync("v2", self.t("d12"))
        self.assertEqual(first, "s000001")
        self.assertEqual(c.wait(first)["state"], "live")
        self.restart_sidecar(c, {})
        second = c.sync("v3", self.t("d23"))
        self.assertEqual(second, "s000002")
        self.assertEqual(c.wait(second)["state"], "live")
        with open(os.path.join(state, "job-id")) as f:
            self.assertEqual(f.read(), "3\n")
        # A count that does not parse is said so, and ids start over.
        with open(os.path.join(state, "job-id"), "w") as f:
            f.write("three\n")
        self.restart_sidecar(c, {})
        self.assertIn("job id file not read; ids start at 1", [j["msg"] for j in self.log_lines()])
        self.assertEqual(c.sync("v3", self.t("d23")), "s000001")

    def test_sighup_shuts_down_gracefully(self):
        # A closed terminal: the same graceful shutdown as SIGTERM, the KV pool removed.
        c = self.cluster(tp=1, sidecar_args=["--kv-block-bytes", "4096",
                                             "--kv-capacity-slots", "16"])
        self.assertTrue(os.path.exists(f"/dev/shm/{c.shm}.kv"), os.listdir("/dev/shm"))
        c.sidecar.send_signal(signal.SIGHUP)
        self.assertEqual(c.sidecar.wait(timeout=30), 0)
        self.assertFalse(os.path.exists(f"/dev/shm/{c.shm}.kv"))
        self.assertEqual([j["msg"] for j in self.log_lines()][-2:], ["shutting down", "stopped"])

    def test_a_port_file_that_cannot_be_written_stops_the_sidecar(self):
        # Whoever waits for the port would wait forever: exit 3, naming the file.
        for bad in (os.path.join(self.run_dir, "no", "such", "dir", "port"), self.run_dir):
            p = e2e.subprocess.run(
                self.lone_sidecar("pf", "--listen", "127.0.0.1:0", "--port-file", bad),
                capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 3, p.stderr)
            self.assertIn("--port-file", p.stderr)
            self.assertIn(bad, p.stderr)

    def test_sigterm_stops_a_running_scrub_as_shutting_down(self):
        c = self.cluster(tp=1)
        self.assertEqual(c.verify(self.t("v1"))["state"], "verified")
        # 0.2 MB/s: this scrub would take many seconds.
        code, body = http("POST", c.url + "/v1/scrub", {"rate_gbps": 0.0002}, TOKEN)
        self.assertEqual(code, 202, body)
        scrub = body["id"]
        self.wait_state(c, scrub, "verifying")
        self.assertEqual(self.terminate(c), 0)
        end = [j for j in self.log_lines() if j.get("sync_id") == scrub and j["msg"] != "scrub started"]
        self.assertEqual([j["msg"] for j in end], ["scrub failed"], end)
        self.assertEqual(end[0]["error"], "sidecar shutting down")

    def test_sigterm_before_the_decision_aborts(self):
        c = self.cluster(tp=2, env={"DELTAKV_FAULT_STALL": "staged:3000"})
        before = c.answers()
        sid = c.sync("v2", self.t("d12"))
        self.wait_state(c, sid, "staged")
        c.sidecar.send_signal(signal.SIGTERM)
        # While it drains: no new job, a clear answer.
        deadline = time.time() + 2
        while True:
            code, body = http("POST", c.url + "/v1/sync", {"version": "v3", "delta": self.t("d23")},
                              TOKEN)
            if code == 503 or time.time() > deadline:
                break
            time.sleep(0.02)
        self.assertEqual(code, 503, body)
        self.assertEqual(body["error"]["code"], "UNAVAILABLE")
        self.assertIn("shutting down", body["error"]["message"])
        self.assertEqual(c.sidecar.wait(timeout=30), 0)
        lines = self.log_lines()
        end = [j for j in lines if j.get("sync_id") == sid and j["msg"] != "sync started"]
        self.assertEqual([j["msg"] for j in end], ["sync aborted"], end)
        self.assertEqual(end[0]["error"], "sidecar shutting down")
        # Nothing written: the ranks serve v1 and dropped the plan.
        self.assertEqual(c.answers(), before)
        for r in range(c.tp):
            self.assertEqual(c.rank_state(r)["policy_version"], 0)
        c.assert_serves(self, self.t("v1"))

    def test_sigterm_after_the_decision_finishes_the_commit(self):
        c = self.cluster(tp=2, env={"DELTAKV_FAULT_STALL": "committing:1500"})
        sid = c.sync("v2", self.t("d12"))
        self.wait_state(c, sid, "committing")
        self.assertEqual(self.terminate(c), 0)
        msgs = [(j["msg"], j.get("sync_id")) for j in self.log_lines()]
        self.assertIn(("sync live", sid), msgs)
        self.assertLess(msgs.index(("sync live", sid)), msgs.index(("stopped", None)))
        c.assert_serves(self, self.t("v2"))

    def test_second_signal_exits_at_once(self):
        c = self.cluster(tp=1, env={"DELTAKV_FAULT_STALL": "staged:20000"})
        sid = c.sync("v2", self.t("d12"))
        self.wait_state(c, sid, "staged")
        c.sidecar.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        t0 = time.time()
        c.sidecar.send_signal(signal.SIGTERM)
        self.assertEqual(c.sidecar.wait(timeout=10), 1)
        self.assertLess(time.time() - t0, 5)
        time.sleep(2.5)  # the ranks notice the sidecar is gone and drop the staged plan
        self.assertEqual(c.rank_state(0)["policy_version"], 0)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    ap.add_argument("--engine", required=True)
    args, rest = ap.parse_known_args()
    e2e.DELTAKV, e2e.ENGINE = os.path.abspath(args.deltakv), os.path.abspath(args.engine)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
