"""Multi-node sync benchmark: a group of N nodes (one sidecar + one engine of TP ranks each, all
on this machine, decisions in a real etcd) syncs a generated model, next to a single node (same
TP, no group) syncing the same delta in the same run. JSON lines.

  python3 bench/group_bench.py --deltakv build/sidecar/deltakv \
      --engine build/shim/deltakv-demo-engine [--size-mib 256] [--density 0.01] [--nodes 2] \
      [--tp 2] [--steps 2] [--split] [--frame-mib 1] [--dir $TMPDIR] [--etcd /usr/bin/etcd]

Replicas (default): every node's engine holds the whole model at TP `--tp`, and the single node
baseline is one such engine. --split: the nodes together serve ONE model of TP nodes x tp
(node i holds global ranks i*tp .. i*tp+tp-1, described by a topology file), and the single-node
baseline is one engine at TP nodes x tp; then each node fetches only the frames its ranks hold
(publish with --frame-mib, default 1, so that large row-sharded tensors span several frames).

Per step (v1 -> v2 -> ...), one line for the single node and one for the group:
- request_to_live_ms: POST /v1/sync to the record's `live` (the group: the slowest node; its
  record finishes once every node's pause times are in);
- pause_ms: the engine pause (the group: the longest node pause);
- bytes_fetched per node and delta_bytes, the size of the whole delta's objects
  (bytes_fetched_vs_delta: the largest node's share; 1.0 for replicas, below 1 for --split);
- group_ms: time spent waiting for the group's decision (slowest node);
- resume_skew_ms: max - min of the nodes' resume times (wall clocks: one clock here).
The group line carries the single node's figures and the ratios request_to_live_vs_single and
pause_vs_single. On one machine the nodes share the CPUs, so the group's figures include that
contention. A missing figure stops the bench with an error, never a 0.
"""
import argparse, concurrent.futures, json, os, platform, shutil, signal, socket, subprocess
import sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Bench  # noqa: E402

_bench = Bench("group_bench")
http, figure = _bench.http, _bench.figure
TOKEN = "bench-token"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_file(path, proc, what, timeout=300):
    deadline = time.time() + timeout
    while not os.path.exists(path) or not open(path).read().strip():
        if proc.poll() is not None or time.time() > deadline:
            sys.exit(f"group_bench: {what} did not start")
        time.sleep(0.02)
    return int(open(path).read())


def non_negative(obj, key, what):
    v = obj.get(key) if isinstance(obj, dict) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        sys.exit(f"group_bench: {what} has no {key!r} >= 0: {json.dumps(obj)[:500]}")
    return v


