"""Project-wide analysis: calls followed from one linted file into another (ddpdoctor.lint.project)."""

from __future__ import annotations

import shutil
from pathlib import Path

from ddpdoctor.lint import LintConfig, lint_paths
from ddpdoctor.lint.project import Project

FIXTURES = Path(__file__).parent / "fixtures"


def _codes(paths, select):
    return [
        (Path(f.location.path).name, f.location.line, f.code, f.message)
        for f in lint_paths(paths, LintConfig(select=select), jobs=1)
    ]


def test_module_names_from_paths():
    root = FIXTURES / "project_eval" / "src"
    p = Project(sorted(root.rglob("*.py")), roots=[str(root)])
    assert p.by_name["proj.engine"].name == "engine.py"
    assert p.by_name["engine"].name == "engine.py"
    assert p.by_name["proj"].name == "__init__.py"
    train = root / "proj" / "train.py"
    assert p.module_path("engine", str(train), level=1) == root / "proj" / "engine.py"


def test_forward_in_another_file_reached_by_rank_0_only():
    found = _codes([FIXTURES / "project_eval"], ("DDP301",))
    assert len(found) == 1
    name, line, _code, message = found[0]
    assert name == "train.py"
    text = (FIXTURES / "project_eval" / "src" / "proj" / "train.py").read_text().splitlines()
    assert "expect: DDP301" in text[line - 1]
    assert "train.py:20 -> engine.py:10" in message  # the evidence chain crosses the files


def test_a_file_alone_does_not_see_the_other_file():
    train = FIXTURES / "project_eval" / "src" / "proj" / "train.py"
    assert _codes([train], ("DDP301",)) == []


def test_project_results_are_cached_with_the_other_files(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "project_eval" / "src", src)
    cache = tmp_path / "cache"
    first = lint_paths([src], LintConfig(select=("DDP301",)), jobs=1, cache_dir=cache)
    assert [f.code for f in first] == ["DDP301"]
    engine = src / "proj" / "engine.py"
    # the helper stops calling the model: the cached finding for train.py must not come back
    engine.write_text(engine.read_text().replace("model(x)", "model.module(x)"))
    again = lint_paths([src], LintConfig(select=("DDP301",)), jobs=1, cache_dir=cache)
    assert again == []


def test_set_epoch_missing_when_the_epoch_pass_lives_in_another_module():
    bad = _codes([FIXTURES / "project_epochs" / "bad"], ("DDP101",))
    assert [(n, line) for n, line, _c, _m in bad] == [("main.py", 14)]
    assert "main.py:19 -> engine.py:6" in bad[0][3]
    # the other module reseeds the sampler: quiet; and main.py alone cannot tell: quiet
    assert _codes([FIXTURES / "project_epochs" / "ok"], ("DDP101",)) == []
    assert _codes([FIXTURES / "project_epochs" / "bad" / "main.py"], ("DDP101",)) == []


def test_a_helper_called_under_a_rank_test_in_another_file_is_guarded():
    root = FIXTURES / "project_guard"
    files = sorted(root.glob("*.py"))
    project = Project(files, roots=[str(root)])
    ckpt = project.analysis(root / "ckpt.py")
    save = next(c for c, q in ckpt.calls if q == "torch.save")
    guard = ckpt.rank_guard(save)
    assert guard is not None and guard.kind == "global"
    assert guard.path.endswith("train.py") and guard.chain == (14,)
    alone = Project([root / "ckpt.py"]).analysis(root / "ckpt.py")
    assert alone.rank_guard(next(c for c, q in alone.calls if q == "torch.save")) is None
