"""Sealed-volume dedup: what a second checkpoint uploads after the first, with tensor-aware
chunking alone and with parent-XOR chunks (push --parent), next to the XOR delta `deltakv
publish` writes for the same step, measured in the same run. JSON lines; exits 1 if a claim
below does not hold.

  python3 bench/volume_dedup_bench.py --deltakv build/sidecar/deltakv [--size-mib 1024]
      [--densities 0.001,0.01] [--tensor-fractions 1,0.1,0.01] [--dir $TMPDIR]

For each element density d and tensor fraction f (`deltakv checkpoint mutate --density d/f
--tensor-fraction f`: a fraction f of the tensors changes, d/f of their elements each, so d of
all elements, scattered within those tensors; f = 1 spreads the change over every tensor), the
bench pushes checkpoint v1, then v2 two ways into fresh directory stores: whole (no parent:
only the tensor-aligned chunks that did not change dedup), and with --parent (delta objects
against v1). It prints the bytes each push uploaded and their ratios to v1's upload and to the
size of the publisher's delta directory (shards + manifest), the share of v1's tensor bytes in
tensors that changed and the element density reached (tensors are picked by name, so both
vary around f and d), and the push times against `deltakv publish` of the same pair. A
missing figure stops the bench with an error.

Claims, checked on every run:
  concentrated  with f <= 0.01, a plain push uploads at most 2 % of v1's upload, or twice the
                share of v1's tensor bytes in the changed tensors if that is above 1 %
                (the tensors that change are picked by name and may be large ones)
  parent        a push --parent uploads at most 1.5x the publisher's delta for the same step
A plain push of scattered changes (f = 1) re-uploads nearly everything, which the bench says:
such training steps need --parent.
"""
import argparse, hashlib, json, mmap, os, platform, shutil, subprocess, sys, tempfile, time

from benchlib import Bench

B = Bench("volume_dedup_bench")
CONCENTRATED_MAX_FRACTION = 0.01  # tensor fractions the concentrated claim is about
CONCENTRATED_LIMIT = 0.02         # of v1's upload, while the changed tensors hold <= 1 %
PARENT_LIMIT = 1.5                # push --parent upload / publisher delta


def run(args):
    t0 = time.perf_counter()
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    return out.stdout, time.perf_counter() - t0


def push(deltakv, store, src, volume, *extra):
    out, secs = run([deltakv, "volume", "--store", store, "push", src, volume, "--json", "-q",
                     *extra])
    return json.loads(out), secs


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def tensor_digests(ckpt):
    """{(file, tensor): (blake2b of its bytes, bytes, elements)} of every safetensors file."""
    sizes = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2,
             "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
    out = {}
    for name in sorted(os.listdir(ckpt)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(ckpt, name), "rb") as f, \
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            n = int.from_bytes(m[:8], "little")
            header = json.loads(m[8:8 + n])
            for t, info in header.items():
                if t == "__metadata__":
                    continue
                begin, end = (8 + n + o for o in info["data_offsets"])
                h = hashlib.blake2b(memoryview(m)[begin:end], digest_size=16).digest()
                elements = (end - begin) // sizes[info["dtype"]]
                out[(name, t)] = (h, end - begin, elements)
    return out


