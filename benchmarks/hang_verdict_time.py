"""Time from a hang's start to the printed verdict of `ddpdoctor watch` (target: <= --hang-after + 15 s).

The job (benchmarks/_hang_jobs.py hang) has rank 0 write the wall time just before it enters a barrier
that no other rank reaches; the benchmark reads watch's stdout line by line and notes when the
"Hang diagnosis" line arrives. 2 ranks on gloo via torchrun, on this machine.

    python benchmarks/hang_verdict_time.py [--runs 3] [--hang-after 5 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

JOB = Path(__file__).resolve().parent / "_hang_jobs.py"


def one(hang_after: float) -> tuple[float, float, int]:
    with tempfile.TemporaryDirectory(prefix="hangbench-") as tmp:
        mark = Path(tmp) / "mark"
        argv = [sys.executable, "-m", "ddpdoctor", "watch", "--hang-after", str(hang_after),
                "--dumps", str(Path(tmp) / "dumps"), "--", "torchrun", "--nproc-per-node", "2",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", str(JOB), "hang", str(mark)]
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        verdict_at = None
        try:
            for line in p.stdout:
                if verdict_at is None and line.startswith("Hang diagnosis"):
                    verdict_at = time.time()
            p.wait(timeout=hang_after + 120)
        finally:
            if p.poll() is None:
                p.kill()
        if verdict_at is None or not mark.exists():
            raise SystemExit(f"no verdict (exit {p.returncode})")
        return verdict_at - float(mark.read_text()), time.time() - float(mark.read_text()), p.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hang-after", type=float, nargs="+", default=[5.0, 10.0])
    args = ap.parse_args()
    print(f"machine: {machine()} (shared with other users: figures are noisy)")
    print("job: 2 ranks, torchrun, gloo; rank 0 alone in a barrier")
    for ha in args.hang_after:
        verdicts, ends = [], []
        for _ in range(args.runs):
            v, e, rc = one(ha)
            assert rc == 1, rc
            verdicts.append(v)
            ends.append(e)
        target = ha + 15
        med = statistics.median(verdicts)
        print(f"--hang-after {ha:g} s: hang start -> printed verdict: median {med:.1f} s "
              f"(min {min(verdicts):.1f}, max {max(verdicts):.1f}, {args.runs} runs); "
              f"-> watch exited: median {statistics.median(ends):.1f} s; target <= {target:g} s: "
              f"{'met' if max(verdicts) <= target else 'NOT met'}")


if __name__ == "__main__":
    main()
