"""How long the layout analysis takes (prints figures; no targets asserted here).

    python benchmarks/layout_bench.py [RUNS]      # from the repository root

Target: a 1024-rank P2P matrix analysed (islands, rings, HSDP/TP×DP meshes) in well under a second.
Figures per case: median and min wall time and median CPU time of the process over RUNS runs (default
5). Matrices are synthetic (tests/layouts/synth.py): 8 ranks per node, intra-node 370 GB/s (NVLink4
ring busbw, DESIGN.md §5), inter-node 48 GB/s (NDR 400 Gb/s), ±10% noise. The machine is shared:
the load average is printed with the figures.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(fn, runs: int) -> tuple[float, float, float]:
    wall, cpu = [], []
    for _ in range(runs):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), min(wall), statistics.median(cpu)


def irregular(n: int, seed: int) -> list[list[float | None]]:
    """No structure at all (each link uniform in 1..50 GB/s), so the exact ring search has to work."""
    rnd = random.Random(seed)
    out: list[list[float | None]] = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            out[i][j] = out[j][i] = rnd.uniform(1.0, 50.0)
    return out


def main() -> None:
    sys.path.insert(0, str(REPO))
    from benchmarks._common import machine
    from ddpdoctor.core.report import CheckResult, Report
    from ddpdoctor.model.placement.layouts import analyze, check_layout
    from ddpdoctor.recommend.layouts import recommend
    from tests.layouts.synth import matrix, ranks_for

    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    print(f"layout analysis · {machine()} · load average {os.getloadavg()[0]:.1f} · {runs} run(s) per case")
    rows = []

    def case(name: str, fn) -> None:
        med, best, cpu = timed(fn, runs)
        rows.append((name, med, best, cpu))
        print(f"  {name:<58} median {med * 1e3:8.1f} ms  min {best * 1e3:8.1f} ms  cpu {cpu * 1e3:8.1f} ms")

    ranks = ranks_for(128, 8)
    full = matrix(ranks, intra=370.0, inter=48.0, noise=0.1)
    case("1024 ranks, full matrix: analyze", lambda: analyze(full, ranks))
    cl = analyze(full, ranks)
    case("1024 ranks: check_layout dp=128,tp=8", lambda: check_layout(cl, "dp=128,tp=8"))
    case("1024 ranks: check_layout tp=8,dp=128 (TP across nodes)", lambda: check_layout(cl, "tp=8,dp=128"))
    report = Report(
        ranks=ranks,
        checks=[CheckResult(code="P2P001", title="p2p", data={"matrix": {"unit": "GB/s", "values": full}})],
    )
    case("1024 ranks: recommend(report, 'pp=4,dp=32,tp=8')", lambda: recommend(report, "pp=4,dp=32,tp=8"))

    rails = [row[:] for row in full]
    for i in range(1024):
        for j in range(1024):
            if (
                ranks[i]["node_rank"] != ranks[j]["node_rank"]
                and ranks[i]["local_rank"] != ranks[j]["local_rank"]
            ):
                rails[i][j] = None
    case("1024 ranks, rails plan (13% of pairs measured): analyze", lambda: analyze(rails, ranks))

    cyclic = ranks_for(128, 8, interleave=True)
    inter = matrix(cyclic, intra=370.0, inter=48.0, noise=0.1, seed=1)
    case("1024 ranks, cyclic rank order: analyze", lambda: analyze(inter, cyclic))
    c2 = analyze(inter, cyclic)
    print(
        f"    cyclic: rank-order ring {c2.ddp.default.crossings} crossings, best {c2.ddp.best.crossings}; "
        f"reorder={c2.ddp.reorder}"
    )

    twelve = ranks_for(1, 12)
    irr = irregular(12, seed=0)
    case("12 ranks, irregular links: analyze (exact ring search)", lambda: analyze(irr, twelve))
    best = analyze(irr, twelve).ddp.best
    print(
        f"    12 ranks: exact={best.exact}, bottleneck {best.bottleneck_GBps:.3g} GB/s of {best.bound_GBps:.3g} possible"
    )
    worst = max(rows[:1] + rows[4:6], key=lambda r: r[1])
    print(f"slowest 1024-rank analyze: {worst[0]}: median {worst[1]:.3f} s (target: well under 1 s)")


if __name__ == "__main__":
    main()
