"""Layers flow one way, without cycles, and model/ and core/ stay pure: the import-linter contracts in
pyproject.toml ([tool.importlinter]), run by .ci/lint_imports.py on the package as it ships. No
exceptions are listed there; these tests also show that the run fails when a contract is broken."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

SCRIPT = REPO / ".ci" / "lint_imports.py"


def _lint_imports(repo: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(repo)], capture_output=True, text=True, timeout=300)


def _copy(tmp_path: Path) -> Path:
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("ddpdoctor", "checks"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=skip)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _contracts() -> list[dict]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_every_contract_is_kept():
    p = _lint_imports(REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 broken" in p.stdout


def test_no_contract_lists_exceptions():
    assert [c["name"] for c in _contracts() if "ignore_imports" in c] == []


def test_every_top_level_module_is_in_a_layer():
    layers = next(c for c in _contracts() if c["type"] == "layers" and not c.get("containers"))["layers"]
    named = {m.strip() for layer in layers for m in layer.replace(":", "|").split("|")}
    here = {f"ddpdoctor.{p.stem}" for p in (REPO / "ddpdoctor").glob("*.py") if p.stem != "__init__"}
    here |= {f"ddpdoctor.{p.parent.name}" for p in (REPO / "ddpdoctor").glob("*/__init__.py")}
    here.add("ddpdoctor.checks")
    assert sorted(here - named) == [], "place every new top-level module or package in a layer"
    assert sorted(named - here) == []


@pytest.mark.parametrize(
    ("path", "line", "broken"),
    [
        # an upward import inside a function (where the heavy imports live) is seen too
        ("ddpdoctor/model/bandwidth/busbw.py", "def _up():\n    from ddpdoctor.cli import main\n", "Layers"),
        ("checks/alg001_nccl_algo.py", "def _up():\n    import ddpdoctor.runtime.worker\n", "Layers"),
        ("ddpdoctor/core/report.py", "import os\n", "pure"),
        ("ddpdoctor/model/tuning/nccl_cost.py", "def _t():\n    import torch\n", "pure"),
        # a cycle inside one layer: two model domains importing each other
        ("ddpdoctor/model/tuning/nccl_cost.py", "def _c():\n    import ddpdoctor.model.placement.meshes\n", None),
    ],
)
def test_a_broken_contract_fails_the_run(tmp_path, path, line, broken):
    repo = _copy(tmp_path)
    if broken is None:  # make the reverse edge too, so that the two domains form a cycle
        meshes = repo / "ddpdoctor/model/placement/meshes.py"
        meshes.write_text(meshes.read_text() + "\n\ndef _c():\n    import ddpdoctor.model.tuning.nccl_cost\n")
        broken = "cycles"
    f = repo / path
    f.write_text(f.read_text() + "\n\n" + line)
    p = _lint_imports(repo)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "BROKEN" in p.stdout and broken in p.stdout.split("Broken contracts")[1]
