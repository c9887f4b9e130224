"""Onset to printed verdict of `ddpdoctor watch` for each certain deadlock, at the default settings
(--hang-after 300, --confirm 3): target <= confirm + 5 s = 8 s.

Each job (benchmarks/_hang_jobs.py CASE) has rank 0 write the wall time just before the deadlock
starts; the benchmark reads watch's stdout line by line and notes when the "... diagnosis:" line
arrives (the verdict is printed after the evidence is collected and the job ended). 3 ranks on
gloo via torchrun, on this machine.

    python benchmarks/hang_certain_time.py [--runs 3] [--cases mismatch ring newgroup]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

JOB = Path(__file__).resolve().parent / "_hang_jobs.py"
CONFIRM_S = 3.0


def one(case: str) -> tuple[float, float, int, str]:
    """(onset -> the watch called it, onset -> verdict printed, exit code, certain kind)"""
    with tempfile.TemporaryDirectory(prefix="hangcertain-") as tmp:
        mark, dumps = Path(tmp) / "mark", Path(tmp) / "dumps"
        argv = [sys.executable, "-m", "ddpdoctor", "watch", "--dumps", str(dumps), "--",
                "torchrun", "--nproc-per-node", "3", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0",
                str(JOB), case, str(mark)]  # fmt: skip
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        verdict_at = None
        try:
            for line in p.stdout:
                if verdict_at is None and " diagnosis: " in line:
                    verdict_at = time.time()
            p.wait(timeout=400)
        finally:
            if p.poll() is None:
                p.kill()
        if verdict_at is None or not mark.exists():
            raise SystemExit(f"{case}: no verdict (exit {p.returncode})")
        onset = float(mark.read_text())
        w = json.loads((dumps / "watch.json").read_text())
        kind = (w.get("certain") or {}).get("kind", "not certain")
        return w["detected_ns"] / 1e9 - onset, verdict_at - onset, p.returncode, kind


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cases", nargs="+", default=["mismatch", "ring", "newgroup"])
    args = ap.parse_args()
    print(f"machine: {machine()} (shared with other users: figures are noisy)")
    print(f"jobs: 3 ranks, torchrun, gloo; ddpdoctor watch at its defaults (--hang-after 300, --confirm {CONFIRM_S:g})")
    target = CONFIRM_S + 5
    for case in args.cases:
        called, printed, kinds = [], [], set()
        for _ in range(args.runs):
            c, v, rc, kind = one(case)
            assert rc == 1, rc
            called.append(c)
            printed.append(v)
            kinds.add(kind)
        print(f"{case:9s} ({'/'.join(sorted(kinds))}): onset -> called: median {statistics.median(called):.1f} s "
              f"(max {max(called):.1f}); onset -> verdict printed: median {statistics.median(printed):.1f} s "
              f"(min {min(printed):.1f}, max {max(printed):.1f}); {args.runs} runs; "
              f"called within {target:g} s: {'met' if max(called) <= target else 'NOT met'}")  # fmt: skip


if __name__ == "__main__":
    main()
