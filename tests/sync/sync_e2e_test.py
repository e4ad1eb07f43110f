"""End-to-end tests of live delta sync on one node: syncs over TP, EP and poll-mode engines from
files, HTTP(S), volumes and S3; plan arenas and parts; refusals that change nothing; the
sidecar's HTTP API and its KV pool; an engine in its own PID namespace.

Run: python3 tests/sync/sync_e2e_test.py --deltakv build/sidecar/deltakv \
        --engine build/shim/deltakv-demo-engine
"""
import concurrent.futures, json, os, shutil, signal, socket, subprocess, sys, time, unittest
import http.client as http_client
import urllib.error, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common as base  # noqa: E402
from e2e_common import TOKEN, Cluster, ChainFixture, SyncCase, http, read, write  # noqa: E402


class SyncE2ETest(SyncCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        t, k = cls.t, cls.k
        # Bytes from v2 -> v3, but labelled as a delta from v1: only the checksums can tell.
        k("publish", "--parent", t("v2"), "--new", t("v3"), "--out", t("d23-as-v1"),
          "--parent-version", "v1", "--version", "v2")


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
        bad = subprocess.run([base.ENGINE, "--checkpoint", moe["v1"], "--tp", "4", "--ep", "3",
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
        out = subprocess.run([base.DELTAKV, "volume", "--store", store, "push", src, ns_name, "--json",
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
            p = subprocess.Popen([base.DELTAKV, "sidecar", "--config", config, "--listen",
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
        r = subprocess.run([base.DELTAKV, "sidecar", "--token-file", os.path.join(self.tmp, "kvtoken"),
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
    base.main()
