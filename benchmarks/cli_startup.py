"""`ddpdoctor --help` wall time (target ≤ 0.3 s) and proof that it imports no torch.

    python benchmarks/cli_startup.py [--runs 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

from _common import describe, machine, time_command

TARGET_S = 0.3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    argv = [sys.executable, "-m", "ddpdoctor", "--help"]
    time_command(argv, 1)  # warm the page cache
    samples = time_command(argv, args.runs)
    med = statistics.median(samples)
    print(f"ddpdoctor --help: {describe(samples)}; target ≤ {TARGET_S} s: {'met' if med <= TARGET_S else 'MISSED'}")
    mods = subprocess.run([sys.executable, "-X", "importtime", "-m", "ddpdoctor", "--help"], capture_output=True, text=True)
    heavy = [ln for ln in mods.stderr.splitlines() if ln.rstrip().endswith((" torch", " textual"))]
    print(f"torch/textual imported by --help: {'yes: ' + heavy[0] if heavy else 'no'}")
    return 0 if med <= TARGET_S and not heavy else 1


if __name__ == "__main__":
    sys.exit(main())
