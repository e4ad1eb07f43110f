"""Differential test of the theoretical prefix-cache hit rate against an independent
implementation: aiperf's compute_shared_prefix_cache_metrics (PyPI aiperf), run on the same
trace files. The aiperf side reads the files with plain json and uses aiperf's own rules where
it has them as functions: _subagent_request_absolute_t (relative vs absolute inner t) and
_dropped_subagent_indices (subagents without a preceding root turn), then the metric itself.

aiperf 0.13 counts a block once any earlier request of the trace had it (arrival availability);
newer aiperf (MetricRecord with an api_time field) once such a request had finished (causal).
The test compares with `deltakv trace stats --json --availability arrival|causal` accordingly:
the same hit and total blocks, per file. Mooncake files (which aiperf gives no theoretical hit)
go through the same function with one record per line and no api_time.

Run: python3 tests/kvsim/aiperf_theoretical_test.py --deltakv build/sidecar/deltakv \
        --python-aiperf ~/.cache/deltakv-venvs/aiperf/bin/python --workdir /tmp/x
Exit 0 when equal, 1 on a difference, 77 (skipped) without aiperf.
"""
import argparse, json, os, shutil, subprocess, sys

# The aiperf half: prints {"causal": bool, "files": {path: [hit_blocks, total_blocks]}}.
AIPERF_SIDE = r"""
import dataclasses, json, sys
from types import SimpleNamespace as NS
from aiperf.dataset.loader.weka_metric_prepass import MetricRecord, compute_shared_prefix_cache_metrics
from aiperf.dataset.loader.weka_trace import _dropped_subagent_indices, _subagent_request_absolute_t
causal = "api_time" in {f.name for f in dataclasses.fields(MetricRecord)}

def record(key, sid, k, r):
    extra = {"api_time": float(r.get("api_time") or 0.0)} if causal else {}
    return MetricRecord(sort_key=key, session_id=sid, k=k, hash_ids=list(r.get("hash_ids", [])),
                        **extra)

def weka(t):
    recs, normals, subagents = [], [], []
    for outer, r in enumerate(t["requests"]):
        (subagents if r["type"] == "subagent" else normals).append((outer, r))
    for k, (outer, r) in enumerate(normals):
        recs.append(record((r["t"], outer, 0, 0), "root", k, r))
    dropped = _dropped_subagent_indices(NS(normals=normals, subagents=subagents))
    for i, (outer, e) in enumerate(subagents):
        if i in dropped:
            continue
        for k, c in enumerate(e["requests"]):
            at = _subagent_request_absolute_t(NS(t=e["t"]), NS(t=c["t"]))
            recs.append(record((at, outer, 0, k), "sa%d" % outer, k, c))
    return recs

def mooncake(lines):
    rows = [json.loads(l) for l in lines if l.strip()]
    return [record((r["timestamp"] / 1000.0, i, 0, 0), "r%d" % i, 0, r) for i, r in enumerate(rows)]

out = {}
for path in sys.argv[1:]:
    text = open(path).read()
    recs = mooncake(text.splitlines()) if path.endswith(".jsonl") else weka(json.loads(text))
    vals = compute_shared_prefix_cache_metrics(recs).values()
    out[path] = [sum(h for h, _ in vals), sum(n for _, n in vals)]
print(json.dumps({"causal": causal, "files": out}))
"""


def trace(tid, requests):
    return {"id": tid, "block_size": 64, "hash_id_scope": "local", "requests": requests}


def req(t, ids, api=None, out=10):
    r = {"t": t, "type": "n", "in": 64 * len(ids) + 17, "out": out, "hash_ids": ids}
    if api is not None:
        r["api_time"] = api
    return r


HAND_WRITTEN = {
    # Prefix growth over turns.
    "growth": trace("growth", [req(0, [1, 2], 1), req(5, [1, 2, 3], 1), req(9, [1, 2, 3, 4], 1)]),
    # A turn that keeps less than the previous context, and one that diverges in the middle.
    "reset": trace("reset", [req(0, [1, 2, 3, 4], 1), req(3, [1, 2, 7], 1), req(6, [1, 9, 3], 1)]),
    # The second request arrives while the first still runs: a hit by arrival, not causally.
    "overlap": trace("overlap", [req(0, [1, 2, 3], 10), req(2, [1, 2, 3, 4], 1),
                                 req(20, [1, 2, 3, 4, 5], 1)]),
    # No api_time anywhere, and requests at the same t.
    "ties": trace("ties", [req(0, [1, 2]), req(0, [1, 2, 3]), req(1, [1, 2, 3])]),
    # Subagents: relative inner t (earlier than the spawn) and absolute inner t; one shares the
    # root's ids (one scope), one has its own prefix; one comes before any root turn (dropped).
    "subagents": trace("subagents", [
        {"t": 0, "type": "subagent", "agent_id": "early", "requests": [req(0, [1, 2])]},
        req(0, [1, 2], 2),
        {"t": 3, "type": "subagent", "agent_id": "rel",
         "requests": [req(0, [1, 2, 50], 1), req(2, [1, 2, 50, 51], 1)]},
        req(10, [1, 2, 3], 1),
        {"t": 12, "type": "subagent", "agent_id": "abs",
         "requests": [req(13, [80, 81], 1), req(15, [80, 81, 82], 1)]},
        req(20, [1, 2, 3, 4], 1),
    ]),
    # A subagent whose inner times are partly relative (before the spawn) and partly absolute;
    # one before any root turn in the file but later in time (dropped); a tie at t = 30
    # between a subagent turn and the root turn after it (the subagent comes first).
    "subagent_mixed": trace("subagent_mixed", [
        {"t": 40, "type": "subagent", "agent_id": "late", "requests": [req(40, [1, 2, 3])]},
        req(0, [1], 0),
        {"t": 10, "type": "subagent", "agent_id": "mix", "duration_ms": 20000,
         "requests": [req(1, [1, 2], 0), req(12, [1, 2, 3], 0), req(30, [1, 2, 3, 4])]},
        req(30, [1, 2, 3, 4, 5]),
        req(31, [1, 2, 3, 4, 5, 6], 2),
    ]),
}

