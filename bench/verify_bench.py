"""Weight verification benchmark: the sidecar's startup verify (POST /v1/verify: every rank
checksums its live weights, compared with the checkpoint manifest) and scrub (POST /v1/scrub:
the same pass, compared with the sidecar's checksum table), each next to a baseline measured in
the same run. JSON lines: one environment line, then one line per (tp, kind).

  python3 bench/verify_bench.py [--deltakv build/sidecar/deltakv] \
      [--engine build/shim/deltakv-demo-engine] [--size-mib 512] [--tp 1,2] [--rate-gbps 0.5]

verify: bytes_checked over the "checksum" phase, against a plain read of the checkpoint's
safetensors files into a reused buffer (large reads, page cache not dropped): the first read and
the best of 3 warm reads are both reported; the ratio uses the warm best of 3. The verify is
the first one after the engine attaches, run once.
scrub: best of 3 unlimited scrubs, bytes_checked over the "checksum" phase, against the fastest
single-threaded numpy read of an array of the same number of bytes (best of 3). Each rank is one
process on one thread, so at tp > 1 the ranks read in parallel while the baseline does not.
scrub_rate_limited: one scrub with rate_gbps (a per-rank limit); achieved GB/s per rank is
bytes_checked / tp over the checksum phase. A missing figure stops the bench with an error.
"""
import argparse, json, os, platform, shutil, signal, subprocess, sys, tempfile, time

import numpy as np

BENCH = "verify_bench"
TOKEN = "bench-token"


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Bench  # noqa: E402

_bench = Bench("verify_bench")
http, figure = _bench.http, _bench.figure


def wait_file(path, proc, what, timeout=600):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None or time.time() > deadline:
            sys.exit(f"{BENCH}: {what} did not start")
        time.sleep(0.05)
    return int(open(path).read())


def run_job(url, path, body):
    """Submits a verify or scrub and waits for it; returns (record, checksum seconds)."""
    resp = http("POST", url + path, body, TOKEN)
    if not isinstance(resp.get("id"), str):
        sys.exit(f"{BENCH}: POST {path} returned no id: {json.dumps(resp)[:500]}")
    jid = resp["id"]
    rec = _bench.wait_job(url, jid, ("verified", "diverged", "failed"))
    if rec["state"] != "verified":
        sys.exit(f"{BENCH}: {path} job {jid} ended {rec['state']}: {rec.get('error')}")
    figure(rec, "bytes_checked", f"record of {jid}")
    figure(rec, "total_ms", f"record of {jid}")
    return rec, figure(rec.get("phase_ms"), "checksum", f"phase_ms of {jid}") / 1000


def read_files(paths, buf):
    """Seconds to read every file through `buf` (reused) with unbuffered large reads."""
    view = memoryview(buf)
    t0 = time.perf_counter()
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(view):
                pass
    return time.perf_counter() - t0