def build_type(deltakv):
    cache = os.path.join(os.path.dirname(os.path.abspath(deltakv)), "..", "CMakeCache.txt")
    if os.path.exists(cache):
        for line in open(cache):
            if line.startswith("CMAKE_BUILD_TYPE:"):
                return line.split("=", 1)[1].strip()
    return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--densities", default="0.001,0.01")
    ap.add_argument("--tensor-fractions", default="1,0.1,0.01")
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    bt = build_type(a.deltakv)
    print(json.dumps({"bench": "volume_dedup", "kind": "environment", "cpus": os.cpu_count(),
                      "machine": platform.machine(), "kernel": platform.release(),
                      "build_type": bt, "size_mib": a.size_mib}), flush=True)
    if bt.lower() == "debug":
        print("volume_dedup_bench: WARNING: a Debug build of deltakv; the times are not "
              "meaningful (the byte counts are)", file=sys.stderr)
    work = tempfile.mkdtemp(prefix="deltakv-vdedup-", dir=a.dir)
    failed = []
    try:
        t = lambda *p: os.path.join(work, *p)
        run([a.deltakv, "checkpoint", "generate", "--out", t("v1"), "--size-mib", str(a.size_mib)])
        run([a.deltakv, "checkpoint", "manifest", t("v1")])
        v1_tensors = tensor_digests(t("v1"))
        tensor_bytes = sum(b for _, b, _ in v1_tensors.values())
        elements = sum(e for _, _, e in v1_tensors.values())
        cases = [(float(d), float(f)) for f in a.tensor_fractions.split(",")
                 for d in a.densities.split(",")]
        for d, frac in cases:
            if d / frac > 1:
                sys.exit(f"volume_dedup_bench: density {d} cannot fit in {frac} of the tensors")
            name = f"v2-{d}-{frac}"
            shutil.rmtree(t(name), ignore_errors=True)
            out, _ = run([a.deltakv, "checkpoint", "mutate", "--parent", t("v1"), "--out",
                          t(name), "--density", str(d / frac), "--tensor-fraction", str(frac),
                          "--seed", "7", "--json"])
            changed_elements = B.figure(json.loads(out), "elements_changed", "mutate")
            v2_tensors = tensor_digests(t(name))
            changed_bytes = sum(b for k, (h, b, _) in v2_tensors.items() if v1_tensors[k][0] != h)
            run([a.deltakv, "checkpoint", "manifest", t(name)])
            _, publish_s = run([a.deltakv, "publish", "--parent", t("v1"), "--new", t(name),
                                "--out", t("delta-" + name)])
            delta_bytes = dir_bytes(t("delta-" + name))
            store = t("store-" + name)
            first, first_s = push(a.deltakv, store, t("v1"), "bench/model")
            whole, whole_s = push(a.deltakv, store, t(name), "bench/model")
            store_x = t("store-x-" + name)
            first_x, _ = push(a.deltakv, store_x, t("v1"), "bench/model")
            xor, xor_s = push(a.deltakv, store_x, t(name), "bench/model", "--parent",
                              first_x["ref"], "--parent-dir", t("v1"))
            v1_up = B.figure(first, "bytes_uploaded", "push v1")
            whole_up = B.figure(whole, "bytes_uploaded", "push v2 whole")
            xor_up = B.figure(xor, "bytes_uploaded", "push v2 --parent")
            delta_bytes = B.figure({"b": delta_bytes}, "b", "publish output")
            changed_share = changed_bytes / tensor_bytes
            result = {
                "bench": "volume_dedup", "kind": "result", "size_mib": a.size_mib,
                "element_density": d, "tensor_fraction": frac,
                "element_density_reached": round(changed_elements / elements, 5),
                "changed_tensor_bytes_share": round(changed_share, 5),
                "model_bytes": first["bytes"], "v1_uploaded": v1_up,
                "v2_whole_uploaded": whole_up, "v2_xor_uploaded": xor_up,
                "v2_xor_chunks": xor["chunks_xor"], "publish_delta_bytes": delta_bytes,
                "whole_vs_v1": round(whole_up / v1_up, 4),
                "xor_vs_v1": round(xor_up / v1_up, 4),
                "xor_vs_publish_delta": round(xor_up / delta_bytes, 3),
                "push_v1_s": round(first_s, 3), "push_whole_s": round(whole_s, 3),
                "push_xor_s": round(xor_s, 3), "publish_s": round(publish_s, 3),
                "push_xor_vs_publish_time": round(xor_s / publish_s, 2)}
            print(json.dumps(result), flush=True)
            claims = [("parent", xor_up / delta_bytes, PARENT_LIMIT)]
            if frac <= CONCENTRATED_MAX_FRACTION:
                limit = max(CONCENTRATED_LIMIT, 2 * changed_share)
                claims.append(("concentrated", whole_up / v1_up, limit))
            for claim, value, limit in claims:
                ok = value <= limit
                print(json.dumps({"bench": "volume_dedup", "kind": "claim", "claim": claim,
                                  "element_density": d, "tensor_fraction": frac,
                                  "value": round(value, 4), "limit": round(limit, 4),
                                  "ok": ok}), flush=True)
                if not ok:
                    failed.append(f"{claim} at density {d}, tensor fraction {frac}: "
                                  f"{value:.4f} > {limit:.4f}")
            if frac >= 1:
                print(f"volume_dedup_bench: density {d} scattered over every tensor: a plain "
                      f"push re-uploads {whole_up / v1_up:.1%} of v1 (each changed tensor piece "
                      f"whole); such steps need push --parent, which uploaded "
                      f"{xor_up / v1_up:.2%}", file=sys.stderr, flush=True)
            for p in (store, store_x, t(name), t("delta-" + name)):
                shutil.rmtree(p)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failed:
        sys.exit("volume_dedup_bench: claims that do not hold:\n  " + "\n  ".join(failed))
    print("volume_dedup_bench: all claims hold", file=sys.stderr)


if __name__ == "__main__":
    main()