# Mooncake rows: ids shared across rows of one file, partial tails, equal timestamps.
MOONCAKE = [
    {"timestamp": 0, "input_length": 1500, "output_length": 5, "hash_ids": [0, 1, 2]},
    {"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [0, 1]},
    {"timestamp": 250.5, "input_length": 2100, "output_length": 5, "hash_ids": [0, 1, 3, 4, 5]},
    {"timestamp": 900, "input_length": 600, "output_length": 5, "hash_ids": [7, 8]},
    {"timestamp": 1200, "input_length": 3000, "output_length": 5, "hash_ids": [0, 1, 3, 4, 9, 10]},
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deltakv", required=True)
    ap.add_argument("--python-aiperf", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    probe = subprocess.run([a.python_aiperf, "-c",
                            "import aiperf.dataset.loader.weka_metric_prepass"],
                           capture_output=True, text=True) if os.path.exists(a.python_aiperf) else None
    if probe is None or probe.returncode != 0:
        print(f"SKIP: no Python with aiperf at {a.python_aiperf} "
              "(scripts/setup-deps.sh installs it; DELTAKV_AIPERF_VENV overrides the path)")
        return 77
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    files = []
    for name, t in HAND_WRITTEN.items():
        p = os.path.join(a.workdir, name + ".json")
        with open(p, "w") as f:
            json.dump(t, f)
        files.append(p)
    p = os.path.join(a.workdir, "mooncake.jsonl")
    with open(p, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in MOONCAKE))
    files.append(p)
    syn = os.path.join(a.workdir, "synthetic")
    subprocess.run([a.deltakv, "trace", "generate", "--out", syn, "--traces", "12", "--seed", "3",
                    "--scale", "0.1", "--subagent-fraction", "0.5"], check=True,
                   capture_output=True)
    files += sorted(os.path.join(syn, f) for f in os.listdir(syn))
    script = os.path.join(a.workdir, "aiperf_side.py")
    with open(script, "w") as f:
        f.write(AIPERF_SIDE)
    ref = json.loads(subprocess.run([a.python_aiperf, script, *files], check=True,
                                    capture_output=True, text=True).stdout)
    mode = "causal" if ref["causal"] else "arrival"
    print(f"aiperf availability: {mode}")
    failures = 0
    total = [0, 0, 0, 0]
    print(f"{'file':<28} {'aiperf hit/total':>18} {'deltakv ' + mode:>18} {'deltakv causal':>16}")
    for p in files:
        def stats(*extra):
            return json.loads(subprocess.run([a.deltakv, "trace", "stats", p, "--json", *extra],
                                             check=True, capture_output=True,
                                             text=True).stdout)["theoretical"]
        mine, causal = stats("--availability", mode), stats()
        hb, tb = ref["files"][p]
        ok = (mine["hit_blocks"], mine["total_blocks"]) == (hb, tb) and \
            causal["hit_blocks"] <= stats("--availability", "arrival")["hit_blocks"]
        if os.path.basename(p) == "overlap.json":  # the one case where the two must differ
            ok = ok and causal["hit_blocks"] == 4 and (mode == "causal" or mine["hit_blocks"] == 7)
        failures += not ok
        total = [total[0] + hb, total[1] + tb, total[2] + mine["hit_blocks"],
                 total[3] + causal["hit_blocks"]]
        print(f"{os.path.basename(p):<28} {hb:>8}/{tb:<9} {mine['hit_blocks']:>8}/"
              f"{mine['total_blocks']:<9} {causal['hit_blocks']:>10}  {'ok' if ok else 'DIFFERENT'}")
    print(f"all: aiperf {total[0]}/{total[1]} = {total[0] / total[1]:.4f}, deltakv {mode} "
          f"{total[2]}/{total[1]}, causal {total[3]}/{total[1]} = {total[3] / total[1]:.4f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
