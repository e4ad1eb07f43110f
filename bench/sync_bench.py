"""End-to-end live sync benchmark: request -> live, pause and per-phase times for a generated
model at several element densities, TP degrees and sidecar decode-thread counts, next to three
baselines measured in the same run; sidecar peak RSS. JSON lines.

  python3 bench/sync_bench.py --deltakv build/sidecar/deltakv \
      --engine build/shim/deltakv-demo-engine [--size-mib 4096] [--densities 0.001,0.01,0.05] \
      [--tp 1,4] [--decode-threads 1,2] [--malloc glibc,jemalloc] [--sequences runs,zstd]
      [--dir $TMPDIR]
      [--sidecar-args "..."] [--backend cpu|cuda] [--check-bytes] [--log FILE] [--repeat N]

--repeat N syncs each density N times (the chain cycles through the densities, every step a new
delta); each sync prints its result line, then a summary line per configuration and density
gives the median and the range of each ratio (one sync on a shared machine can be noisy).

--sequences runs every configuration once per way the deltas' frames are parsed into zstd
sequences (`deltakv publish --sequences`: runs, the default, or zstd, libzstd's match finder),
each from its own copy of the chain's deltas, and prints the A/B of the two.

--malloc runs every configuration once per allocator: glibc malloc, and jemalloc preloaded
(LD_PRELOAD of --jemalloc, found in the usual library directories by default) into the sidecar
and into the fetch + walk baseline, so the allocators are compared in the same run.

Baselines:
- fetch + walk alone: `deltakv frame scan --no-checksum` of the delta's objects (read from the
  same store, walked with no check at all, nothing planned or staged), one thread, best of
  three, timed right before each sync (with the sidecar and engine up and idle): a shared
  machine's speed drifts during a run, so each sync is compared with a walk of the same moment.
  The sync checks every frame's xor_digest on top (FORMAT.md 2.5), so this baseline is a lower
  bound.
  request_to_live_vs_walk is request -> live over it: what planning, staging, commit, the
  digest check and the protocol add on top of the two steps a sync cannot skip.
- the touched-line bound: each rank finds the 64-byte lines the sync changed (against the
  parent checkpoint), then all ranks store once to each of their lines on as many threads as
  their scatters, in two rounds, each started on every rank at the same instant as their
  commits' scatters run at once (POST /v1/touch-bound on the demo engine, "hold" then
  "start_unix_ns"). touch_bound_ms is the better round's span (its start to the last rank's
  end), as the pause spans the first rank's pause to the last rank's resume;
  touch_bound_rank_ms is the slowest rank's own best pass, touch_bound_late_us the most a pass
  began past its instant. pause_vs_touch_bound is the sync's pause over touch_bound_ms.
- a full reload (below).
Each engine is verified against its checkpoint (POST /v1/verify) before the timed syncs, as a
production start with --verify-checkpoint does, so no timed sync pays the one-time early check.

The deltas form a chain v1 -> v2 -> v3 -> ... (one density per step), synced in order; after
each sync the engine reloads the same new checkpoint in full, which leaves its bytes unchanged
and measures what a full reload would have cost. The reload is the best full copy the engine
can do: each rank reads its shards into memory first, then copies them with as many threads as
the cpu backend's scatter, and its pause covers only that copy. pause_vs_full_reload is the
sync's pause over the slowest rank's reload pause. A figure missing from either side stops the
bench with an error rather than producing a ratio.

--backend cuda runs the engine's weights in CUDA device memory (deltakv-demo-engine --backend
cuda). Then:
- the full reload is one host-to-device copy of every tensor from pinned host memory (the
  fastest way to load the whole model on a GPU), its pause covering only the copies;
- there is no touched-line bound (it times host memory lines); instead each rank's staging
  (deltakv_engine_get_sync_stats: bytes staged and time in the backend's staging calls) is set
  against a host-to-device copy of the same number of bytes from pinned memory on the same GPU
  (POST /v1/copy-bound): staging_vs_h2d_copy is staging GB/s over that copy's GB/s;
- the startup verify and a closing scrub report GB/s against a device-to-device copy of the
  rank's weight bytes (a pass that reads each byte once and writes it once).
Where the CPU goes, per sync from request to live: sidecar_cpu_ms and ranks_cpu_ms (user +
system time of the sidecar and of all rank processes together, from /proc at the kernel's clock
tick, 10 ms on most kernels), ranks_minor_faults (their page faults), and idle_cpu_ms (the time
all of the machine's CPUs together sat idle): what planning, staging and the commit cost on top
of the walk, and whether the CPUs ran out. ranks_rss_mib: the rank processes' resident memory
right after the sync went live (their weights, and the staging buffers the backend keeps for the
next sync).
--check-bytes (default with cuda) compares each rank's live weights after the sync with the
same rank after the full reload of the new checkpoint (sha256 of every tensor, downloaded from
the device): the sync must have produced exactly the new checkpoint's bytes.
"""
import argparse, json, os, platform, shutil, signal, statistics, subprocess, sys, tempfile, time
import concurrent.futures


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Bench  # noqa: E402

