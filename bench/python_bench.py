#!/usr/bin/env python3
"""The Python package against its C and CLI baselines, in one run.

kv:      deltakv.KvClient store/reload GB/s vs the C client (kv_c_roundtrip, the C ABI) on the
         same pool of a real sidecar: the same workload (BLOCKS cross-layer blocks per
         prepare/store/complete call, then reloaded into a second memory), rounds alternating
         between the two, each after a warm-up round; ratio = python / c. The bench exits 1
         when the store or the load ratio is below --min-kv-ratio (default 0.9, at the
         default 1 MiB blocks) or a reloaded byte differs.
publish: deltakv.publish from numpy arrays vs `deltakv publish` on the same tensors in
         safetensors files (page-cached), same level, frame size and threads; ratio =
         cli_seconds / python_seconds (>= 1: the Python path is not slower).
Prints an environment line, then one JSON line per part. A missing figure is an error.

Usage: python_bench.py --deltakv BIN --c-client BIN [--block-mib 1] [--blocks 64]
                       [--rounds 8] [--repeats 3] [--publish-mib 256] [--min-kv-ratio 0.9]
(PYTHONPATH must hold the deltakv package: <build>/python.)
"""
import argparse, json, os, platform, shutil, statistics, subprocess, sys, tempfile, time

import numpy as np

import deltakv
from benchlib import Bench

B = Bench("python_bench")


def start_sidecar(binary, tmp, block_bytes, slots):
    shm = f"dkv-pybench-{os.getpid()}"
    port = os.path.join(tmp, "port")
    tok = os.path.join(tmp, "token")
    open(tok, "w").write("t\n")
    p = subprocess.Popen([binary, "sidecar", "--listen", "127.0.0.1:0", "--port-file", port,
                          "--token-file", tok, "--shm-name", shm, "--kv-block-bytes",
                          str(block_bytes), "--kv-capacity-slots", str(slots)],
                         stderr=open(os.path.join(tmp, "sidecar.log"), "wb"))
    deadline = time.time() + 20
    while not (os.path.exists(port) and os.path.getsize(port) > 0):
        if p.poll() is not None or time.time() > deadline:
            sys.exit("python_bench: sidecar did not start: " +
                     open(os.path.join(tmp, "sidecar.log")).read())
        time.sleep(0.02)
    return p, shm + ".kv"


def python_rounds(pool, block, blocks, rounds, salt):
    src = (np.arange(block * blocks, dtype=np.uint64) * 131 + 7).astype(np.uint8).reshape(blocks, block)
    dst = np.zeros_like(src)
    ctx = deltakv.KeyContext(salt=salt)
    ids = np.arange(blocks, dtype=np.uint64)
    store_s = load_s = 0.0
    ok = True
    with deltakv.KvClient(deltakv.CrossLayer(src), pool_name=pool) as cin, \
            deltakv.KvClient(deltakv.CrossLayer(dst), pool_name=pool) as cout:
        for r in range(rounds + 1):
            keys = deltakv.engine_hash_keys(ctx, [r * blocks + i + 1 for i in range(blocks)])
            t0 = time.perf_counter()
            cin.store(keys, ids)
            t1 = time.perf_counter()
            cout.load(keys, ids)
            t2 = time.perf_counter()
            if r > 0:
                store_s += t1 - t0
                load_s += t2 - t1
            ok = ok and np.array_equal(src, dst)
            dst[:] = 0
    total = block * blocks * rounds
    return {"store_gb_per_s": total / store_s / 1e9, "load_gb_per_s": total / load_s / 1e9,
            "bytes_ok": ok}


def kv_part(a, tmp):
    block = int(a.block_mib * (1 << 20))
    side, pool = start_sidecar(a.deltakv, tmp, block, 2 * a.blocks + 8)
    try:
        c_runs, py_runs = [], []
        for i in range(a.repeats):
            out = subprocess.run([a.c_client, pool, str(block), str(a.blocks), str(a.rounds),
                                  f"c{i}"], check=True, capture_output=True, text=True).stdout
            c_runs.append(json.loads(out))
            py_runs.append(python_rounds(pool, block, a.blocks, a.rounds, f"py{i}"))
    finally:
        side.terminate()
        side.wait(10)
        # The sidecar keeps its segments for engines across restarts; the bench removes them.
        prefix = pool[:-len(".kv")]
        for name in os.listdir("/dev/shm"):
            if name.startswith(prefix):
                os.remove(os.path.join("/dev/shm", name))
    med = lambda runs, k: statistics.median(B.figure(r, k, "a run") for r in runs)
    res = {"bench": "python_kv", "block_bytes": block, "blocks_per_call": a.blocks,
           "rounds": a.rounds, "repeats": a.repeats}
    for k in ("store_gb_per_s", "load_gb_per_s"):
        res["python_" + k] = round(med(py_runs, k), 3)
        res["c_" + k] = round(med(c_runs, k), 3)
        res[k.split("_")[0] + "_ratio"] = round(res["python_" + k] / res["c_" + k], 3)
    res["bytes_ok"] = all(r["bytes_ok"] for r in c_runs + py_runs)
    return res


