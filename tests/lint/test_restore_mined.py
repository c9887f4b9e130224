"""benchmarks/restore_mined.py: the stored labels of a mined set come back with their files, byte for
byte, from a clone of each repository; a file whose sha256 differs is refused."""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "restore_mined.py"


def _load():
    spec = importlib.util.spec_from_file_location("restore_mined", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture()
def mirror(tmp_path):
    repo = tmp_path / "mirror" / "someone+proj" / "repo"
    repo.mkdir(parents=True)
    _git("init", "-q", cwd=repo)
    (repo / "train.py").write_text("import torch\nprint('v1')\n")
    _git("add", "train.py", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "v1", cwd=repo)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    return tmp_path / "mirror", commit, hashlib.sha256(b"import torch\nprint('v1')\n").hexdigest()


def _set(tmp_path, commit, sha, note=""):
    sets = tmp_path / "sets" / "ZZ"
    sets.mkdir(parents=True)
    (sets / "LABELS.md").write_text("## 1. proj_train.py — someone/proj `train.py`\n")
    (sets / "SOURCES.md").write_text(
        "| # | file | repo | path | commit | sha256 | why |\n|---|---|---|---|---|---|---|\n"
        f"| 1 | proj_train.py | someone/proj | train.py | {commit}{note} | {sha} | test |\n"
    )
    return sets.parent


def test_a_set_is_restored_byte_for_byte_with_its_labels(tmp_path, mirror, monkeypatch):
    mirror_dir, commit, sha = mirror
    mod = _load()
    monkeypatch.setattr(mod, "HERE", _set(tmp_path, commit, sha, note=" (file last changed in abc)"))
    dest = tmp_path / "out"
    assert mod.main(["ZZ", "--dest", str(dest), "--mirror", str(mirror_dir)]) == 0
    assert hashlib.sha256((dest / "proj_train.py").read_bytes()).hexdigest() == sha
    assert (dest / "LABELS.md").read_text().startswith("## 1.")


def test_a_file_whose_sha256_differs_is_refused(tmp_path, mirror, monkeypatch):
    mirror_dir, commit, _sha = mirror
    mod = _load()
    monkeypatch.setattr(mod, "HERE", _set(tmp_path, commit, "0" * 64))
    dest = tmp_path / "out"
    assert mod.main(["ZZ", "--dest", str(dest), "--mirror", str(mirror_dir)]) == 1
    assert not (dest / "proj_train.py").exists()


def test_the_stored_sets_list_their_files():
    mod = _load()
    for sources in sorted((SCRIPT.parent / "mined").glob("*/SOURCES.md")):
        found = mod.rows(sources)
        labels = (sources.parent / "LABELS.md").read_text()
        sections = [ln for ln in labels.splitlines() if ln.startswith("## ") and ". " in ln[:10]]
        assert found and len(found) == len(sections), sources
        assert all(len(r["commit"]) == 40 and len(r["sha256"]) == 64 for r in found), sources


def test_an_unknown_set_is_said(capsys):
    assert _load().main(["NO_SUCH_SET"]) == 2
    assert "no set" in capsys.readouterr().err