_bench = Bench("sync_bench")
http, figure = _bench.http, _bench.figure


def cpu_ms_and_faults(pid):
    """User + system CPU of process `pid` (every thread, exited ones too) in ms, at the kernel's
    clock-tick resolution (10 ms on most), and its minor page faults."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # from field 3 (state) on
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK"), int(fields[7])


def idle_cpu_ms():
    """Idle + iowait time of all CPUs together since boot, in ms (/proc/stat)."""
    with open("/proc/stat") as f:
        cpu = f.readline().split()
    return (int(cpu[4]) + int(cpu[5])) * 1000 / os.sysconf("SC_CLK_TCK")


def child_pids(pid):
    """Processes whose parent is `pid`."""
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass  # gone meanwhile
    return kids


def status_mib(pid, field):
    """A memory figure of /proc/PID/status (VmHWM: peak resident, VmRSS: resident), in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return None


def post_ranks(ports, path, body, what):
    """POSTs `body` to every demo-engine rank at once; returns the responses, each "ok"."""
    with concurrent.futures.ThreadPoolExecutor(len(ports)) as ex:
        resps = list(ex.map(lambda p: http("POST", f"http://127.0.0.1:{p}{path}", body), ports))
    for r, p in zip(resps, ports):
        if r.get("ok") is not True:
            sys.exit(f"sync_bench: {what} on port {p} failed: {r.get('error', json.dumps(r)[:500])}")
    return resps


