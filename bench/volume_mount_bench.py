"""Sequential read throughput of a mounted volume version (`deltakv volume mount`) with a cold
and a warm chunk cache, against reading the same files from local disk after
`deltakv volume pull` (the baseline, measured in the same run). JSON lines.

  python3 bench/volume_mount_bench.py --deltakv build/sidecar/deltakv [--size-mib 1024]
      [--files 4] [--readahead 4] [--repeat 3] [--dir $TMPDIR]

Workload `seq_read`: a generated safetensors checkpoint (`deltakv checkpoint generate`) is
pushed to a directory store in the bench directory; every file is then read once from start
to end with 1 MiB reads:
- pulled: the files `deltakv volume pull` wrote (they are in the page cache right after the
  pull, as they would be for a loader that starts after it); pull_s is the pull itself;
- mount_cold: a fresh mount with an empty cache directory (every chunk is fetched from the
  store, verified, written to the cache);
- mount_warm: a fresh mount over the cache the cold run filled (every chunk is read back from
  the cache and re-verified; the kernel's page cache of the earlier mount is gone).
Each figure is the best of --repeat runs. Ratios are mount GB/s over pulled GB/s, and the
cold mount over pull-then-read (the bytes over the pull's time plus the read's): what a
reader that starts from nothing local waits for either way. A figure
that is missing or not positive stops the bench with an error.
"""
import argparse, json, os, platform, select, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Bench  # noqa: E402

_bench = Bench("volume_mount_bench")
figure = _bench.figure


def build_type(deltakv):
    d = os.path.dirname(os.path.abspath(deltakv))
    while d != "/":
        cache = os.path.join(d, "CMakeCache.txt")
        if os.path.exists(cache):
            for line in open(cache):
                if line.startswith("CMAKE_BUILD_TYPE:"):
                    return line.split("=", 1)[1].strip()
            return ""
        d = os.path.dirname(d)
    return "unknown"


def read_all(root):
    """Reads every file under root sequentially; returns (bytes, seconds)."""
    paths = sorted(os.path.join(d, n) for d, _, names in os.walk(root) for n in names)
    total, start = 0, time.perf_counter()
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                total += len(b)
    return total, time.perf_counter() - start


class Mount:
    def __init__(self, deltakv, store, ref, mnt, cache, readahead):
        os.makedirs(mnt, exist_ok=True)
        self.mnt = mnt
        self.proc = subprocess.Popen(
            [deltakv, "volume", "--store", store, "mount", ref, mnt, "--json", "--cache-dir",
             cache, "--readahead", readahead], stdout=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 120)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            sys.exit(f"volume_mount_bench: mount of {ref} did not become ready")
        self.info = json.loads(line)

    def close(self):
        if self.proc.poll() is None:
            subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                subprocess.run(["fusermount3", "-uz", self.mnt], capture_output=True)
        self.proc.stdout.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--deltakv", required=True)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--readahead", default="4")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--allow-debug", action="store_true")
    a = ap.parse_args()
    bt = build_type(a.deltakv)
    if bt == "Debug" and not a.allow_debug:
        sys.exit("volume_mount_bench: refusing to time a Debug build (pass --allow-debug)")
    if shutil.which("fusermount3") is None or not os.path.exists("/dev/fuse"):
        sys.exit("volume_mount_bench: needs FUSE (/dev/fuse and fusermount3)")
    root = tempfile.mkdtemp(prefix="deltakv-mountbench-", dir=a.dir)
    t = lambda *p: os.path.join(root, *p)
    k = lambda *args: json.loads(subprocess.run([a.deltakv, *args, "--json"], check=True,
                                                capture_output=True, text=True).stdout)
    emit = lambda obj: print(json.dumps({"bench": "volume_mount_bench", **obj}), flush=True)
    emit({"kind": "environment", "cpus": os.cpu_count(), "machine": platform.machine(),
          "kernel": platform.release(), "build_type": bt, "size_mib": a.size_mib,
          "files": a.files, "readahead": a.readahead, "repeat": a.repeat})
    mounts = []
    try:
        k("checkpoint", "generate", "--out", t("src"), "--size-mib", str(a.size_mib),
          "--files", str(a.files))
        store = t("store")
        pushed = k("volume", "--store", store, "push", t("src"), "bench/model", "-q")
        ref = pushed["ref"]
        results = {}

        best = None
        for i in range(a.repeat):
            out = t(f"pulled{i}")
            start = time.perf_counter()
            k("volume", "--store", store, "pull", ref, out, "-q")
            pull_s = time.perf_counter() - start
            n, s = read_all(out)
            if best is None or s < best[1]:
                best = (n, s, pull_s)
            shutil.rmtree(out)
        results["pulled"] = {"bytes": best[0], "seconds": best[1], "pull_s": best[2]}

        for mode in ["mount_cold", "mount_warm"]:
            best = None
            for i in range(a.repeat):
                cache = t(f"cache{i}")
                if mode == "mount_cold":
                    shutil.rmtree(cache, ignore_errors=True)
                m = Mount(a.deltakv, store, ref, t(f"mnt-{mode}-{i}"), cache, a.readahead)
                mounts.append(m)
                n, s = read_all(m.mnt)
                m.close()
                if best is None or s < best[1]:
                    best = (n, s, m.info["mount_ms"])
            results[mode] = {"bytes": best[0], "seconds": best[1], "mount_ms": best[2]}

        for mode, r in results.items():
            if r["bytes"] != pushed["bytes"]:
                sys.exit(f"volume_mount_bench: {mode} read {r['bytes']} bytes, "
                         f"the version has {pushed['bytes']}")
            r["gbps"] = r["bytes"] / r["seconds"] / 1e9
            figure(r, "gbps", mode)
            emit({"kind": "result", "workload": "seq_read", "mode": mode, **r})
        base = figure(results["pulled"], "gbps", "pulled")
        pulled = results["pulled"]
        pull_then_read = pulled["bytes"] / (figure(pulled, "pull_s", "pulled") + pulled["seconds"]) / 1e9
        cold = figure(results["mount_cold"], "gbps", "mount_cold")
        emit({"kind": "ratio", "workload": "seq_read",
              "mount_cold_vs_pulled": cold / base,
              "mount_warm_vs_pulled": figure(results["mount_warm"], "gbps", "mount_warm") / base,
              "pull_then_read_gbps": pull_then_read,
              "mount_cold_vs_pull_then_read": cold / pull_then_read})
    finally:
        for m in mounts:
            m.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
