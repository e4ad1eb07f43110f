"""End-to-end live sync benchmark: request -> live, pause and per-phase times for a generated
model at several element densities and TP degrees, next to a full reload of the same new
checkpoint into the same engine (the baseline) in the same run; sidecar peak RSS. JSON lines.

  python3 bench/sync_bench.py --deltakv build/sidecar/deltakv \
      --engine build/shim/deltakv-demo-engine [--size-mib 4096] [--densities 0.001,0.01,0.05] \
      [--tp 1,4] [--dir $TMPDIR] [--sidecar-args "--decode-threads 1"]

The deltas form a chain v1 -> v2 -> v3 -> ... (one density per step), synced in order; after
each sync the engine reloads the same new checkpoint in full, which leaves its bytes unchanged
and measures what a full reload would have cost. The reload is the best full copy the engine
can do: each rank reads its shards into memory first, then copies them with as many threads as
the cpu backend's scatter, and its pause covers only that copy. pause_vs_full_reload is the
sync's pause over the slowest rank's reload pause. A figure missing from either side stops the
bench with an error rather than producing a ratio.
"""
import argparse, json, os, platform, shutil, signal, subprocess, sys, tempfile, time
import concurrent.futures


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Bench  # noqa: E402

_bench = Bench("sync_bench")
http, figure = _bench.http, _bench.figure


def vm_hwm_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return None


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
    ap.add_argument("--tp", default="1,4")
    ap.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"))
    ap.add_argument("--sidecar-args", default="", help="extra sidecar flags, space-separated")
    a = ap.parse_args()
    densities = [float(x) for x in a.densities.split(",")]
    tps = [int(x) for x in a.tp.split(",")]
    root = tempfile.mkdtemp(prefix="deltakv-syncbench-", dir=a.dir)
    t = lambda *p: os.path.join(root, *p)
    k = lambda *args: json.loads(subprocess.run([a.deltakv, *args, "--json"], check=True,
                                                capture_output=True, text=True).stdout)
    print(json.dumps({"bench": "sync_bench", "kind": "environment", "cpus": os.cpu_count(),
                      "machine": platform.machine(), "kernel": platform.release(),
                      "size_mib": a.size_mib}), flush=True)
    try:
        k("checkpoint", "generate", "--out", t("v1"), "--size-mib", str(a.size_mib), "--files", "4")
        chain = []
        for i, d in enumerate(densities):
            parent, new = f"v{i + 1}", f"v{i + 2}"
            k("checkpoint", "mutate", "--parent", t(parent), "--out", t(new), "--density", str(d),
              "--seed", str(i + 2))
            pub = k("publish", "--parent", t(parent), "--new", t(new), "--out", t("d-" + new))
            chain.append((d, parent, new, pub))
        open(t("token"), "w").write("bench-token\n")
        for tp in tps:
            shm = f"dkv-bench-{os.getpid()}-{tp}"
            sidecar = subprocess.Popen([a.deltakv, "sidecar", "--listen", "127.0.0.1:0", "--port-file",
                                        t(f"sc{tp}.port"), "--token-file", t("token"), "--shm-name", shm,
                                        *a.sidecar_args.split()],
                                       stderr=subprocess.DEVNULL)
            url = f"http://127.0.0.1:{wait_file(t(f'sc{tp}.port'), sidecar, 'sidecar')}"
            ports = t(f"ports{tp}")
            os.makedirs(ports)
            engine = subprocess.Popen([a.engine, "--checkpoint", t("v1"), "--tp", str(tp), "--shm", shm,
                                       "--port-dir", ports], stderr=subprocess.DEVNULL)
            rank_ports = [wait_file(os.path.join(ports, f"rank{r}.port"), engine, "engine")
                          for r in range(tp)]
            while len(http("GET", url + "/v1/status")["ranks"]) < tp:
                time.sleep(0.05)
            try:
                for d, parent, new, pub in chain:
                    t0 = time.time()
                    sid = http("POST", url + "/v1/sync", {"version": new, "delta": t("d-" + new)},
                               "bench-token")["id"]
                    while True:
                        rec = http("GET", f"{url}/v1/syncs/{sid}")
                        if rec["state"] in ("live", "aborted"):
                            break
                        time.sleep(0.005)
                    wall = (time.time() - t0) * 1000
                    if rec["state"] != "live":
                        sys.exit(f"sync_bench: sync failed: {rec.get('error')}")
                    with concurrent.futures.ThreadPoolExecutor(tp) as ex:
                        reloads = list(ex.map(lambda p: http("POST", f"http://127.0.0.1:{p}/v1/reload",
                                                             {"checkpoint": t(new)}), rank_ports))
                    for r, p in zip(reloads, rank_ports):
                        if r.get("ok") is not True:
                            sys.exit(f"sync_bench: full reload on port {p} failed: "
                                     f"{r.get('error', json.dumps(r)[:500])}")
                    full_pause = max(figure(r, "pause_ms", f"full reload response (port {p})")
                                     for r, p in zip(reloads, rank_ports))
                    full_total = max(figure(r, "total_ms", f"full reload response (port {p})")
                                     for r, p in zip(reloads, rank_ports))
                    pause = figure(rec.get("phase_ms"), "pause", f"phase_ms of sync {sid}")
                    weight_lines = figure(rec, "weight_lines", f"sync record {sid}")
                    if not isinstance(rec.get("touched_lines"), int):
                        sys.exit(f"sync_bench: sync record {sid} has no 'touched_lines'")
                    print(json.dumps({
                        "bench": "sync_bench", "tp": tp, "element_density": d,
                        "byte_density": pub["density"], "model_bytes": pub["checkpoint_bytes"],
                        "delta_bytes": pub["compressed_bytes"],
                        "request_to_live_ms": wall, "sidecar_total_ms": rec["total_ms"],
                        "phase_ms": rec["phase_ms"], "pause_ms": pause,
                        "full_reload_pause_ms": full_pause, "full_reload_total_ms": full_total,
                        "full_reload_threads": reloads[0].get("threads"),
                        "pause_vs_full_reload": pause / full_pause,
                        # The share of weight memory lines the scatter writes: on a backend
                        # whose full reload runs at the same memory bandwidth as the scatter
                        # (the cpu backend), the pause ratio cannot go much below it.
                        "touched_line_fraction": rec["touched_lines"] / weight_lines,
                        "plan_parts": rec.get("plan_parts"),
                        "sidecar_peak_rss_mib": vm_hwm_mib(sidecar.pid)}), flush=True)
            finally:
                for p in (engine, sidecar):
                    p.send_signal(signal.SIGTERM)
                    p.wait()
                for f in os.listdir("/dev/shm"):
                    if f.startswith(shm):
                        os.remove(os.path.join("/dev/shm", f))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