def publish_part(a, tmp):
    t = lambda p: os.path.join(tmp, p)
    run = lambda *args: subprocess.run([a.deltakv, *args], check=True, capture_output=True)
    run("checkpoint", "generate", "--out", t("v1"), "--size-mib", str(a.publish_mib))
    run("checkpoint", "mutate", "--parent", t("v1"), "--out", t("v2"), "--density", "0.01")
    # The same tensors as numpy arrays (raw bytes, reinterpreted by dtype).
    def arrays(d):
        out = {}
        for f in sorted(x for x in os.listdir(d) if x.endswith(".safetensors")):
            raw = open(os.path.join(d, f), "rb").read()
            n = int.from_bytes(raw[:8], "little")
            for k, v in json.loads(raw[8:8 + n]).items():
                if k == "__metadata__":
                    continue
                b, e = v["data_offsets"]
                out[k] = (np.frombuffer(raw, np.uint8, e - b, 8 + n + b), v["dtype"], v["shape"])
        return {k: (arr.reshape(*s[:-1], -1) if s and arr.size else arr, dt)
                for k, (arr, dt, s) in out.items() if arr.size or not s}
    pa, pb = arrays(t("v1")), arrays(t("v2"))
    py_s, cli_s = [], []
    for i in range(a.repeats):
        shutil.rmtree(t("dpy"), ignore_errors=True)
        shutil.rmtree(t("dcli"), ignore_errors=True)
        t0 = time.perf_counter()
        s = deltakv.publish(pa, pb, t("dpy"), parent_version="v1", version="v2", threads=0)
        py_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        run("publish", "--parent", t("v1"), "--new", t("v2"), "--out", t("dcli"))
        cli_s.append(time.perf_counter() - t0)
    res = {"bench": "python_publish", "checkpoint_bytes": s.checkpoint_bytes,
           "tensors": s.tensors, "frames": s.frames,
           "python_seconds": round(statistics.median(py_s), 4),
           "cli_seconds": round(statistics.median(cli_s), 4)}
    B.figure(res, "python_seconds", "publish")
    B.figure(res, "cli_seconds", "publish")
    res["ratio"] = round(res["cli_seconds"] / res["python_seconds"], 3)
    res["python_gb_per_s"] = round(s.checkpoint_bytes / res["python_seconds"] / 1e9, 3)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    ap.add_argument("--c-client", required=True)
    ap.add_argument("--block-mib", type=float, default=1)
    ap.add_argument("--blocks", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--publish-mib", type=int, default=256)
    ap.add_argument("--parts", default="kv,publish")
    ap.add_argument("--min-kv-ratio", type=float, default=0.9,
                    help="exit 1 when the Python client's store or load GB/s is below this "
                         "times the C client's (0: no check)")
    a = ap.parse_args()
    print(json.dumps({"bench": "python_bench", "kind": "environment", "cpus": os.cpu_count(),
                      "machine": platform.machine(), "kernel": platform.release(),
                      "python": platform.python_version(), "numpy": np.__version__,
                      "deltakv": deltakv.__version__}), flush=True)
    tmp = tempfile.mkdtemp(prefix="deltakv-pybench-")
    failures = []
    try:
        if "kv" in a.parts:
            kv = kv_part(a, tmp)
            print(json.dumps(kv), flush=True)
            if not kv["bytes_ok"]:
                failures.append("a reloaded block differs from the stored one")
            for part in ("store", "load"):
                if kv[part + "_ratio"] < a.min_kv_ratio:
                    failures.append(f"the Python client's {part} is {kv[part + '_ratio']}x the C "
                                    f"client's, below {a.min_kv_ratio}x")
        if "publish" in a.parts:
            print(json.dumps(publish_part(a, tmp)), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit("python_bench: " + "; ".join(failures))


if __name__ == "__main__":
    main()
