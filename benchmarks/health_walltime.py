"""Wall time of `ddpdoctor health` on this machine (target <= 30 s: slurmd kills a health check at 60 s).

    python benchmarks/health_walltime.py [--runs 3]

Runs `ddpdoctor health --no-drain` RUNS times (topology and environment probes plus the one-node
collective run: 2 CPU ranks on gloo here, one rank per GPU on NCCL) and prints each wall time, the
median and the worst, and the same without the collective run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def timed(argv: list[str]) -> tuple[float, int]:
    t = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    return time.monotonic() - t, p.returncode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    base = [sys.executable, "-m", "ddpdoctor", "health", "--no-drain"]
    for label, argv in (("health", base), ("health --no-collective", [*base, "--no-collective"])):
        times = []
        for _ in range(a.runs):
            s, rc = timed(argv)
            times.append(s)
            print(f"{label}: {s:.1f} s (exit {rc})", flush=True)
        print(f"{label}: median {statistics.median(times):.1f} s, worst {max(times):.1f} s over {a.runs} runs "
              f"(target <= 30 s)")


if __name__ == "__main__":
    main()