def numpy_read(nbytes):
    """Fastest single-threaded numpy read over nbytes of touched memory: (name, best-of-3 s)."""
    arr = np.ones(nbytes // 8 * 8, dtype=np.uint8)  # written, so every page is resident
    u64 = arr.view(np.uint64)
    ways = {"uint8.sum(dtype=uint64)": lambda: arr.sum(dtype=np.uint64),
            "uint64.sum()": lambda: u64.sum(),
            "bitwise_xor.reduce(uint64)": lambda: np.bitwise_xor.reduce(u64)}
    best = {}
    for name, fn in ways.items():
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        best[name] = min(times)
    name = min(best, key=best.get)
    return name, best[name], arr.nbytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", default="build/sidecar/deltakv")
    ap.add_argument("--engine", default="build/shim/deltakv-demo-engine")
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--tp", default="1,2")
    ap.add_argument("--rate-gbps", type=float, default=0.5, help="per-rank scrub rate limit")
    ap.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"))
    a = ap.parse_args()
    tps = [int(x) for x in a.tp.split(",")]
    root = tempfile.mkdtemp(prefix="deltakv-verifybench-", dir=a.dir)
    t = lambda *p: os.path.join(root, *p)
    shm_prefix = f"dkv-vbench-{os.getpid()}-"
    procs = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(f"{BENCH}: terminated"))
    print(json.dumps({"bench": BENCH, "kind": "environment", "cpus": os.cpu_count(),
                      "machine": platform.machine(), "kernel": platform.release(),
                      "python": platform.python_version(), "numpy": np.__version__,
                      "size_mib": a.size_mib, "backend": "cpu"}), flush=True)
    try:
        subprocess.run([a.deltakv, "checkpoint", "generate", "--out", t("v1"), "--size-mib",
                        str(a.size_mib), "--files", "4"], check=True, capture_output=True)
        subprocess.run([a.deltakv, "checkpoint", "manifest", t("v1")], check=True,
                       capture_output=True)
        files = sorted(t("v1", f) for f in os.listdir(t("v1")) if f.endswith(".safetensors"))
        file_bytes = sum(os.path.getsize(f) for f in files)
        buf = bytearray(16 << 20)
        read_first = file_bytes / 1e9 / read_files(files, buf)
        read_warm = file_bytes / 1e9 / min(read_files(files, buf) for _ in range(3))
        open(t("token"), "w").write(TOKEN + "\n")
        for tp in tps:
            shm = f"{shm_prefix}{tp}"
            sidecar = subprocess.Popen([a.deltakv, "sidecar", "--listen", "127.0.0.1:0",
                                        "--port-file", t(f"sc{tp}.port"), "--token-file",
                                        t("token"), "--shm-name", shm], stderr=subprocess.DEVNULL)
            procs.append(sidecar)
            url = f"http://127.0.0.1:{wait_file(t(f'sc{tp}.port'), sidecar, 'sidecar')}"
            os.makedirs(t(f"ports{tp}"))
            engine = subprocess.Popen([a.engine, "--checkpoint", t("v1"), "--tp", str(tp),
                                       "--shm", shm, "--port-dir", t(f"ports{tp}")],
                                      stderr=subprocess.DEVNULL)
            procs.append(engine)
            for r in range(tp):
                wait_file(t(f"ports{tp}", f"rank{r}.port"), engine, "engine")
            while len(http("GET", url + "/v1/status")["ranks"]) < tp:
                time.sleep(0.05)
            base = {"bench": BENCH, "tp": tp, "checkpoint_bytes": file_bytes}

            rec, s = run_job(url, "/v1/verify", {"checkpoint": t("v1")})
            gbps = rec["bytes_checked"] / 1e9 / s
            print(json.dumps({**base, "kind": "verify", "bytes_checked": rec["bytes_checked"],
                              "checksum_ms": s * 1000, "total_ms": rec["total_ms"],
                              "phase_ms": rec["phase_ms"], "verify_gbps": gbps,
                              "read_first_gbps": read_first, "read_warm_best3_gbps": read_warm,
                              "ratio_baseline": "read_warm_best3_gbps",
                              "verify_vs_read": gbps / read_warm}), flush=True)

            runs = [run_job(url, "/v1/scrub", {}) for _ in range(3)]
            rec, s = min(runs, key=lambda x: x[1])
            gbps = rec["bytes_checked"] / 1e9 / s
            how, read_s, read_bytes = numpy_read(rec["bytes_checked"])
            numpy_gbps = read_bytes / 1e9 / read_s
            print(json.dumps({**base, "kind": "scrub", "bytes_checked": rec["bytes_checked"],
                              "checksum_ms": s * 1000, "total_ms": rec["total_ms"],
                              "checksum_ms_runs": [r[1] * 1000 for r in runs],
                              "scrub_gbps": gbps, "rank_threads": tp,
                              "numpy_read_gbps": numpy_gbps, "numpy_read": how,
                              "numpy_threads": 1, "scrub_vs_numpy_read": gbps / numpy_gbps}),
                  flush=True)

            rec, s = run_job(url, "/v1/scrub", {"rate_gbps": a.rate_gbps})
            per_rank = rec["bytes_checked"] / tp / 1e9 / s
            print(json.dumps({**base, "kind": "scrub_rate_limited",
                              "bytes_checked": rec["bytes_checked"], "checksum_ms": s * 1000,
                              "total_ms": rec["total_ms"], "requested_gbps_per_rank": a.rate_gbps,
                              "achieved_gbps_per_rank": per_rank,
                              "achieved_gbps_all_ranks": rec["bytes_checked"] / 1e9 / s,
                              "achieved_vs_requested": per_rank / a.rate_gbps}), flush=True)
            for p in (engine, sidecar):
                p.send_signal(signal.SIGTERM)
                p.wait()
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for f in os.listdir("/dev/shm"):
            if f.startswith(shm_prefix):
                os.remove(os.path.join("/dev/shm", f))
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
