"""Run-to-run spread of the figures `ddpdoctor diff` compares, on healthy netns nodes: how the noise
lines in ddpdoctor/model/fleet/diff.py (Thresholds) were chosen.

    sudo python benchmarks/diff_noise.py [--runs 4] [--nodes 3]

Runs the same check (BW001, P2P001 at 4 MiB, one rank per node) RUNS times on unshaped namespace
nodes, then prints, over every pair of runs, the largest relative change seen per kind: busbw small
band (median over sizes < 1 MiB), busbw large band (>= 1 MiB), each inter-host p2p link, its latency,
as a factor (max of new/old and old/new), and the load average while it ran.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the test beds (tests/support)

from support.testbed import NetBed  # noqa: E402

from ddpdoctor.model.fleet.diff import LARGE_FROM_B, _busbw, _links  # noqa: E402
from ddpdoctor.report.io import load_report  # noqa: E402

ARGS = ["--select", "BW001,P2P001", "--max-size", "4M", "--p2p-size", "4M", "--rdzv-timeout", "60"]


def spreads(a, b) -> dict[str, float]:
    out = {"busbw_small": 1.0, "busbw_large": 1.0, "p2p": 1.0, "latency": 1.0}
    ba, bb = _busbw(a), _busbw(b)
    for op in set(ba) & set(bb):
        common = sorted(set(ba[op]) & set(bb[op]))
        for band, sizes in (("busbw_small", [s for s in common if s < LARGE_FROM_B]),
                            ("busbw_large", [s for s in common if s >= LARGE_FROM_B])):
            if sizes:
                r = statistics.median(bb[op][s] / ba[op][s] for s in sizes)
                out[band] = max(out[band], max(r, 1 / r))
    for key, kind in (("matrix", "p2p"), ("latency", "latency")):
        la, lb = _links(a, key), _links(b, key)
        for link in set(la) & set(lb):
            r = lb[link] / la[link]
            out[kind] = max(out[kind], max(r, 1 / r))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--keep", default=None, metavar="DIR", help="keep the reports here (run0/r0.json, ...)")
    a = ap.parse_args()
    reports = []
    with tempfile.TemporaryDirectory() as tmp, NetBed(a.nodes) as bed:
        for i in range(a.runs):
            out = Path(a.keep or tmp) / f"run{i}"
            out.mkdir(parents=True, exist_ok=True)
            results = bed.run_check(ARGS, out, timeout=300, port=29400 + i)
            if results[0][0] != 0:  # a run whose own checks failed is no healthy run to compare
                print(f"run {i + 1}/{a.runs}: exit {results[0][0]}, left out: {results[0][1].strip()[-300:]}")
                continue
            reports.append(load_report(out / "r0.json"))
            print(f"run {i + 1}/{a.runs} done", flush=True)
    worst = {}
    for x, y in itertools.combinations(reports, 2):
        for k, v in spreads(x, y).items():
            worst[k] = max(worst.get(k, 0.0), v)
    import os

    print(f"load average at the end: {os.getloadavg()[0]:.0f}")
    print(f"largest run-to-run change over {a.runs} healthy runs ({a.nodes} netns nodes, 1 rank each, "
          f"{len(reports) * (len(reports) - 1) // 2} pairs):")
    for k, v in worst.items():
        print(f"  {k:12s} x{v:.2f}")
    from ddpdoctor.model.fleet.diff import diff_reports

    flagged = [c.sentence for x, y in itertools.combinations(reports, 2) for c in diff_reports(x, y).changes]
    print(f"changes the default noise lines let through between healthy runs: {len(flagged)}")
    for s in flagged:
        print(f"  {s}")


if __name__ == "__main__":
    main()
