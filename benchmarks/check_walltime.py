"""Default `ddpdoctor check` wall time on this machine (target ≤ 20 s on the 2-core CPU box).

    python benchmarks/check_walltime.py [--runs 3]

Prints the whole command's wall time and, from the report, each check's time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from _common import describe, machine, time_command

TARGET_S = 20.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as d:
        rj = Path(d) / "r.json"
        samples = time_command([sys.executable, "-m", "ddpdoctor", "check", "-q", "--json", str(rj)], args.runs)
        rep = json.loads(rj.read_text())
    med = statistics.median(samples)
    print(f"ddpdoctor check (default: {rep['run']['world_size']} ranks, {rep['run']['backend']}): {describe(samples)}; "
          f"target ≤ {TARGET_S} s: {'met' if med <= TARGET_S else 'MISSED'}")
    print("last run, per check:")
    for c in rep["checks"]:
        print(f"  {c['code']:<8} {c['status']:<10} {c['duration_s']:6.2f} s  {c['summary']}")
    print(f"  in-run total {rep['run']['duration_s']:.2f} s; the rest is torchrun start-up, rendezvous and exit")
    return 0 if med <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
