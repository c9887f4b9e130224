"""Bandwidth checks on real links: accuracy against tc-shaped rates, schedule sizes, netns wall time.

    python benchmarks/bandwidth_bench.py [--rates 100,200,500] [--runs 3] [--skip-netns]

1. Schedules (pure): rounds used against the n(n−1)/2 pairs a one-pair-at-a-time plan needs, for the
   full matrix and the rail plan (8 ranks per node).
2. Accuracy (needs root for network namespaces): two namespace nodes, one rank each, node 1's uplink
   shaped with tbf to each rate; P2P001 measures node1 → node0, and the ratio to the shaped rate is
   printed (tbf counts bytes on the wire, so TCP/IP headers cost about 4 % at MTU 1500).
3. Wall time of the default `ddpdoctor check` on 2 namespace nodes × 2 ranks (target ≤ 30 s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import machine
from support.testbed import NetBed, netns_available

from ddpdoctor.model.bandwidth.pair_schedule import make_schedule

WALL_TARGET_S = 30.0


def schedules() -> None:
    print("schedules: rounds used vs pairs (each pair = both directions)")
    print(
        f"  {'ranks':>6} {'nodes×gpus':>11} {'plan':>6} {'rounds':>7} {'pairs':>9} {'n(n-1)/2':>9}  plan time"
    )
    for nodes, gpus in ((1, 4), (2, 2), (1, 8), (8, 8), (64, 8), (512, 8)):
        layout = [[n * gpus + g for g in range(gpus)] for n in range(nodes)]
        n = nodes * gpus
        for plan in ("full", "rails") if nodes > 1 else ("full",):
            if plan == "full" and n > 1024:
                continue
            t0 = time.perf_counter()
            s = make_schedule(layout, plan=plan)
            dt = time.perf_counter() - t0
            print(
                f"  {n:>6} {f'{nodes}×{gpus}':>11} {plan:>6} {len(s.rounds):>7} {s.pairs:>9} {n * (n - 1) // 2:>9}"
                f"  {dt * 1e3:.1f} ms"
            )


def _check_on_bed(bed: NetBed, out: Path, nproc: int, extra: list[str]) -> tuple[float, dict]:
    t0 = time.perf_counter()
    results = bed.run_check(extra, out, timeout=300, nproc=nproc)
    wall = time.perf_counter() - t0
    if any(rc not in (0, 1) for rc, _ in results):
        raise SystemExit("a node failed:\n" + "\n".join(o[-1500:] for _, o in results))
    return wall, json.loads((out / "r0.json").read_text())


def accuracy(rates: list[int], runs: int) -> None:
    print("accuracy: P2P001 node1 → node0 over a tbf-shaped uplink (2 namespace nodes × 1 rank)")
    for rate in rates:
        ratios = []
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as d, NetBed(2) as bed:
                bed.shape(1, rate_mbit=rate, direction="out")
                _, rep = _check_on_bed(bed, Path(d), 1, ["--select", "P2P001"])
            p2p = next(c for c in rep["checks"] if c["code"] == "P2P001")
            ratios.append(p2p["data"]["matrix"]["values"][1][0] / (rate * 1e6 / 8 / 1e9))
        print(
            f"  {rate:>5} Mbit/s: measured/shaped median {statistics.median(ratios):.3f} "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {runs} run(s)); target 0.90–1.05"
        )


def wall_time(runs: int) -> int:
    samples, rep = [], None
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as d, NetBed(2) as bed:
            wall, rep = _check_on_bed(bed, Path(d), 2, [])
        samples.append(wall)
    med = statistics.median(samples)
    print(
        f"default check, 2 namespace nodes × 2 ranks: median {med:.1f} s (min {min(samples):.1f}, "
        f"max {max(samples):.1f}, {runs} run(s)); target ≤ {WALL_TARGET_S:.0f} s: "
        f"{'met' if med <= WALL_TARGET_S else 'MISSED'}"
    )
    print(
        "  last run, per check: " + ", ".join(f"{c['code']} {c['duration_s']:.1f} s" for c in rep["checks"])
    )
    print(
        f"  in-run total {rep['run']['duration_s']:.1f} s; the rest is torchrun start-up, rendezvous and exit"
    )
    return 0 if med <= WALL_TARGET_S else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="100,200,500", help="shaped rates in Mbit/s")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--skip-netns", action="store_true")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    schedules()
    ok, why = netns_available()
    if args.skip_netns or not ok:
        print(f"network-namespace parts skipped: {why or '--skip-netns'}")
        return 0
    accuracy([int(r) for r in args.rates.split(",")], args.runs)
    return wall_time(args.runs)


if __name__ == "__main__":
    sys.exit(main())
