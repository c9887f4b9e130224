"""Shared helpers for tests that run the real CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"  # public data files, origin and licence in SOURCES.md there


def fixture(rel: str) -> Path:
    """A file or folder under tests/fixtures (a missing one is a broken checkout: fail, never skip)."""
    p = FIXTURES / rel
    assert p.exists(), f"fixture {rel} is missing from {FIXTURES}"
    return p


def without_numpy(folder: Path) -> dict[str, str]:
    """Environment for a subprocess that cannot import numpy (as with the CPU torch wheel, which does not
    bring it), whether or not numpy is installed here: a numpy that raises ModuleNotFoundError first on
    PYTHONPATH."""
    (folder / "numpy").mkdir(parents=True, exist_ok=True)
    (folder / "numpy" / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'numpy\' (hidden by the test)", name="numpy")\n'
    )
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)}


def with_fault(spec: str, env: dict | None = None) -> dict[str, str]:
    """Environment that makes the check workers misbehave as spec says (tests/fault_inject/sitecustomize.py:
    "hang@COL001:rank=1", "delay@COL001:rank=1:s=60", "exit@COL001:rank=1:code=3")."""
    base = dict(env or {})
    path = base.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "tests" / "fault_inject"), path) if p)
    base["DDPDOCTOR_TEST_FAULT"] = spec
    return base


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "ddpdoctor", *args]


def run_cli(*args: str, timeout: float = 120, env: dict | None = None, cwd: str | None = None):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(cli(*args), capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd)


def load(path) -> dict:
    return json.loads(Path(path).read_text())


def check(report: dict, code: str) -> dict:
    return next(c for c in report["checks"] if c["code"] == code)


def run_two_ranks(script: Path, *args: str, timeout: float = 120) -> list[str]:
    """Run ``script URL RANK *args`` as rank 0 and rank 1 of a two-process gloo group on this machine
    (a free loopback port); each must exit 0. Their stdouts, rank 0's first."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), url, str(rank), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            assert p.returncode == 0, err[-2000:]
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return outs
