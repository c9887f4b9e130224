"""Overhead of `ddpdoctor watch` on a healthy job (target <= 2 %): steps/s of a small DDP model on gloo
(2 ranks, torchrun), with and without watch, runs interleaved (plain, watched, plain, watched, ...) so
that load from other users hits both alike.

    python benchmarks/hang_overhead.py [--pairs 4] [--steps 1500] [--hang-after 300 5] [--verify]

With --verify the watched runs use `watch --verify` (a fingerprint exchange through the job's store
before every collective, and the p2p, forward and sampler checks): the figure is what --verify costs
per step.
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


def one(watched: bool, steps: int, hang_after: float, verify: bool = False, job_kind: str = "train") -> dict:
    with tempfile.TemporaryDirectory(prefix="hangbench-") as tmp:
        out = Path(tmp) / "out.json"
        job = ["torchrun", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
               "--rdzv-endpoint", "127.0.0.1:0", str(JOB), job_kind, str(out), str(steps)]
        if watched:
            job = [sys.executable, "-m", "ddpdoctor", "watch", "--hang-after", str(hang_after),
                   "--dumps", str(Path(tmp) / "dumps"), *(["--verify"] if verify else []), "--", *job]
        p = subprocess.run(job, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            what = "watched" if watched else "plain"
            raise SystemExit(f"{what} run: exit {p.returncode}: {p.stderr[-3000:]}")
        result = json.loads(out.read_text())
        if watched and result.get("helper_cpu_s") is None:  # the figure would not be of a watched run
            raise SystemExit(f"watched run without the watch helper in rank 0: {p.stderr[-3000:]}")
        return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--hang-after", type=float, nargs="+", default=[300.0, 5.0])
    ap.add_argument("--verify", action="store_true", help="watched runs with --verify")
    ap.add_argument("--job", choices=["train", "allreduce"], default="train",
                    help="train: a small DDP model; allreduce: a loop of all_reduce, no DDP")
    args = ap.parse_args()
    print(f"machine: {machine()} (shared with other users: figures are noisy)")
    what = "DDP 256-256-10 MLP, batch 64" if args.job == "train" else "all_reduce of 256x256 floats after a matmul"
    print(f"job: {what}, 2 ranks on gloo, {args.steps} timed steps per run")
    print("overhead: how much slower (steps/s, wall time of rank 0) and how much more CPU (rank 0's "
          "process, all threads) the watched runs are; negative = the watched runs happened to be faster")
    for ha in args.hang_after:
        plain, watched = [], []
        for _ in range(args.pairs):
            plain.append(one(False, args.steps, ha, job_kind=args.job))
            watched.append(one(True, args.steps, ha, args.verify, args.job))
        metrics = (("steps_per_s", "steps/s", "higher"), ("cpu_ms_per_step", "CPU ms/step", "lower"))
        for key, unit, better in metrics:
            a, b = [r[key] for r in plain], [r[key] for r in watched]
            pm, wm = statistics.median(a), statistics.median(b)
            cost = (1 - wm / pm) if better == "higher" else (wm / pm - 1)
            per = [(1 - y / x) if better == "higher" else (y / x - 1) for x, y in zip(a, b)]
            pairs = ", ".join(f"{100 * c:+.1f}" for c in per)
            mode = "watch --verify" if args.verify else "watch"
            print(f"{mode} --hang-after {ha:g} s, {unit}: plain {pm:.2f}, watched {wm:.2f} (medians of {args.pairs} "
                  f"interleaved pairs): overhead {100 * cost:+.1f} % (per pair {pairs} %)"
                  + ("" if args.verify else "; target <= 2 %"))
        if args.verify:
            a = statistics.median([1000 / r["steps_per_s"] for r in plain])
            b = statistics.median([1000 / r["steps_per_s"] for r in watched])
            print(f"watch --verify: {b - a:+.2f} ms per step ({a:.2f} -> {b:.2f} ms, wall, rank 0)")
        shares = [r["helper_cpu_s"] / r["process_cpu_s"] for r in watched]
        print(f"--hang-after {ha:g} s, the helper thread's own CPU time / rank 0's CPU time: "
              f"{', '.join(f'{100 * x:.3f}' for x in shares)} % (per watched run, from /proc schedstat; "
              f"{statistics.median([r['helper_cpu_s'] for r in watched]) * 1e3:.1f} ms of "
              f"{statistics.median([r['process_cpu_s'] for r in watched]):.1f} s)")


if __name__ == "__main__":
    main()