class Node:
    def __init__(self, a, t, name, tp, group_args, err, engine_args=()):
        self.name = name
        shm = f"dkv-gbench-{os.getpid()}-{name}"
        self.procs = []
        port_file = t(f"{name}.port")
        sc = subprocess.Popen([a.deltakv, "sidecar", "--listen", "127.0.0.1:0", "--port-file",
                               port_file, "--token-file", t("token"), "--shm-name", shm,
                               *group_args], stderr=err)
        self.procs.append(sc)
        self.url = f"http://127.0.0.1:{wait_file(port_file, sc, 'sidecar ' + name)}"
        ports = t(f"ports-{name}")
        os.makedirs(ports)
        eng = subprocess.Popen([a.engine, "--checkpoint", t("v1"), "--tp", str(tp), "--shm", shm,
                                "--port-dir", ports, *engine_args], stderr=err)
        self.procs.append(eng)
        for r in range(tp):
            wait_file(os.path.join(ports, f"rank{r}.port"), eng, "engine " + name)
        while len(http("GET", self.url + "/v1/status")["ranks"]) < tp:
            time.sleep(0.05)
        # Verified first, as a production start with --verify-checkpoint: no timed sync pays
        # the one-time early check (a split node checks its part of split tensors).
        job = http("POST", self.url + "/v1/verify", {"checkpoint": t("v1")}, TOKEN)
        rec = _bench.wait_job(self.url, job["id"], ("verified", "diverged", "failed"))
        if rec["state"] != "verified":
            sys.exit(f"group_bench: node {name}: startup verify ended {rec['state']}: "
                     f"{rec.get('error')}")
        self.shm = shm

    def sync(self, version, delta):
        t0 = time.time()
        sid = http("POST", self.url + "/v1/sync", {"version": version, "delta": delta}, TOKEN)["id"]
        rec = _bench.wait_job(self.url, sid, ("live", "aborted", "diverged"))
        if rec["state"] != "live":
            sys.exit(f"group_bench: node {self.name}: sync ended {rec['state']}: {rec.get('error')}")
        return (time.time() - t0) * 1000, rec

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in os.listdir("/dev/shm"):
            if f.startswith(self.shm):
                os.remove(os.path.join("/dev/shm", f))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--density", type=float, default=0.01)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--split", action="store_true",
                    help="the nodes serve one model of TP nodes x tp instead of replicas")
    ap.add_argument("--frame-mib", type=int, default=1)
    ap.add_argument("--etcd", default="/usr/bin/etcd")
    ap.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"))
    ap.add_argument("--log", default="", help="append the processes' stderr here")
    a = ap.parse_args()
    if not os.path.exists(a.etcd):
        sys.exit(f"group_bench: needs etcd at {a.etcd} (Debian: etcd-server)")
    err = open(a.log, "a") if a.log else subprocess.DEVNULL
    root = tempfile.mkdtemp(prefix="deltakv-groupbench-", dir=a.dir)
    t = lambda *p: os.path.join(root, *p)
    k = lambda *args: json.loads(subprocess.run([a.deltakv, *args, "--json"], check=True,
                                                capture_output=True, text=True).stdout)
    print(json.dumps({"bench": "group_bench", "kind": "environment", "cpus": os.cpu_count(),
                      "machine": platform.machine(), "kernel": platform.release(),
                      "size_mib": a.size_mib, "density": a.density, "nodes": a.nodes,
                      "tp": a.tp, "split": a.split}), flush=True)
    etcd = None
    nodes = []
    try:
        k("checkpoint", "generate", "--out", t("v1"), "--size-mib", str(a.size_mib), "--files", "4")
        k("checkpoint", "manifest", t("v1"))
        chain = []
        for i in range(a.steps):
            parent, new = f"v{i + 1}", f"v{i + 2}"
            k("checkpoint", "mutate", "--parent", t(parent), "--out", t(new), "--density",
              str(a.density), "--seed", str(i + 2))
            k("publish", "--parent", t(parent), "--new", t(new), "--out", t("d-" + new),
              "--frame-mib", str(a.frame_mib))
            manifest = json.load(open(t("d-" + new, "manifest.json")))
            size = sum(os.path.getsize(t("d-" + new, o["name"])) for o in manifest["objects"])
            chain.append((new, t("d-" + new), size))
        open(t("token"), "w").write(TOKEN + "\n")
        url = f"http://127.0.0.1:{free_port()}"
        peer = f"http://127.0.0.1:{free_port()}"
        etcd = subprocess.Popen(
            [a.etcd, "--data-dir", t("etcd"), "--listen-client-urls", url,
             "--advertise-client-urls", url, "--listen-peer-urls", peer,
             "--initial-advertise-peer-urls", peer, "--initial-cluster", "default=" + peer],
            stdout=subprocess.DEVNULL, stderr=err)

        # The single node first, alone on the machine.
        world = a.nodes * a.tp
        single = Node(a, t, "single", world if a.split else a.tp, [], err)
        nodes.append(single)
        baseline = {}
        for new, delta, size in chain:
            wall, rec = single.sync(new, delta)
            baseline[new] = {"request_to_live_ms": wall,
                             "pause_ms": figure(rec.get("phase_ms"), "pause", "single sync"),
                             "bytes_fetched": figure(rec, "bytes_fetched", "single sync")}
        single.stop()
        nodes.remove(single)

        names = [f"n{i}" for i in range(a.nodes)]
        group_args = ["--group", f"bench{os.getpid()}", "--group-members", ",".join(names),
                      "--etcd-endpoints", url]
        engine_args = {n: () for n in names}
        if a.split:
            topo = {"format": "deltakv.topology/1", "world": world, "tp": world, "pp": 1,
                    "nodes": {n: list(range(i * a.tp, (i + 1) * a.tp))
                              for i, n in enumerate(names)}}
            open(t("topology.json"), "w").write(json.dumps(topo))
            group_args += ["--topology", t("topology.json")]
            engine_args = {n: ("--tp-world", str(world), "--first-rank", str(i * a.tp))
                           for i, n in enumerate(names)}
        for n in names:
            nodes.append(Node(a, t, n, a.tp, [*group_args, "--node", n], err, engine_args[n]))
        for step, (new, delta, size) in enumerate(chain):
            with concurrent.futures.ThreadPoolExecutor(len(nodes)) as pool:
                results = list(pool.map(lambda nd: nd.sync(new, delta), nodes))
            walls = [w for w, _ in results]
            recs = [r for _, r in results]
            pauses = [figure(r.get("phase_ms"), "pause", f"node {nd.name} sync")
                      for nd, r in zip(nodes, recs)]
            fetched = {nd.name: figure(r, "bytes_fetched", f"node {nd.name} sync")
                       for nd, r in zip(nodes, recs)}
            group_ms = max(figure(r.get("phase_ms"), "group", f"node {nd.name} sync")
                           for nd, r in zip(nodes, recs))
            views = [r.get("group", {}).get("view") for r in recs]
            for nd, v in zip(nodes, views):
                if not isinstance(v, dict) or v.get("missing"):
                    sys.exit(f"group_bench: node {nd.name} has no complete group view: "
                             f"{json.dumps(v)[:500]}")
            skew = non_negative(views[0], "resume_skew_ms", "group view")
            b = baseline[new]
            line = {"bench": "group_bench", "step": step + 1, "version": new,
                    "nodes": a.nodes, "tp": a.tp, "split": a.split,
                    "single_tp": world if a.split else a.tp,
                    "size_mib": a.size_mib, "density": a.density,
                    "delta_bytes": size,
                    "single_request_to_live_ms": round(b["request_to_live_ms"], 2),
                    "single_pause_ms": round(b["pause_ms"], 3),
                    "single_bytes_fetched": b["bytes_fetched"],
                    "request_to_live_ms": round(max(walls), 2),
                    "pause_ms": round(max(pauses), 3),
                    "node_pause_ms": {nd.name: round(p, 3) for nd, p in zip(nodes, pauses)},
                    "group_ms": round(group_ms, 2),
                    "resume_skew_ms": round(skew, 3),
                    "bytes_fetched": fetched,
                    "bytes_fetched_vs_delta": round(max(fetched.values()) / size, 3),
                    "request_to_live_vs_single": round(max(walls) / b["request_to_live_ms"], 3),
                    "pause_vs_single": round(max(pauses) / b["pause_ms"], 3)}
            print(json.dumps(line), flush=True)
    finally:
        for nd in nodes:
            nd.stop()
        if etcd is not None and etcd.poll() is None:
            etcd.kill()
            etcd.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
