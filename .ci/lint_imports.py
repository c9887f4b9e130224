#!/usr/bin/env python3
"""Run lint-imports (the contracts in pyproject.toml's [tool.importlinter]) on the package as it ships.

grimp reads a package from disk and cannot follow setuptools' package-dir mapping, so ddpdoctor/ and
checks/ (shipped as ddpdoctor.checks) are put together in a temporary folder first.

    python .ci/lint_imports.py [REPO]      # exit 0: every contract kept; 1: one broken; 2: cannot run
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def main(argv: list[str]) -> int:
    repo = Path(argv[0] if argv else Path(__file__).resolve().parents[1]).resolve()
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    exe = shutil.which("lint-imports", path=search)  # beside this Python first: the venv's
    if exe is None:
        print("lint_imports: lint-imports is not installed (pip install -e '.[dev]')", file=sys.stderr)
        return 2
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    with tempfile.TemporaryDirectory(prefix="ddpd-layers-") as tmp:
        shutil.copytree(repo / "ddpdoctor", Path(tmp, "ddpdoctor"), ignore=skip)
        shutil.copytree(repo / "checks", Path(tmp, "ddpdoctor", "checks"), ignore=skip)
        env = {**os.environ, "PYTHONPATH": tmp}  # this copy, ahead of an editable install
        return subprocess.run([exe, "--no-cache", str(repo / "pyproject.toml")], cwd=tmp, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
