"""End-to-end tests of `deltakv trace`, `deltakv bench agentx` and `deltakv plan`: real trace
files, a real pool segment in /dev/shm, the JSON lines, the table and the SVG plot.

Run: python3 tests/cli/kv_replay_test.py --deltakv build/sidecar/deltakv
"""
import argparse, glob, json, os, re, subprocess, sys, tempfile, unittest

DELTAKV = None


def run(*args, expect=0, timeout=None):
    p = subprocess.run([DELTAKV, *args], capture_output=True, text=True, timeout=timeout)
    if p.returncode != expect:
        raise AssertionError(f"deltakv {' '.join(args)}: exit {p.returncode}, wanted {expect}\n"
                             f"stdout: {p.stdout}\nstderr: {p.stderr}")
    return p


def plan_json(*args):
    return json.loads(run("plan", *args, "--json").stdout)["plan"]


def lines(stdout):
    return [json.loads(l) for l in stdout.splitlines() if l.strip()]


class KvReplayCli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.corpus = os.path.join(cls.tmp.name, "corpus")
        run("trace", "generate", "--out", cls.corpus, "--traces", "8", "--seed", "3",
            "--scale", "0.2")

    def test_generate_writes_weka_files_and_refuses_an_existing_dir(self):
        files = sorted(glob.glob(os.path.join(self.corpus, "*.json")))
        self.assertEqual(len(files), 8)
        with open(files[0]) as f:
            t = json.load(f)
        self.assertEqual(t["block_size"], 64)
        self.assertEqual(t["hash_id_scope"], "local")
        p = run("trace", "generate", "--out", self.corpus, "--traces", "2", "--json", expect=2)
        self.assertFalse(json.loads(p.stdout)["ok"])

    def test_stats_reports_theoretical_hit(self):
        s = json.loads(run("trace", "stats", self.corpus, "--json").stdout)
        self.assertEqual(s["traces"], 8)
        th = s["theoretical"]
        self.assertGreater(th["token_rate"], 0.85)
        self.assertLessEqual(th["hit_tokens"], th["input_tokens"])
        self.assertEqual(sum(t["input_tokens"] for t in s["per_trace"]), th["input_tokens"])

    def test_bad_trace_is_an_error_with_file_and_line(self):
        bad = os.path.join(self.tmp.name, "bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n')
            f.write('{"timestamp": 0, "input_length": 10, "output_length": 1, "colour": 2}\n')
        p = run("trace", "stats", bad, expect=2)
        self.assertIn("bad.jsonl:2", p.stderr)
        self.assertIn("unknown field 'colour'", p.stderr)
        p = run("bench", "agentx", bad, "--json", expect=2)
        self.assertIn("bad.jsonl:2", json.loads(p.stdout)["error"]["message"])

    def test_bench_agentx_with_and_without_host_tier(self):
        plot = os.path.join(self.tmp.name, "agentx.svg")
        p = run("bench", "agentx", self.corpus, "--concurrency", "4,12", "--duration-s", "900",
                "--json", "--plot", plot, "--no-progress", "--gpu-kv-tokens", "200000")
        arms = lines(p.stdout)
        self.assertEqual([(a["concurrency"], a["host_kv_gib"] > 0) for a in arms],
                         [(4, False), (4, True), (12, False), (12, True)])
        for a in arms:
            self.assertGreater(a["requests"], 0)
            total = a["gpu_hit_rate"] + a["host_hit_rate"] + a["miss_rate"]
            self.assertAlmostEqual(total, 1.0, places=9)
            self.assertEqual(a["pool"]["wrong_bytes"], 0)
            for k in ("p50", "p90", "p99"):
                self.assertGreaterEqual(a["ttft_s"][k], 0)
            self.assertGreater(a["output_tokens_per_s_per_gpu"], 0)
        gpu_only, with_host = arms[2], arms[3]
        self.assertEqual(gpu_only["host_hit_tokens"], 0)
        self.assertGreater(with_host["host_hit_tokens"], 0)
        self.assertGreater(with_host["pool"]["loaded_blocks"], 0)
        self.assertGreater(with_host["pool"]["lookups"], 0)
        self.assertGreater(with_host["gpu_hit_rate"] + with_host["host_hit_rate"],
                           gpu_only["gpu_hit_rate"])
        # The plot exists and has one hit-rate series per concurrency and measure.
        with open(plot) as f:
            svg = f.read()
        series = set(re.findall(r'data-series="([^"]+)"', svg))
        for c in ("c4", "c12"):
            for m in ("hit (gpu+host)", "gpu hit", "theoretical", "output tok/s/GPU"):
                self.assertIn(f"{c} {m}", series)
        # No segment is left behind in /dev/shm.
        self.assertEqual(glob.glob("/dev/shm/deltakv-replay-*"), [])

    def test_bench_agentx_table_and_records(self):
        rec = os.path.join(self.tmp.name, "requests.jsonl")
        p = run("bench", "agentx", "--synthetic", "3", "--synthetic-scale", "0.1",
                "--concurrency", "2", "--duration-s", "300", "--host-kv-gib", "50",
                "--records", rec, "--no-progress", "--model", "qwen3-32b", "--node", "h200x8")
        self.assertIn("ttft p99", p.stdout)
        self.assertIn("gpu + host", p.stdout)
        with open(rec) as f:
            recs = [json.loads(l) for l in f]
        self.assertTrue(any(r["warmup"] for r in recs))
        self.assertTrue(all(r["input_tokens"] >= r["gpu_hit_tokens"] + r["host_hit_tokens"]
                            for r in recs))

    def test_plan_without_and_with_traces(self):
        p = json.loads(run("plan", "--model", "kimi-k3", "--node", "gb300x4", "--json").stdout)
        self.assertEqual(p["plan"]["kv_bytes_per_token"], 27648)
        self.assertEqual(p["plan"]["tp"], 8)
        self.assertGreater(p["plan_without_cpu_copy"]["host_kv_bytes_per_node"],
                           5 * p["plan_with_cpu_copy"]["host_kv_bytes_per_node"])
        engines = {f["engine"] for f in p["plan"]["flags"]}
        self.assertTrue({"deltakv sidecar", "vllm", "lmcache", "sglang"} <= engines)
        self.assertEqual(p["curve"], [])
        plot = os.path.join(self.tmp.name, "plan.svg")
        p = json.loads(run("plan", self.corpus, "--model", "qwen3-32b", "--node", "h200x8",
                           "--gpu-kv-tokens", "150000", "--concurrency", "8", "--points", "3",
                           "--duration-s", "600", "--json", "--plot", plot,
                           "--no-progress").stdout)
        sizes = [a["host_kv_gib"] for a in p["curve"]]
        self.assertEqual(sizes, sorted(sizes))
        self.assertEqual(sizes[0], 0)
        self.assertIn("recommended_host_kv_gib_per_replica", p)
        self.assertTrue(os.path.exists(plot))

    def test_plan_detects_this_host(self):
        p = json.loads(run("plan", "--model", "qwen3-32b", "--node", "h200x8", "--tp", "1",
                           "--detect-host", "--host-reserve-gib", "1", "--json").stdout)["plan"]
        with open("/proc/meminfo") as f:
            total = next(int(l.split()[1]) * 1024 for l in f if l.startswith("MemTotal:"))
        self.assertGreaterEqual(p["host_ram_bytes_per_node"], total)
        self.assertLessEqual(p["host_limit_bytes_per_node"], p["host_ram_bytes_per_node"])
        self.assertGreater(p["pool"]["slots"], 0)
        run("plan", "--detect-host", "--host-ram-gib", "10", expect=2)

    def test_bad_flags(self):
        run("bench", "agentx", "--json", expect=2)  # no traces
        run("bench", "agentx", "--synthetic", "2", "--model", "nope", expect=2)
        run("plan", "--model-config", os.path.join(self.tmp.name, "missing.json"), expect=3)
        run("bench", "agentx", "--synthetic", "2", "--host-kv-gib", "lots", expect=2)
        for flag, value in (("--idle-cap-s", "-1"), ("--idle-cap-s", "nan"),
                            ("--duration-s", "0"), ("--duration-s", "-5"), ("--duration-s", "inf"),
                            ("--duration-s", "nan"), ("--warmup-max", "1.5")):
            p = run("bench", "agentx", "--synthetic", "2", flag, value, "--json", expect=1)
            self.assertIn(flag, p.stderr)
            self.assertEqual(p.stdout, "")

    def test_regress_high_concurrency_finishes(self):
        # Above about 1,400 lanes the long warmup prefills starved behind later requests (the
        # prefill budget went to running requests in an order that finished ones reshuffled):
        # the warmup never ended and the run never did either.
        corpus = os.path.join(self.tmp.name, "cliff")
        run("trace", "generate", "--out", corpus, "--traces", "4", "--scale", "0.1")
        p = run("bench", "agentx", corpus, "--model", "qwen3-32b", "--node", "h200x8",
                "--duration-s", "1", "--concurrency", "1500,5000", "--host-kv-gib", "0",
                "--no-progress", "--json", timeout=120)
        arms = lines(p.stdout)
        self.assertEqual([a["concurrency"] for a in arms], [1500, 5000])
        for a in arms:
            self.assertEqual(a["warmup_requests"], a["concurrency"])
            self.assertGreater(a["requests"], 0)

    def test_regress_host_sizes_are_finite_and_in_range(self):
        # inf and 1e300 ran a "gpu + host" arm without a host pool.
        for size in ("inf", "1e300", "1e9.5", "1000000001", "-1", "nan"):
            p = run("bench", "agentx", "--synthetic", "2", "--host-kv-gib", size, "--json",
                    expect=2)
            self.assertIn("0 to 1e9", json.loads(p.stdout)["error"]["message"])

    def test_regress_plan_takes_zero_host_ram_and_refuses_zero_weights(self):
        # 0 GiB of host RAM is a value, not "the preset's"; a checkpoint of 0 GiB is refused
        # (the step model reads the weights), not replaced by the model's size.
        p = plan_json("--host-ram-gib", "0")
        self.assertEqual(p["host_ram_bytes_per_node"], 0)
        self.assertEqual(p["pool"]["slots"], 0)
        self.assertTrue(any("leaves no host memory" in w for w in p["warnings"]))
        self.assertIn("--weights-gib", run("plan", "--weights-gib", "0", expect=1).stderr)
        self.assertEqual(plan_json("--weights-gib", "8", "--tp", "8")["weight_bytes_per_gpu"],
                         2**30)

    def test_regress_plan_uses_given_gpu_kv_tokens(self):
        # --gpu-kv-tokens is the plan's own figure too (and SGLang's ratio follows it).
        p = plan_json("--gpu-kv-tokens", "1000")
        self.assertEqual(p["gpu_kv_tokens_per_replica"], 1000)
        self.assertTrue(p["gpu_kv_tokens_given"])
        self.assertEqual(p["gpu_kv_bytes_per_gpu"], 1000 * p["kv_bytes_per_token_per_rank"])
        sglang = next(f for f in p["flags"] if f["engine"] == "sglang")
        rank_bytes = p["host_kv_tokens_per_replica"] * p["kv_bytes_per_token_per_rank"]
        ratio = float(re.search(r"--hicache-ratio ([0-9.]+)", sglang["note"]).group(1))
        self.assertAlmostEqual(ratio, rank_bytes / p["gpu_kv_bytes_per_gpu"], delta=0.01)
        self.assertFalse(plan_json()["gpu_kv_tokens_given"])
        text = run("plan", "--gpu-kv-tokens", "1000").stdout
        self.assertIn("0.00M tokens per replica (given by --gpu-kv-tokens)", text)
        run("plan", "--gpu-kv-tokens", "0", expect=1)

    def test_regress_plan_caps_a_pool_over_the_segment_limit(self):
        # A budget over what one pool maps (4 PiB) gave 0 slots: now the largest pool, warned.
        p = plan_json("--host-ram-gib", "5000000")
        self.assertGreater(p["pool"]["slots"], 0)
        self.assertGreater(p["pool"]["segment_bytes"], 0)
        self.assertTrue(any("more than one pool can map" in w for w in p["warnings"]))

    def test_regress_plan_sglang_size_fits_the_budget(self):
        p = plan_json("--model", "kimi-k3", "--node", "gb300x4", "--host-ram-gib", "70")
        setting = next(f["setting"] for f in p["flags"] if f["engine"] == "sglang")
        self.assertEqual(setting, "--hicache-size 1")  # 1.61 GB per rank, rounded down
        gb = int(setting.split()[1])
        self.assertLessEqual(gb * 1e9 * p["ranks_per_node"], p["host_kv_budget_bytes_per_node"])

    def test_regress_plan_vllm_setting_pins_within_the_budget(self):
        # vLLM rounds each per-rank tensor up to a power of two: what the setting really pins
        # fits the node.
        p = plan_json()
        vllm = next(f for f in p["flags"] if f["engine"] == "vllm")
        pinned = float(re.search(r"([0-9.]+) GiB really pinned", vllm["note"]).group(1))
        per_node = pinned / p["nodes_per_replica"] * p["replicas_per_node"] * 2**30
        self.assertLessEqual(per_node, p["host_kv_bytes_per_node"])
        self.assertEqual(vllm["setting"], "--kv-offloading-size 1536")

    def test_regress_generate_max_turns_range_is_the_check(self):
        help_text = run("trace", "generate", "--help").stdout
        self.assertIn("UINT in [3 - 1000000000]", help_text)
        for bad in ("1", "2", "1000000001"):
            run("trace", "generate", "--out", os.path.join(self.tmp.name, "mt" + bad),
                "--traces", "1", "--max-turns", bad, expect=1)
        run("trace", "generate", "--out", os.path.join(self.tmp.name, "mt3"), "--traces", "1",
            "--scale", "0.05", "--max-turns", "3")

    def test_a_plot_that_cannot_be_written_fails_before_the_replay(self):
        # One answer, before any arm runs: the plot's directory is missing, or it is a directory.
        for plot in (os.path.join(self.tmp.name, "no-dir", "p.svg"), self.tmp.name):
            p = run("bench", "agentx", "--synthetic", "2", "--synthetic-scale", "0.05",
                    "--duration-s", "60", "--plot", plot, "--json", "--no-progress", expect=3)
            lines = p.stdout.strip().splitlines()
            self.assertEqual(len(lines), 1, lines)
            self.assertFalse(json.loads(lines[0])["ok"])
            p = run("plan", "--synthetic", "1", "--synthetic-scale", "0.05", "--duration-s", "60",
                    "--points", "2", "--plot", plot, "--no-progress", expect=3)
            self.assertEqual(p.stdout, "")
            self.assertIn("cannot write" if plot == self.tmp.name else "no-dir", p.stderr)
        self.assertEqual([f for f in os.listdir(self.tmp.name) if ".tmp." in f], [])


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    args, rest = ap.parse_known_args()
    DELTAKV = os.path.abspath(args.deltakv)
    unittest.main(argv=[sys.argv[0], *rest])
