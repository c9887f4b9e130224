"""Layers flow one way: commands -> runtime -> checks/model/report. A scan of every import statement
(also those inside functions, where the heavy imports live)."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO

# The packages of ddpdoctor a layer may import (its own always allowed).
MAY_IMPORT = {
    "core": set(),
    "model": {"core", "registry"},  # registry for offline summaries
    "report": {"core", "model"},
    "probes": {"core", "model"},
    "recommend": {"model", "report", "core"},
    "checks": {"core", "report", "model", "probes", "recommend", "registry", "lint"},  # lint rules: lint
    "lint": {"checks", "registry", "report", "core"},
    "runtime": {"core", "events", "launch", "registry", "report", "model", "probes", "recommend",
                "lint", "baselines", "checks"},
    "tui": {"report", "model", "events", "lint", "registry", "core", "recommend"},
}
# Known upward imports, each with its reason; a new one fails the test until it is fixed or listed.
EXCEPTIONS = {
    ("checks/alg001_nccl_algo.py", "ddpdoctor.runtime.algo_ab"),  # the A/B runner spawns processes
    ("ddpdoctor/tui/__main__.py", "ddpdoctor.cli"),  # `python -m ddpdoctor.tui`: an entry point, like cli
}
# model/ is pure: no torch, no terminal, no I/O.
NOT_IN_MODEL = {"torch", "textual", "rich", "psutil", "pynvml", "socket", "subprocess", "os", "shutil",
                "tempfile", "threading", "signal", "ctypes", "pathlib", "urllib", "http", "multiprocessing"}


def _layer(path: Path) -> str | None:
    rel = path.relative_to(REPO).parts
    if rel[0] == "checks":
        return "checks"
    return rel[1] if len(rel) > 2 else None


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out += [node.module] if node.module != "ddpdoctor" else [f"ddpdoctor.{a.name}" for a in node.names]
    return out


def _sources():
    return sorted([*(REPO / "ddpdoctor").rglob("*.py"), *(REPO / "checks").glob("*.py")])


def test_no_layer_imports_upward():
    wrong = []
    for path in _sources():
        layer = _layer(path)
        if layer not in MAY_IMPORT:
            continue  # commands/ and the top-level modules (cli, launch, ...) may import the layers
        rel = str(path.relative_to(REPO))
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] != "ddpdoctor" or len(parts) < 2 or parts[1] == layer or parts[1].startswith("__"):
                continue
            if parts[1] not in MAY_IMPORT[layer] and (rel, name) not in EXCEPTIONS:
                wrong.append(f"{rel} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_nothing_below_the_commands_imports_them():
    wrong = [f"{p.relative_to(REPO)} imports {n}" for p in _sources() if _layer(p) in MAY_IMPORT
             for n in _imports(p) if n.startswith(("ddpdoctor.commands", "ddpdoctor.cli"))
             and (str(p.relative_to(REPO)), n) not in EXCEPTIONS]
    assert not wrong, wrong


def test_model_is_pure():
    wrong = [f"{p.relative_to(REPO)} imports {n}" for p in (REPO / "ddpdoctor" / "model").rglob("*.py")
             for n in _imports(p) if n.split(".")[0] in NOT_IN_MODEL]
    assert not wrong, wrong


def test_the_scan_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from ddpdoctor.commands import check\n    import torch.distributed\n")
    assert _imports(f) == ["ddpdoctor.commands", "torch.distributed"]
