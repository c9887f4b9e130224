"""Wall time of the default `ddpdoctor check` on 2, 4 and 6 namespace nodes (1 rank each, gloo).

    python benchmarks/nodes_scaling.py [--nodes 2 4 6] [--runs 1]

Needs root and network namespaces (tests/support/testbed.py). Every node runs `ddpdoctor check` at once,
node 0 hosting the rendezvous, as on real nodes; the figure is from the first launch to the last exit.
Prints each size's wall time, where the in-run time went (per check, from node 0's report), how it grows
per added node, and whether the 2-node default meets its target (≤ 30 s).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import machine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.testbed import NetBed, netns_available

TARGET_2_NODES_S = 30.0


def one_run(nodes: int) -> tuple[float, dict, dict[str, float]]:
    with NetBed(nodes) as bed, tempfile.TemporaryDirectory() as d:
        t0 = time.time()
        results = bed.run_check([], d, timeout=400)
        t_end = time.time()
        if any(rc not in (0, 1) for rc, _ in results):
            raise SystemExit(f"{nodes} nodes: exit codes {[rc for rc, _ in results]}\n{results[0][1][-2000:]}")
        rep = json.loads((Path(d) / "r0.json").read_text())
    return t_end - t0, rep, phases(rep, t0, t_end)


def phases(rep: dict, t0: float, t_end: float) -> dict[str, float]:
    """Where the wall time went, from the timestamps in node 0's report."""
    run = rep["run"]
    workers_start = min(r["proc_start"] for r in rep["ranks"])
    checks_start = rep["created"] - run["duration_s"]
    return {
        "CLI start": run["launch_t0"] - t0,
        "torchrun + rendezvous": workers_start - run["launch_t0"],
        "workers' torch + group": checks_start - workers_start,
        "checks": run["duration_s"],
        "wind-down + report": t_end - rep["created"],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[2, 4, 6])
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    ok, why = netns_available()
    if not ok:
        print(f"skipped: {why}")
        return 0
    print(f"machine: {machine()}")
    print("default `ddpdoctor check` (quick suite, gloo), 1 rank per namespace node, "
          f"{args.runs} run(s) per size; shared machine, figures are noisy")
    walls: dict[int, float] = {}
    for n in args.nodes:
        samples, rep, parts = [], {}, {}
        for _ in range(args.runs):
            wall, rep, parts = one_run(n)
            samples.append(wall)
        walls[n] = statistics.median(samples)
        per_check = ", ".join(f"{c['code']} {c['duration_s']:.1f}" for c in rep["checks"] if c["duration_s"] >= 0.05)
        print(f"{n} nodes: {walls[n]:5.1f} s wall (median of {len(samples)}; min {min(samples):.1f}, "
              f"max {max(samples):.1f})")
        print("    last run: " + ", ".join(f"{k} {v:.1f} s" for k, v in parts.items()))
        print(f"    checks: {per_check} (s)")
    sizes = sorted(walls)
    for a, b in itertools.pairwise(sizes):
        print(f"  {a} -> {b} nodes: +{walls[b] - walls[a]:.1f} s ({(walls[b] - walls[a]) / (b - a):.1f} s per added node)")
    if 2 in walls:
        met = walls[2] <= TARGET_2_NODES_S
        print(f"2-node default: {walls[2]:.1f} s; target ≤ {TARGET_2_NODES_S:g} s: {'met' if met else 'MISSED'}")
        return 0 if met else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
