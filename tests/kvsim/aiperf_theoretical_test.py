"""Differential test of the theoretical prefix-cache hit rate against an independent
implementation: aiperf's compute_shared_prefix_cache_metrics (PyPI aiperf), run on the same
Weka traces. aiperf counts a block once any earlier request of the trace had it (arrival
availability, ties in file order), block-weighted; `deltakv trace stats --availability arrival`
must give exactly the same hit and total blocks, per trace and overall. The causal rate
(deltakv's default) can only be lower or equal.

Run: python3 tests/kvsim/aiperf_theoretical_test.py --deltakv build/sidecar/deltakv \
        --python-aiperf ~/.cache/deltakv-venvs/aiperf/bin/python --workdir /tmp/x
Exit 0 when equal, 1 on a difference, 77 (skipped) without aiperf.
"""
import argparse, json, os, shutil, subprocess, sys

# The aiperf half: reads Weka trace files (one object per file), builds one MetricRecord per
# request in aiperf's order key (absolute t, index of the request or subagent entry in the
# trace's list, 0, turn index), and prints {file: [hit_blocks, total_blocks]}.
AIPERF_SIDE = r"""
import json, sys
from aiperf.dataset.loader.weka_metric_prepass import MetricRecord, compute_shared_prefix_cache_metrics
out = {}
for path in sys.argv[1:]:
    t = json.load(open(path))
    recs, seen_root = [], False
    for outer, r in enumerate(t["requests"]):
        if r["type"] == "subagent":
            if not seen_root:
                continue  # no parent turn before it: not replayed
            inner = r["requests"]
            rel = bool(inner) and inner[0]["t"] < r["t"]
            for k, c in enumerate(inner):
                at = c["t"] + (r["t"] if rel else 0)
                recs.append(MetricRecord(sort_key=(at, outer, 0, k), session_id="sa%d" % outer,
                                         k=k, hash_ids=list(c.get("hash_ids", []))))
        else:
            seen_root = True
            recs.append(MetricRecord(sort_key=(r["t"], outer, 0, 0), session_id="root", k=outer,
                                     hash_ids=list(r.get("hash_ids", []))))
    vals = compute_shared_prefix_cache_metrics(recs).values()
    out[path] = [sum(h for h, _ in vals), sum(n for _, n in vals)]
print(json.dumps(out))
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
}


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
    failures = 0
    total = [0, 0, 0, 0]
    print(f"{'file':<28} {'aiperf hit/total':>18} {'deltakv arrival':>18} {'deltakv causal':>16}")
    for p in files:
        mine = json.loads(subprocess.run([a.deltakv, "trace", "stats", p, "--json",
                                          "--availability", "arrival"], check=True,
                                         capture_output=True, text=True).stdout)["theoretical"]
        causal = json.loads(subprocess.run([a.deltakv, "trace", "stats", p, "--json"],
                                           check=True, capture_output=True,
                                           text=True).stdout)["theoretical"]
        hb, tb = ref[p]
        ok = (mine["hit_blocks"], mine["total_blocks"]) == (hb, tb) and \
            causal["hit_blocks"] <= mine["hit_blocks"]
        if os.path.basename(p) == "overlap.json":  # the one case where the two must differ
            ok = ok and causal["hit_blocks"] == 4 and mine["hit_blocks"] == 7
        failures += not ok
        total = [total[0] + hb, total[1] + tb, total[2] + mine["hit_blocks"],
                 total[3] + causal["hit_blocks"]]
        print(f"{os.path.basename(p):<28} {hb:>8}/{tb:<9} {mine['hit_blocks']:>8}/"
              f"{mine['total_blocks']:<9} {causal['hit_blocks']:>10}  {'ok' if ok else 'DIFFERENT'}")
    print(f"all: aiperf {total[0]}/{total[1]} = {total[0] / total[1]:.4f}, deltakv arrival "
          f"{total[2]}/{total[1]}, causal {total[3]}/{total[1]} = {total[3] / total[1]:.4f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
