"""Shared helpers for tests that run the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures"


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
