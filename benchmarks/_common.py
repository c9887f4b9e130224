"""Shared bits for the benchmark scripts: what machine, and simple repeated timing."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

# The network-namespace and Slurm test beds live with the tests (tests/support), not in the wheel.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def machine() -> str:
    import psutil

    return (f"{platform.node()} · {psutil.cpu_count()} CPU(s) · {psutil.virtual_memory().total / 2**30:.0f} GiB · "
            f"Python {platform.python_version()} · {platform.platform(terse=True)}")


def time_command(argv: list[str], runs: int, env: dict | None = None, timeout: float = 300) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout)
        out.append(time.perf_counter() - t0)
        if p.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(argv)} exited {p.returncode}: {p.stderr[-800:]}")
    return out


def describe(samples: list[float]) -> str:
    return (f"median {statistics.median(samples):.3f} s, min {min(samples):.3f} s, max {max(samples):.3f} s "
            f"over {len(samples)} run(s)")
