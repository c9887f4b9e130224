"""Overhead of `ddpdoctor watch` on a healthy job (target <= 2 %): steps/s of a small DDP model on gloo
(2 ranks, torchrun), with and without watch, runs interleaved (plain, watched, plain, watched, ...) so
that load from other users hits both alike.

    python benchmarks/hang_overhead.py [--pairs 4] [--steps 400] [--hang-after 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

JOB = Path(__file__).resolve().parent / "_hang_jobs.py"


def one(watched: bool, steps: int, hang_after: float) -> float:
    with tempfile.TemporaryDirectory(prefix="hangbench-") as tmp:
        out = Path(tmp) / "out.json"
        job = ["torchrun", "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0",
               str(JOB), "train", str(out), str(steps)]
        if watched:
            job = [sys.executable, "-m", "ddpdoctor", "watch", "--hang-after", str(hang_after),
                   "--dumps", str(Path(tmp) / "dumps"), "--", *job]
        p = subprocess.run(job, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"exit {p.returncode}: {p.stderr[-1500:]}")
        return json.loads(out.read_text())["steps_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--hang-after", type=float, nargs="+", default=[300.0, 5.0])
    args = ap.parse_args()
    print(f"machine: {machine()} (shared with other users: figures are noisy)")
    print(f"job: DDP 256-256-10 MLP, batch 64, 2 ranks on gloo, {args.steps} timed steps per run")
    for ha in args.hang_after:
        plain, watched = [], []
        for _ in range(args.pairs):
            plain.append(one(False, args.steps, ha))
            watched.append(one(True, args.steps, ha))
        p, w = statistics.median(plain), statistics.median(watched)
        ratios = [wi / pi for pi, wi in zip(plain, watched)]
        print(f"--hang-after {ha:g} s: plain {p:.1f} steps/s, watched {w:.1f} steps/s "
              f"(medians of {args.pairs} interleaved pairs); overhead {100 * (1 - w / p):+.1f} % "
              f"(per-pair: {', '.join(f'{100 * (1 - r):+.1f}' for r in ratios)} %); target <= 2 %")
        print(f"   plain runs: {', '.join(f'{x:.1f}' for x in plain)}; watched: {', '.join(f'{x:.1f}' for x in watched)}")


if __name__ == "__main__":
    main()
