"""Sealed-volume dedup: what a second checkpoint uploads after the first, with tensor-aware
chunking alone and with parent-XOR chunks (push --parent), next to the XOR delta `deltakv
publish` writes for the same step, measured in the same run. JSON lines.

  python3 bench/volume_dedup_bench.py --deltakv build/sidecar/deltakv [--size-mib 1024]
      [--densities 0.001,0.01] [--tensor-fractions 1,0.1] [--dir $TMPDIR]

For each element density d and tensor fraction f (`deltakv checkpoint mutate --density d/f
--tensor-fraction f`: a fraction f of the tensors changes, d/f of their elements each, so d of
all elements, scattered within those tensors; f = 1 spreads the change over every tensor), the
bench pushes checkpoint v1, then v2 two ways into fresh directory stores: whole (no parent:
only the tensor-aligned chunks that did not change dedup), and with --parent (delta objects
against v1). It
prints the bytes each push uploaded and their ratios to v1's upload and to the size of the
publisher's delta directory (shards + manifest), and the push times against `deltakv publish`
of the same pair. A missing figure stops the bench with an error.
"""
import argparse, json, os, shutil, subprocess, sys, tempfile, time

from benchlib import Bench

B = Bench("volume_dedup_bench")


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--densities", default="0.001,0.01")
    ap.add_argument("--tensor-fractions", default="1,0.1")
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="deltakv-vdedup-", dir=a.dir)
    try:
        t = lambda *p: os.path.join(work, *p)
        run([a.deltakv, "checkpoint", "generate", "--out", t("v1"), "--size-mib", str(a.size_mib)])
        run([a.deltakv, "checkpoint", "manifest", t("v1")])
        cases = [(float(d), float(f)) for f in a.tensor_fractions.split(",")
                 for d in a.densities.split(",")]
        for d, frac in cases:
            if d / frac > 1:
                sys.exit(f"volume_dedup_bench: density {d} cannot fit in {frac} of the tensors")
            name = f"v2-{d}-{frac}"
            shutil.rmtree(t(name), ignore_errors=True)
            run([a.deltakv, "checkpoint", "mutate", "--parent", t("v1"), "--out", t(name),
                 "--density", str(d / frac), "--tensor-fraction", str(frac), "--seed", "7"])
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
            print(json.dumps({
                "bench": "volume_dedup", "size_mib": a.size_mib, "element_density": d, "tensor_fraction": frac,
                "model_bytes": first["bytes"], "v1_uploaded": v1_up,
                "v2_whole_uploaded": whole_up, "v2_xor_uploaded": xor_up,
                "v2_xor_chunks": xor["chunks_xor"], "publish_delta_bytes": delta_bytes,
                "whole_vs_v1": round(whole_up / v1_up, 4),
                "xor_vs_v1": round(xor_up / v1_up, 4),
                "xor_vs_publish_delta": round(xor_up / delta_bytes, 3),
                "push_v1_s": round(first_s, 3), "push_whole_s": round(whole_s, 3),
                "push_xor_s": round(xor_s, 3), "publish_s": round(publish_s, 3),
                "push_xor_vs_publish_time": round(xor_s / publish_s, 2)}), flush=True)
            for p in (store, store_x, t(name), t("delta-" + name)):
                shutil.rmtree(p)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
