#!/usr/bin/env python3
"""volume_s3_bench: `deltakv volume push` and `pull` of a generated checkpoint directory to and
from an S3-API server, against `aws s3 cp --recursive` of the same files to the same server in
the same run (the baseline). Prints the environment, then one JSON line per result, then the
ratios. The server is moto's S3 server on loopback (tests/store/s3_helper.py, from the venv that
scripts/setup-deps.sh makes): the figures measure the client and a Python server on one host,
not S3.

  python3 bench/volume_s3_bench.py --deltakv build/sidecar/deltakv [--size-mib 256] [--runs 2]

Each push goes to a fresh prefix (so every chunk is uploaded); each pull to a fresh directory.
The best of --runs is reported. A figure that is missing or not positive stops the bench.
"""
import argparse, json, os, platform, shutil, signal, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Bench  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.environ.get("DELTAKV_MOTO_VENV", os.path.expanduser("~/.cache/deltakv-venvs/moto"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    bench = Bench("volume_s3_bench")
    if not os.path.exists(os.path.join(VENV, "bin", "aws")):
        sys.exit(f"volume_s3_bench: no moto venv at {VENV} (scripts/setup-deps.sh makes it)")
    cache = os.path.join(os.path.dirname(os.path.abspath(args.deltakv)), "..", "CMakeCache.txt")
    build_type = "unknown"
    if os.path.exists(cache):
        for line in open(cache):
            if line.startswith("CMAKE_BUILD_TYPE:"):
                build_type = line.split("=", 1)[1].strip()
    if build_type.lower() == "debug":
        print("volume_s3_bench: WARNING: a Debug build of deltakv; figures are not meaningful",
              file=sys.stderr)

    tmp = tempfile.mkdtemp(prefix="deltakv-s3-bench-")
    ready = os.path.join(tmp, "ready.json")
    server = subprocess.Popen([os.path.join(VENV, "bin", "python"),
                               os.path.join(ROOT, "tests", "store", "s3_helper.py"), "moto",
                               "--ready", ready])
    try:
        deadline = time.time() + 60
        while not os.path.exists(ready):
            if server.poll() is not None or time.time() > deadline:
                sys.exit("volume_s3_bench: moto server did not start")
            time.sleep(0.05)
        with open(ready) as f:
            endpoint = "http://127.0.0.1:%d" % json.load(f)["port"]
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("AWS_") and "proxy" not in k.lower()}
        env.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                   AWS_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint,
                   AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)

        def run(cmd):
            t = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, env=env)
            dt = time.perf_counter() - t
            if p.returncode != 0:
                sys.exit(f"volume_s3_bench: {' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
            return p, dt

        aws = [os.path.join(VENV, "bin", "aws"), "--endpoint-url", endpoint]
        run(aws + ["s3", "mb", "s3://bench"])
        ckpt = os.path.join(tmp, "ckpt")
        run([args.deltakv, "checkpoint", "generate", "--out", ckpt, "--size-mib",
             str(args.size_mib)])
        nbytes = sum(os.path.getsize(os.path.join(d, f))
                     for d, _, fs in os.walk(ckpt) for f in fs)
        print(json.dumps({"bench": "volume_s3_bench", "kind": "environment",
                          "cpus": os.cpu_count(), "machine": platform.machine(),
                          "kernel": platform.release(), "build_type": build_type,
                          "server": "moto S3 server on loopback", "bytes": nbytes}), flush=True)

        best = {}

        def record(name, seconds, extra=None):
            gbps = nbytes / seconds / 1e9
            if name not in best or gbps > best[name]["gb_per_s"]:
                best[name] = {"bench": "volume_s3_bench", "kind": "result", "name": name,
                              "bytes": nbytes, "seconds": round(seconds, 3),
                              "gb_per_s": round(gbps, 4), **(extra or {})}

        for i in range(args.runs):
            store = f"s3://bench/deltakv-{i}"
            p, dt = run([args.deltakv, "volume", "--store", store, "push", ckpt, "bench/ckpt",
                         "--tag", "t", "--json", "-q"])
            pushed = json.loads(p.stdout.strip().splitlines()[-1])
            record("deltakv_push", dt, {"chunks_uploaded": pushed["chunks_uploaded"],
                                        "bytes_uploaded": pushed["bytes_uploaded"]})
            out = os.path.join(tmp, f"pull-{i}")
            _, dt = run([args.deltakv, "volume", "--store", store, "pull", "bench/ckpt:t", out,
                         "-q"])
            record("deltakv_pull", dt)
            shutil.rmtree(out)
            _, dt = run(aws + ["s3", "cp", "--recursive", "--quiet", ckpt, f"s3://bench/aws-{i}/"])
            record("aws_s3_cp_upload", dt)
            out = os.path.join(tmp, f"awsget-{i}")
            _, dt = run(aws + ["s3", "cp", "--recursive", "--quiet", f"s3://bench/aws-{i}/", out])
            record("aws_s3_cp_download", dt)
            shutil.rmtree(out)
        for name in ("deltakv_push", "deltakv_pull", "aws_s3_cp_upload", "aws_s3_cp_download"):
            if name not in best:
                sys.exit(f"volume_s3_bench: no figure for {name}")
            bench.figure(best[name], "gb_per_s", name)
            print(json.dumps(best[name]), flush=True)
        for ours, base in (("deltakv_push", "aws_s3_cp_upload"),
                           ("deltakv_pull", "aws_s3_cp_download")):
            print(json.dumps({"bench": "volume_s3_bench", "kind": "ratio",
                              "name": f"{ours}/{base}",
                              "ratio": round(best[ours]["gb_per_s"] / best[base]["gb_per_s"], 3)}),
                  flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
