"""End-to-end tests of the checksum table: the verify at start, scrubs that catch bit flips and
name them, the table across sidecar restarts and syncs, and a sync stopping a running scrub.

Run: python3 tests/sync/sync_checks_e2e_test.py --deltakv build/sidecar/deltakv \
        --engine build/shim/deltakv-demo-engine
"""
import json, os, signal, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common as base  # noqa: E402
from e2e_common import TOKEN, SyncCase, http, read  # noqa: E402


class SyncChecksE2ETest(SyncCase):
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


if __name__ == "__main__":
    base.main()
