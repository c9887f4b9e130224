"""Lint the installed torch package's source with ``ddpdoctor lint`` and with ``ruff check --select E,F``
(ruff's default rules) on the same tree, taking turns; print the best wall and CPU times, the load
average, the ratio (target <= 1.5x ruff), the one-file wall time (target <= 0.3 s) and, with --sweep,
the full zero-crash sweep over torch and the CPython standard library.

    python benchmarks/lint_bench.py [--tree PATH] [--file PATH] [--sweep] [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path


def _torch_dir() -> Path:
    spec = importlib.util.find_spec("torch")  # locate only; torch is not imported
    if spec is None or not spec.submodule_search_locations:
        sys.exit("torch is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _once(cmd: list[str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall seconds, CPU seconds (user + system of the command and its workers), the result."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc


def _wall(cmd: list[str], repeat: int) -> tuple[float, subprocess.CompletedProcess]:
    best, proc = float("inf"), None
    for _ in range(repeat):
        wall, _cpu, proc = _once(cmd)
        best = min(best, wall)
    return best, proc


def _interleaved(cmds: dict[str, list[str]], repeat: int) -> dict[str, tuple[float, float, object]]:
    """Best wall and best CPU of each command, run in turn ``repeat`` times: on a shared machine the
    load changes from second to second, and taking turns exposes every command to the same load.
    Every run's CPU seconds are printed too."""
    best: dict[str, tuple[float, float, object]] = {k: (float("inf"), float("inf"), None) for k in cmds}
    runs: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(repeat):
        for name, cmd in cmds.items():
            wall, cpu, proc = _once(cmd)
            w, c, _ = best[name]
            best[name] = (min(w, wall), min(c, cpu), proc)
            runs[name].append(cpu)
    for name, cpus in runs.items():
        print(f"  {name}: CPU s of each run: {', '.join(f'{c:.2f}' for c in cpus)}")
    return best


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _lines(tree: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in tree.rglob("*.py"))


def _bytecode_state() -> str:
    """Compile ddpdoctor's and the rules' bytecode first, as ``pip install`` of a wheel does: without
    it (PYTHONDONTWRITEBYTECODE=1 and an editable install) every CLI process compiles the modules
    from source, about 70 ms of each figure below, which no installed user pays."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    fresh = all(compileall.compile_dir(str(root / pkg), quiet=1) for pkg in ("ddpdoctor", "checks"))
    src = root / "ddpdoctor" / "script" / "analysis.py"
    if fresh and Path(importlib.util.cache_from_source(str(src))).exists():
        return "compiled before timing, as an installed wheel has it"
    return "could not be written: every CLI process below compiles ddpdoctor from source (about 70 ms)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=None, help="tree to lint (default: the installed torch)")
    ap.add_argument("--file", type=Path, default=None, help="one file for the single-file timing")
    ap.add_argument("--repeat", type=int, default=3, help="runs per timing; the best is reported")
    ap.add_argument("--sweep", action="store_true", help="also lint torch + stdlib and count crashes")
    args = ap.parse_args()
    tree = args.tree or _torch_dir()
    one = args.file or Path(__file__).resolve().parents[1] / "tests" / "lint" / "corpus" / "good_hf_style.py"
    ddp = [
        sys.executable,
        "-m",
        "ddpdoctor",
        "lint",
        "--isolated",
        "--exit-zero",
        "--output-format",
        "json",
        "--no-cache",
    ]
    print(
        f"tree: {tree} ({_lines(tree):,} lines of .py), cores: {os.cpu_count()} (ddpdoctor: one worker "
        "process per core; ruff: its own threads, one per core)"
    )
    print(f"ddpdoctor bytecode cache: {_bytecode_state()}")

    ruff = shutil.which("ruff")
    ruff_cmd = [
        ruff,
        "check",
        "--no-cache",
        "--isolated",
        "--select",
        "E,F",
        "--exit-zero",
        "--quiet",
        str(tree),
    ]
    print(f"before: {_load()}")
    timed = _interleaved({"ddp": [*ddp, str(tree)], **({"ruff": ruff_cmd} if ruff else {})}, args.repeat)
    print(f"after:  {_load()} (2 cores shared with other work: figures are noisy; best of {args.repeat})")
    t_ddp, cpu_ddp, proc = timed["ddp"]
    if proc.returncode != 0:
        print(proc.stderr)
        return 2
    findings = json.loads(proc.stdout)
    crashes = [f for f in findings if f["code"] == "DDP000" and f["evidence"].get("kind") == "internal"]
    print(
        f"ddpdoctor lint, no cache: {t_ddp:.2f} s wall, {cpu_ddp:.2f} s CPU (all processes), "
        f"{len(findings)} findings, {len(crashes)} internal errors"
    )
    with tempfile.TemporaryDirectory() as cache:
        warm = [*ddp[:-1], "--cache-dir", cache, str(tree)]
        subprocess.run(warm, check=False, capture_output=True, timeout=1800)  # fill the cache
        t_warm, _ = _wall(warm, args.repeat)
    print(f"ddpdoctor lint, warm result cache: {t_warm:.2f} s wall")
    if ruff:
        t_ruff, cpu_ruff, _ = timed["ruff"]
        print(f"ruff check --select E,F --no-cache: {t_ruff:.2f} s wall, {cpu_ruff:.2f} s CPU (its threads)")
        print(f"ratio ddpdoctor/ruff, both without cache: {t_ddp / t_ruff:.2f}x (target <= 1.5x)")
        # both use every core (ruff its threads, ddpdoctor one worker process per core): the CPU
        # ratio is the work each does, less sensitive to what else the machine runs than the wall ratio
        print(f"ratio of CPU seconds ddpdoctor/ruff: {cpu_ddp / cpu_ruff:.2f}x")
        print(f"ratio ddpdoctor warm cache / ruff without cache: {t_warm / t_ruff:.2f}x")
    else:
        print("ruff not found: no comparison")
    t_one, _ = _wall([*ddp, str(one)], args.repeat)
    print(f"one file ({one.name}), whole CLI process: {t_one:.3f} s wall (target <= 0.3 s)")

    if args.sweep:
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        for root in (tree, stdlib):
            t, proc = _wall([*ddp, "--select", "DDP", str(root)], 1)
            out = json.loads(proc.stdout) if proc.returncode == 0 else []
            internal = [f for f in out if f["code"] == "DDP000" and f["evidence"].get("kind") == "internal"]
            newer = [
                f for f in out if f["code"] == "DDP000" and f["evidence"].get("kind") == "python-version"
            ]
            broken = [f for f in out if f["code"] == "DDP000" and f["evidence"].get("kind") == "syntax"]
            print(
                f"sweep {root} (every rule): rc {proc.returncode}, {len(out)} findings, "
                f"{len(internal)} internal errors, {len(newer)} files needing a newer Python, "
                f"{len(broken)} syntax errors, {t:.1f} s"
            )
            for f in internal[:10]:
                print("   ", f["location"]["path"], f["message"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