def wait_file(path, proc, what, timeout=600):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None or time.time() > deadline:
            sys.exit(f"sync_bench: {what} did not start")
        time.sleep(0.05)
    return int(open(path).read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--size-mib", type=int, default=4096)
    ap.add_argument("--densities", default="0.001,0.01,0.05")
    ap.add_argument("--repeat", type=int, default=1,
                    help="sync each density this many times (the chain cycles through them); "
                         "a summary line per density gives the median and the range")
    ap.add_argument("--tp", default="1,4")
    ap.add_argument("--decode-threads", default="1,2", help="sidecar --decode-threads values")
    ap.add_argument("--malloc", default="glibc", help="allocators to compare: glibc,jemalloc")
    ap.add_argument("--sequences", default="runs",
                    help="publish --sequences of the deltas to compare: runs,zstd")
    ap.add_argument("--jemalloc", default="", help="path of libjemalloc.so (default: search)")
    ap.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"))
    ap.add_argument("--sidecar-args", default="", help="extra sidecar flags, space-separated")
    ap.add_argument("--backend", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--log", default="", help="append the sidecar's and engine's stderr here")
    ap.add_argument("--check-bytes", action="store_true",
                    help="compare the synced bytes with a full reload (default with cuda)")
    a = ap.parse_args()
    cuda = a.backend == "cuda"
    check_bytes = a.check_bytes or cuda
    proc_err = open(a.log, "a") if a.log else subprocess.DEVNULL
    densities = [float(x) for x in a.densities.split(",")] * max(1, a.repeat)
    tps = [int(x) for x in a.tp.split(",")]
    thread_counts = [int(x) for x in a.decode_threads.split(",")]
    mallocs = a.malloc.split(",")
    parses = a.sequences.split(",")
    if not parses or any(p not in ("runs", "zstd") for p in parses):
        sys.exit(f"sync_bench: --sequences takes runs and zstd, not '{a.sequences}'")
    delta = lambda new, parse: f"d-{new}-{parse}"  # the delta directory of a step and parse
    envs = {}
    for m in mallocs:
        if m == "glibc":
            envs[m] = dict(os.environ)
        elif m == "jemalloc":
            path = a.jemalloc or next((p for p in ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
                                                   "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
                                                   "/usr/lib64/libjemalloc.so.2",
                                                   "/usr/lib/libjemalloc.so.2")
                                       if os.path.exists(p)), "")
            if not path or not os.path.exists(path):
                sys.exit("sync_bench: --malloc jemalloc needs libjemalloc.so.2 (or --jemalloc PATH)")
            envs[m] = {**os.environ, "LD_PRELOAD": path}
        else:
            sys.exit(f"sync_bench: unknown allocator '{m}' (glibc, jemalloc)")
    root = tempfile.mkdtemp(prefix="deltakv-syncbench-", dir=a.dir)
    t = lambda *p: os.path.join(root, *p)
    k = lambda *args: json.loads(subprocess.run([a.deltakv, *args, "--json"], check=True,
                                                capture_output=True, text=True).stdout)
    print(json.dumps({"bench": "sync_bench", "kind": "environment", "cpus": os.cpu_count(),
                      "machine": platform.machine(), "kernel": platform.release(),
                      "size_mib": a.size_mib, "backend": a.backend}), flush=True)
    try:
        k("checkpoint", "generate", "--out", t("v1"), "--size-mib", str(a.size_mib), "--files", "4")
        k("checkpoint", "manifest", t("v1"))  # what the startup verify compares the engine with
        chain = []
        for i, d in enumerate(densities):
            parent, new = f"v{i + 1}", f"v{i + 2}"
            k("checkpoint", "mutate", "--parent", t(parent), "--out", t(new), "--density", str(d),
              "--seed", str(i + 2))
            pubs = {parse: k("publish", "--parent", t(parent), "--new", t(new), "--out",
                             t(delta(new, parse)), "--sequences", parse) for parse in parses}
            chain.append((d, parent, new, pubs))
        # Everything generated (a checkpoint per step) goes to disk before anything is timed:
        # otherwise the kernel writes it back during the first configuration's syncs.
        os.sync()
        def walk_alone_ms(new, m, parse):
            """Fetch + walk alone of the delta to `new` (best of three, so the objects are in the
            page cache as they are for the sidecar's fetch from a local store), in ms."""
            manifest = json.load(open(t(delta(new, parse), "manifest.json")))
            objects = [t(delta(new, parse), o["name"]) for o in manifest["objects"]]
            best = None
            for _ in range(3):
                out = subprocess.run([a.deltakv, "frame", "scan", *objects, "--json",
                                      "--no-checksum"], check=True,
                                     capture_output=True, text=True, env=envs[m]).stdout
                secs = [figure(json.loads(line), "seconds", "frame scan output")
                        for line in out.splitlines() if line.strip()]
                if len(secs) != len(objects):
                    sys.exit(f"sync_bench: frame scan reported {len(secs)} of {len(objects)} objects")
                best = sum(secs) if best is None else min(best, sum(secs))
            return best * 1000
        open(t("token"), "w").write("bench-token\n")
        results = []
        for tp, threads, m, parse in [(tp, n, m, p) for tp in tps for n in thread_counts
                                      for m in mallocs for p in parses]:
            run = f"{tp}-{threads}-{m}-{parse}"
            shm = f"dkv-bench-{os.getpid()}-{run}"
            sidecar = subprocess.Popen([a.deltakv, "sidecar", "--listen", "127.0.0.1:0", "--port-file",
                                        t(f"sc{run}.port"), "--token-file", t("token"), "--shm-name", shm,
                                        "--decode-threads", str(threads), *a.sidecar_args.split()],
                                       stderr=proc_err, env=envs[m])
            url = f"http://127.0.0.1:{wait_file(t(f'sc{run}.port'), sidecar, 'sidecar')}"
            ports = t(f"ports{run}")
            os.makedirs(ports)
            engine = subprocess.Popen([a.engine, "--checkpoint", t("v1"), "--tp", str(tp), "--shm", shm,
                                       "--port-dir", ports, "--backend", a.backend]
                                      # cuda: staging memory reserved in the pool at start
                                      + (["--staging-reserve-mib", "256"] if a.backend == "cuda" else []),
                                      stderr=proc_err)
            rank_ports = [wait_file(os.path.join(ports, f"rank{r}.port"), engine, "engine")
                          for r in range(tp)]
            while len(http("GET", url + "/v1/status")["ranks"]) < tp:
                time.sleep(0.05)
            # The engine is verified against its checkpoint first, as at a production start
            # (--verify-checkpoint), so every timed sync is a steady-state one (no early check).
            job = http("POST", url + "/v1/verify", {"checkpoint": t("v1")}, "bench-token")
            if not isinstance(job.get("id"), str):
                sys.exit(f"sync_bench: POST /v1/verify returned no id: {json.dumps(job)[:500]}")
            rec = _bench.wait_job(url, job["id"], ("verified", "diverged", "failed"))
            if rec["state"] != "verified":
                sys.exit(f"sync_bench: the startup verify ended {rec['state']}: {rec.get('error')}")
            verify_rec = rec
            # The rank processes (the demo engine forks one per rank; itself if it did not).
            rank_pids = child_pids(engine.pid) or [engine.pid]
            try:
                for d, parent, new, pubs in chain:
                    pub = pubs[parse]
                    # The baseline right before its sync: a shared machine's speed drifts over
                    # a run, and a walk timed minutes earlier would skew the ratio either way.
                    walk_ms = walk_alone_ms(new, m, parse)
                    usage0 = [cpu_ms_and_faults(p) for p in [sidecar.pid, *rank_pids]]
                    idle0 = idle_cpu_ms()
                    t0 = time.time()
                    sid = http("POST", url + "/v1/sync", {"version": new, "delta": t(delta(new, parse))},
                               "bench-token")["id"]
                    rec = _bench.wait_job(url, sid, ("live", "aborted"))
                    wall = (time.time() - t0) * 1000
                    idle = idle_cpu_ms() - idle0
                    usage = [(c1 - c0, f1 - f0) for (c0, f0), (c1, f1) in
                             zip(usage0, [cpu_ms_and_faults(p) for p in [sidecar.pid, *rank_pids]])]
                    ranks_rss = sum(status_mib(p, "VmRSS") for p in rank_pids)
                    if rec["state"] != "live":
                        sys.exit(f"sync_bench: sync failed: {rec.get('error')}")
                    pause = figure(rec.get("phase_ms"), "pause", f"phase_ms of sync {sid}")
                    states = [http("GET", f"http://127.0.0.1:{p}/v1/state") for p in rank_ports]
                    extra = {}
                    if cuda:
                        # Staging against a host-to-device copy of the same bytes, per rank.
                        stage = []
                        for st, p in zip(states, rank_ports):
                            ss = st.get("sync_stats") or {}
                            if ss.get("outcome") != 1:
                                sys.exit(f"sync_bench: rank on port {p}: its newest sync's stats "
                                         f"say outcome {ss.get('outcome')}, not committed: {ss}")
                            nbytes = figure(ss, "bytes", f"sync_stats of port {p}")
                            us = figure(ss, "stage_us", f"sync_stats of port {p}")
                            cb = http("POST", f"http://127.0.0.1:{p}/v1/copy-bound",
                                      {"bytes": nbytes, "kind": "h2d"})
                            copy_ms = figure(cb, "ms", f"copy-bound response (port {p})")
                            stage.append({"bytes": nbytes, "stage_ms": us / 1000,
                                          "staging_gbps": nbytes / (us * 1e3),
                                          "h2d_copy_gbps": nbytes / (copy_ms * 1e6)})
                        slow = max(stage, key=lambda x: x["stage_ms"])
                        extra = {"rank_staging": stage, "staging_gbps": slow["staging_gbps"],
                                 "h2d_copy_gbps": slow["h2d_copy_gbps"],
                                 "staging_vs_h2d_copy": slow["staging_gbps"] / slow["h2d_copy_gbps"]}
                    else:
                        # Every rank finds its lines first; then all touch them from the same
                        # instants, as their commits' scatters run at once. The bound is the
                        # better round's span: its start to the last rank's end.
                        # A round a stalled process (a busy shared machine) let run into the
                        # next is measured again with rounds twice as long, up to three times.
                        for attempt in range(3):
                            held = post_ranks(rank_ports, "/v1/touch-bound",
                                              {"parent": t(parent), "hold": True}, "touch bound")
                            lines = sum(r["lines"] for r in held)
                            # Far more than a pass takes.
                            round_ns = (100_000_000 + 200 * lines) << attempt
                            start_ns = time.time_ns() + 50_000_000
                            bounds = post_ranks(rank_ports, "/v1/touch-bound",
                                                {"start_unix_ns": start_ns, "rounds": 2,
                                                 "round_ns": round_ns}, "touch bound")
                            spans = []
                            for k in range(2):
                                at = start_ns + k * round_ns
                                end = max(r["round_end_unix_ns"][k] for r in bounds)
                                if end >= at + round_ns:
                                    print(f"sync_bench: touch-bound round {k} ran past the next; "
                                          "measuring again", file=sys.stderr)
                                    spans = None
                                    break
                                spans.append((end - at) / 1e6)
                            if spans:
                                break
                        else:
                            sys.exit("sync_bench: touch-bound rounds ran past the next three times")
                        touch_ms = min(spans)
                        if touch_ms <= 0:
                            sys.exit(f"sync_bench: touch-bound span {touch_ms} ms")
                        extra = {"touch_bound_ms": touch_ms,
                                 "touched_lines_measured": lines,
                                 "touch_bound_rank_ms": max(figure(r, "touch_ms", "touch-bound response")
                                                            for r in bounds),
                                 "touch_bound_late_us": max(
                                     figure(r, "late_us", "touch-bound response", zero_ok=True)
                                     for r in bounds),
                                 "pause_vs_touch_bound": pause / touch_ms}
                    reloads = post_ranks(rank_ports, "/v1/reload", {"checkpoint": t(new)},
                                         "full reload")
                    if check_bytes:
                        again = [http("GET", f"http://127.0.0.1:{p}/v1/generate") for p in rank_ports]
                        for st, ag, p in zip(states, again, rank_ports):
                            if st.get("answer") != ag.get("answer"):
                                sys.exit(f"sync_bench: rank on port {p}: the synced weights differ "
                                         f"from a full load of {new} (sha256 {st.get('answer')} "
                                         f"vs {ag.get('answer')})")
                        extra["bytes_match_full_load"] = True
                    full_pause = max(figure(r, "pause_ms", f"full reload response (port {p})")
                                     for r, p in zip(reloads, rank_ports))
                    full_total = max(figure(r, "total_ms", f"full reload response (port {p})")
                                     for r, p in zip(reloads, rank_ports))
                    weight_lines = figure(rec, "weight_lines", f"sync record {sid}")
                    if not isinstance(rec.get("touched_lines"), int):
                        sys.exit(f"sync_bench: sync record {sid} has no 'touched_lines'")
                    result = {
                        "bench": "sync_bench", "kind": "result", "tp": tp, "decode_threads": threads, "malloc": m,
                        "sequences_from": parse, "element_density": d, "version": new,
                        "byte_density": pub["density"], "model_bytes": pub["checkpoint_bytes"],
                        "delta_bytes": pub["compressed_bytes"],
                        "request_to_live_ms": wall, "sidecar_total_ms": rec["total_ms"],
                        "backend": a.backend,
                        "walk_alone_ms": walk_ms,
                        "request_to_live_vs_walk": wall / walk_ms,
                        **extra,
                        "phase_ms": rec["phase_ms"], "pause_ms": pause,
                        "full_reload_pause_ms": full_pause, "full_reload_total_ms": full_total,
                        "full_reload_threads": reloads[0].get("threads"),
                        "pause_vs_full_reload": pause / full_pause,
                        # The share of weight memory lines the scatter writes: on a backend
                        # whose full reload runs at the same memory bandwidth as the scatter
                        # (the cpu backend), the pause ratio cannot go much below it.
                        "touched_line_fraction": rec["touched_lines"] / weight_lines,
                        "plan_parts": rec.get("plan_parts"),
                        "plan_records": rec.get("plan_records"),
                        "sidecar_peak_rss_mib": status_mib(sidecar.pid, "VmHWM"),
                        # Where the CPU went from request to live (clock-tick resolution).
                        "sidecar_cpu_ms": usage[0][0],
                        "ranks_cpu_ms": sum(c for c, _ in usage[1:]),
                        "ranks_minor_faults": sum(f for _, f in usage[1:]),
                        "idle_cpu_ms": idle,
                        # The ranks' resident memory once live: weights, plus what the backend
                        # keeps for the next sync's staging.
                        "ranks_rss_mib": ranks_rss}
                    results.append(result)
                    print(json.dumps(result), flush=True)
                # The startup verify and a closing scrub (every rank checksums all its weights):
                # GB/s over the checksum phase; on cuda against a device-to-device pass over the
                # same bytes per rank.
                job = http("POST", url + "/v1/scrub", {}, "bench-token")
                if not isinstance(job.get("id"), str):
                    sys.exit(f"sync_bench: POST /v1/scrub returned no id: {json.dumps(job)[:500]}")
                scrub_rec = _bench.wait_job(url, job["id"], ("verified", "diverged", "failed"))
                if scrub_rec["state"] != "verified":
                    sys.exit(f"sync_bench: the closing scrub ended {scrub_rec['state']}: "
                             f"{scrub_rec.get('error')}")
                line = {"bench": "sync_bench", "kind": "checks", "tp": tp, "decode_threads": threads,
                        "malloc": m, "sequences_from": parse, "backend": a.backend}
                for name, r in (("verify", verify_rec), ("scrub", scrub_rec)):
                    ms = figure(r.get("phase_ms"), "checksum", f"{name} record phase_ms")
                    nbytes = figure(r, "bytes_checked", f"{name} record")
                    line[f"{name}_gbps"] = nbytes / (ms * 1e6)
                if cuda:
                    per_rank = max(figure(http("GET", f"http://127.0.0.1:{p}/v1/state"), "bytes",
                                          f"state of port {p}") for p in rank_ports)
                    d2d = http("POST", f"http://127.0.0.1:{rank_ports[0]}/v1/copy-bound",
                               {"bytes": per_rank, "kind": "d2d"})
                    d2d_ms = figure(d2d, "ms", "d2d copy-bound response")
                    # The ranks share one GPU: verify_gbps and scrub_gbps count every rank's
                    # bytes, so the pass is that GPU's rate over one rank's bytes.
                    line["d2d_pass_gbps"] = per_rank / (d2d_ms * 1e6)
                    line["verify_vs_d2d_pass"] = line["verify_gbps"] / line["d2d_pass_gbps"]
                    line["scrub_vs_d2d_pass"] = line["scrub_gbps"] / line["d2d_pass_gbps"]
                print(json.dumps(line), flush=True)
            finally:
                for p in (engine, sidecar):
                    p.send_signal(signal.SIGTERM)
                    p.wait()
                for f in os.listdir("/dev/shm"):
                    if f.startswith(shm):
                        os.remove(os.path.join("/dev/shm", f))
        # Per configuration and density (with --repeat, over its syncs): medians and ranges.
        groups = {}
        for r in results:
            groups.setdefault((r["tp"], r["decode_threads"], r["malloc"], r["sequences_from"],
                               r["element_density"]), []).append(r)
        summary = {}
        for (tp, threads, m, parse, d), rs in groups.items():
            line = {"bench": "sync_bench", "kind": "summary", "tp": tp, "decode_threads": threads,
                    "malloc": m, "sequences_from": parse, "element_density": d, "syncs": len(rs),
                    "delta_bytes": rs[0]["delta_bytes"]}
            for key in ("request_to_live_ms", "walk_alone_ms", "request_to_live_vs_walk",
                        "pause_ms", "pause_vs_touch_bound", "pause_vs_full_reload",
                        "staging_vs_h2d_copy", "sidecar_peak_rss_mib", "sidecar_cpu_ms",
                        "ranks_cpu_ms", "ranks_minor_faults", "idle_cpu_ms", "ranks_rss_mib"):
                values = [r[key] for r in rs if isinstance(r.get(key), (int, float))]
                if len(values) != len(rs):
                    continue  # a figure this backend does not have
                line[key] = statistics.median(values)
                line[key + "_min"] = min(values)
                line[key + "_max"] = max(values)
            summary[tp, threads, m, parse, d] = line
            print(json.dumps(line), flush=True)
        def print_ab(kind, dim, a, b, figures):
            """For each configuration and density run with `a` and with `b` at summary key
            position `dim` (the rest equal): each figure's median with `a` over its median with
            `b`, as <figure>_<a>_vs_<b> (the figure's _ms or _mib unit dropped)."""
            names = ("tp", "decode_threads", "malloc", "sequences_from", "element_density")
            for key, r in summary.items():
                other = key[:dim] + (b,) + key[dim + 1:]
                if key[dim] != a or other not in summary:
                    continue
                line = {"bench": "sync_bench", "kind": kind,
                        **{n: v for i, (n, v) in enumerate(zip(names, key)) if i != dim}}
                for f in figures:
                    name = f.removesuffix("_ms").removesuffix("_mib")
                    line[f"{name}_{a}_vs_{b}"] = r[f] / summary[other][f]
                print(json.dumps(line), flush=True)
        # Allocator A/B: jemalloc over glibc; parse A/B: the deltas parsed one sequence per run
        # over libzstd's parse.
        print_ab("malloc_ab", 2, "jemalloc", "glibc",
                 ("request_to_live_ms", "walk_alone_ms", "sidecar_peak_rss_mib"))
        print_ab("sequences_ab", 3, "runs", "zstd",
                 ("request_to_live_ms", "walk_alone_ms", "delta_bytes"))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
