"""The engine: CLI, exit codes, noqa, config, output formats, bad input as diagnostics."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from ddpdoctor.cli import main
from ddpdoctor.lint import ConfigError, LintConfig, LintInputError, lint_paths, lint_source, load_config
from ddpdoctor.lint.config import parse_world_sizes

BAD = textwrap.dedent(
    """
    import torch.distributed as dist
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        dist.barrier()
    dist.destroy_process_group()
    """
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_text_output_and_exit_one(tmp_path, capsys):
    p = write(tmp_path, "train.py", BAD)
    assert main(["lint", "--isolated", str(p)]) == 1
    out = capsys.readouterr().out
    assert f"{p}:5:5: DDP301 " in out
    assert "rank 0 only" in out


def test_clean_file_exits_zero(tmp_path, capsys):
    p = write(tmp_path, "ok.py", "import torch.distributed as dist\ndist.barrier()\n")
    assert main(["lint", "--isolated", str(p)]) == 0
    assert "All checks passed" in capsys.readouterr().out


def test_missing_path_exits_two(tmp_path, capsys):
    assert main(["lint", "--isolated", str(tmp_path / "nope.py")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_unknown_code_exits_two(tmp_path, capsys):
    p = write(tmp_path, "train.py", BAD)
    assert main(["lint", "--isolated", "--select", "XYZ999", str(p)]) == 2
    assert "unknown rule code" in capsys.readouterr().err


def test_bad_world_sizes_exit_two(tmp_path, capsys):
    p = write(tmp_path, "train.py", BAD)
    assert main(["lint", "--isolated", "--world-sizes", "1-99", str(p)]) == 2
    assert "between 2 and 64" in capsys.readouterr().err


def test_explain(capsys):
    assert main(["lint", "--explain", "ddp301"]) == 0
    out = capsys.readouterr().out
    assert "DDP301" in out and "## Why is this bad?" in out
    assert main(["lint", "--explain", "DDP999"]) == 2


def test_explain_shows_confidence_and_how_to_opt_in(capsys):
    assert main(["lint", "--explain", "DDP301"]) == 0
    out = capsys.readouterr().out
    assert "confidence: high" in out and "On by default" in out
    for code in ("DDP403", "DDP406", "DDP602"):
        assert main(["lint", "--explain", code]) == 0
        out = capsys.readouterr().out
        assert "Opt-in" in out and f"--extend-select {code}" in out and "confidence: high" not in out


def test_default_selection_is_the_high_confidence_rules():
    from ddpdoctor.lint.rules import on_by_default, script_rules

    off = {s.code for s in script_rules() if not on_by_default(s)}
    assert {"DDP403", "DDP406", "DDP602"} <= off
    assert {"DDP101", "DDP201", "DDP301", "DDP501"}.isdisjoint(off)


def test_confidence_in_json_and_sarif(tmp_path, capsys):
    p = write(tmp_path, "train.py", BAD.replace("dist.destroy_process_group()", ""))
    main(["lint", "--isolated", "--no-cache", "--extend-select", "DDP403", "--output-format", "json", str(p)])
    got = {d["code"]: d["confidence"] for d in json.loads(capsys.readouterr().out)}
    assert got == {"DDP301": "high", "DDP403": "low"}
    main(["lint", "--isolated", "--no-cache", "--select", "DDP403", "--output-format", "sarif", str(p)])
    run = json.loads(capsys.readouterr().out)["runs"][0]
    assert run["tool"]["driver"]["rules"][0]["properties"]["confidence"] == "low"
    assert run["results"][0]["properties"]["confidence"] == "low"


def test_opt_in_rule_from_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.ddpdoctor.lint]\nextend-select = ["DDP403"]\n')
    p = write(tmp_path, "train.py", BAD.replace("dist.destroy_process_group()", ""))
    cfg = load_config(tmp_path / "pyproject.toml")
    assert {f.code for f in lint_paths([p], cfg, jobs=1)} == {"DDP301", "DDP403"}


def test_newer_python_syntax_is_named_not_called_broken():
    import sys

    from ddpdoctor.lint.pyversion import needs_newer_python

    head = "import torch.distributed as dist\ndist.init_process_group()\n"
    src = head + "def first[T](xs: list[T]) -> T:\n    return xs[0]\n"
    newer = needs_newer_python(src, 3, (3, 11))
    assert (newer.version, newer.what, newer.line) == ("3.12", "a generic function (PEP 695)", 3)
    assert needs_newer_python("type Pair = tuple[int, int]\n", 1, (3, 11)).version == "3.12"
    assert needs_newer_python("class Box[T]:\n", 1, (3, 10)).version == "3.12"
    # the parser blames the `)` that ends a call spanning lines; the f-string is two lines up
    call = 'print(\n    f"got {" ".join(args)}"\n)\n'
    newer = needs_newer_python(call, 3, (3, 11))
    assert (newer.version, newer.line) == ("3.12", 2)
    assert needs_newer_python('print(\n    "plain"\n)\n', 3, (3, 11)) is None
    assert needs_newer_python("type Pair = tuple[int, int]\n", 1, (3, 12)) is None
    assert needs_newer_python("def main(:\n", 1, (3, 11)) is None
    # PEP 695 type parameters are erased on older Pythons: the file is linted, lines where they were
    generic = head + "def first[T](xs: list[T]) -> T:\n    return xs[0]\ntype Pair[K] = tuple[K, K]\n"
    generic += "class Box[T]:\n    pass\nimport torch\ntorch.save(first([1]), 'ckpt.pt')\n"
    found = lint_source("gen.py", generic)
    assert all(f.code != "DDP000" for f in found)
    assert [(f.code, f.location.line) for f in found if f.code == "DDP501"] == [("DDP501", 9)]
    if sys.version_info >= (3, 12):
        return
    # syntax of a newer Python that cannot be erased (PEP 758) still says which version it needs
    found = lint_source("exc.py", head + "try:\n    pass\nexcept ValueError, TypeError:\n    pass\n")
    assert [f.evidence["kind"] for f in found] == ["python-version"]
    assert "needs Python 3.14+" in found[0].message and found[0].location.line == 5
    # a real syntax error is still one
    bad = lint_source("bad.py", head + "def main(:\n    pass\n")
    assert [f.evidence["kind"] for f in bad] == ["syntax"]


def test_old_async_keyword_is_read_as_python_3_6_read_it():
    # PyTorch < 0.4 spelt non-blocking copies `.cuda(async=True)`: a name before Python 3.7
    from ddpdoctor.lint.pyversion import rename_old_async

    src = (
        "import torch\nimport torch.distributed as dist\n"
        "def main(batch):\n    dist.init_process_group('nccl')\n"
        "    x = batch.cuda(async=True)\n    torch.cuda.set_device(dist.get_rank())\n"
    )
    renamed = rename_old_async(src)
    assert renamed is not None and "x = batch.cuda(_asyn=True)" in renamed
    assert len(renamed.splitlines()) == len(src.splitlines())
    assert rename_old_async("async def f():\n    await g()\n") is None  # the 3.7 keywords stay
    found = lint_source("old.py", src)
    assert all(f.code != "DDP000" for f in found)
    assert [(f.code, f.location.line) for f in found if f.code == "DDP402"] == [("DDP402", 6)]
    # a real syntax error elsewhere is still one
    bad = lint_source("bad.py", src + "def main(:\n    pass\n")
    assert [f.evidence["kind"] for f in bad] == ["syntax"]


def test_select_ignore_extend_select(tmp_path):
    p = write(tmp_path, "train.py", BAD.replace("dist.destroy_process_group()", ""))
    codes = lambda cfg: {f.code for f in lint_paths([p], cfg, jobs=1)}  # noqa: E731
    # DDP403 is opt-in: off by default, on when a selection names it or a prefix of it
    assert codes(LintConfig()) == {"DDP301"}
    assert codes(LintConfig(extend_select=("DDP403",))) == {"DDP301", "DDP403"}
    assert codes(LintConfig(select=("DDP",))) == {"DDP301", "DDP403"}
    assert codes(LintConfig(select=("DDP4",))) == {"DDP403"}
    assert codes(LintConfig(ignore=("DDP3",))) == set()
    assert codes(LintConfig(select=("DDP4",), extend_select=("DDP301",))) == {"DDP301", "DDP403"}
    # the most specific pattern wins
    assert codes(LintConfig(ignore=("DDP",), extend_select=("DDP301",))) == {"DDP301"}


def test_noqa(tmp_path):
    src = BAD.replace("dist.barrier()", "dist.barrier()  # noqa: DDP301")
    assert lint_source("t.py", src) == []
    assert lint_source("t.py", BAD.replace("dist.barrier()", "dist.barrier()  # noqa")) == []
    other = lint_source("t.py", BAD.replace("dist.barrier()", "dist.barrier()  # noqa: DDP5"))
    assert [f.code for f in other] == ["DDP301"]


def test_pyproject_config(tmp_path, capsys):
    write(tmp_path, "pyproject.toml", '[tool.ddpdoctor.lint]\nignore = ["DDP301"]\nworld-sizes = "2-4"\n')
    p = write(tmp_path, "train.py", BAD)
    cfg = load_config(tmp_path / "pyproject.toml")
    assert cfg.world_sizes == (2, 3, 4) and cfg.ignore == ("DDP301",)
    assert main(["lint", str(p)]) == 0  # found by walking up from the path
    assert main(["lint", "--isolated", str(p)]) == 1


def test_pyproject_errors(tmp_path):
    write(tmp_path, "pyproject.toml", "[tool.ddpdoctor]\nselect = 'DDP'\n")
    with pytest.raises(ConfigError, match="list of rule codes"):
        load_config(tmp_path / "pyproject.toml")
    write(tmp_path, "pyproject.toml", "[tool.ddpdoctor]\nbogus = 1\n")
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(tmp_path / "pyproject.toml")
    write(tmp_path, "pyproject.toml", "[tool.ddpdoctor\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "pyproject.toml")


def test_per_file_ignores(tmp_path):
    write(tmp_path, "pyproject.toml", '[tool.ddpdoctor]\nper-file-ignores = { "legacy_*.py" = ["DDP3"] }\n')
    p = write(tmp_path, "legacy_train.py", BAD)
    assert {f.code for f in lint_paths([p], load_config(tmp_path / "pyproject.toml"), jobs=1)} == set()


def test_world_sizes_parse():
    assert parse_world_sizes("2-4,8") == (2, 3, 4, 8)
    assert parse_world_sizes([4, 2]) == (2, 4)
    for bad in ("x", "1", [2, "3"], "9-70"):
        with pytest.raises(ConfigError):
            parse_world_sizes(bad)


def test_syntax_and_encoding_errors_are_diagnostics(tmp_path):
    s = write(
        tmp_path, "broken.py", "import torch.distributed as dist\ndef f(:\n    dist.init_process_group()\n"
    )
    e = tmp_path / "latin.py"
    e.write_bytes(b"# -*- coding: ascii -*-\nimport torch.distributed\nx = '\xe9 init_process_group'\n")
    found = lint_paths([s, e], jobs=1)
    kinds = {(Path(f.location.path).name, f.code, f.evidence["kind"]) for f in found}
    assert kinds == {("broken.py", "DDP000", "syntax"), ("latin.py", "DDP000", "encoding")}
    assert next(f for f in found if f.evidence["kind"] == "syntax").location.line == 2


def test_missing_path_raises():
    with pytest.raises(LintInputError):
        lint_paths(["/definitely/not/here.py"])


def test_directory_discovery_excludes_and_parallel_matches_serial(tmp_path):
    for i in range(30):
        write(tmp_path, f"t{i}.py", BAD)
    (tmp_path / ".venv").mkdir()
    write(tmp_path / ".venv", "skip.py", BAD)
    serial = lint_paths([tmp_path], jobs=1)
    parallel = lint_paths([tmp_path], jobs=2)
    assert [f.to_dict() for f in serial] == [f.to_dict() for f in parallel]
    assert len({f.location.path for f in serial}) == 30


@pytest.mark.parametrize("fmt", ["json", "sarif", "github"])
def test_output_formats(tmp_path, capsys, fmt):
    p = write(tmp_path, "train.py", BAD)
    assert main(["lint", "--isolated", "--output-format", fmt, str(p)]) == 1
    out = capsys.readouterr().out
    if fmt == "json":
        data = json.loads(out)
        assert data[0]["code"] == "DDP301" and data[0]["location"]["line"] == 5
    elif fmt == "sarif":
        data = json.loads(out)
        assert data["version"] == "2.1.0"
        res = data["runs"][0]["results"][0]
        assert res["ruleId"] == "DDP301"
        assert res["locations"][0]["physicalLocation"]["region"]["startLine"] == 5
        assert data["runs"][0]["tool"]["driver"]["rules"][0]["id"] == "DDP301"
    else:
        assert out.startswith(f"::error file={p},line=5,col=5,title=ddpdoctor (DDP301)::DDP301 ")


def test_findings_merge_into_a_report(tmp_path):
    from ddpdoctor.core.report import Report

    findings = lint_paths([write(tmp_path, "train.py", BAD)], jobs=1)
    rep = Report.from_dict(Report(lint=findings).to_dict())
    assert rep.lint[0].location.line == 5 and rep.exit_code() == 1


def test_pre_commit_hook_file():
    import yaml

    hooks = yaml.safe_load((Path(__file__).resolve().parents[2] / ".pre-commit-hooks.yaml").read_text())
    assert hooks[0]["id"] == "ddpdoctor-lint" and hooks[0]["entry"] == "ddpdoctor lint"


def test_result_cache_hits_and_invalidates(tmp_path, monkeypatch):
    from ddpdoctor.lint import engine

    p = write(tmp_path, "train.py", BAD)
    cache = tmp_path / "cache"
    first = lint_paths([p], jobs=1, cache_dir=cache)
    assert list(cache.rglob("*.json"))
    calls = []
    real = engine.lint_source
    monkeypatch.setattr(engine, "lint_source", lambda *a, **k: calls.append(a) or real(*a, **k))
    again = lint_paths([p], jobs=1, cache_dir=cache)
    assert [f.to_dict() for f in again] == [f.to_dict() for f in first] and calls == []
    p.write_text(BAD.replace("dist.barrier()", "dist.barrier()  # noqa"))  # new content: linted again
    assert lint_paths([p], jobs=1, cache_dir=cache) == [] and len(calls) == 1
    # other settings do not reuse the entry
    assert lint_paths([p], LintConfig(world_sizes=(2,)), jobs=1, cache_dir=cache) == [] and len(calls) == 2


def test_user_rule_file(tmp_path, capsys):
    rule = write(
        tmp_path,
        "my_rule.py",
        '"""ABC001: every barrier.\n\n## What it does\n## Why is this bad?\n## Example\n## Use instead\n"""\n'
        'CODE = "ABC001"\nTITLE = "barrier"\nKIND = "script"\n\n'
        "def check(m):\n"
        "    for call in m.dist_calls('barrier'):\n"
        "        yield m.finding(CODE, call, 'a barrier', 'warning')\n",
    )
    p = write(tmp_path, "train.py", BAD)
    assert main(["lint", "--isolated", "--no-cache", "--rules", str(rule), "--select", "ABC", str(p)]) == 1
    assert f"{p}:5:5: ABC001 a barrier" in capsys.readouterr().out
    assert main(["lint", "--explain", "ABC001", "--rules", str(rule)]) == 0


def test_result_cache_key_changes_with_the_python_version(monkeypatch):
    # another Python parses differently (and parses other syntax at all): its results are not reused
    from types import SimpleNamespace

    from ddpdoctor.lint import cache

    here = cache.rules_fingerprint()
    monkeypatch.setattr(cache.sys, "implementation", SimpleNamespace(cache_tag="cpython-399"))
    assert cache.rules_fingerprint() != here


def test_syntax_an_older_python_accepted_says_what_it_is():
    head = "import torch.distributed as dist\ndist.init_process_group()\n"
    # `.cuda(async=True)` alone is renamed in place and linted (test_old_async_keyword_...); an
    # `async` the renaming leaves alone still says what it is
    assert all(f.code != "DDP000" for f in lint_source("old.py", head + "x = batch.cuda(async=True)\n"))
    found = lint_source("old.py", head + "def async(x):\n    return x\n")
    assert [f.evidence["kind"] for f in found] == ["syntax"]
    assert "line 3" in found[0].message and "keywords since Python 3.7" in found[0].message
    found = lint_source("py2.py", head + "print 'rank', dist.get_rank()\n")
    assert "Python 2 `print` statement" in found[0].message
    # a plain syntax error is not called old code
    bad = lint_source("bad.py", head + "def main(:\n    pass\n")
    assert bad[0].message == "SyntaxError: invalid syntax"


_SHADOWED = '''
import torch
import torch.distributed as dist


def load_checkpoint(model, path):
    model.load_state_dict(torch.load(path))


{second}


def main(model, path):
    dist.init_process_group("nccl")
    load_checkpoint(model, path)
'''


def test_a_def_that_a_later_def_of_the_same_name_replaces_is_not_reported():
    later = (
        "def load_checkpoint(model, path):\n"
        "    model.load_state_dict(torch.load(path, map_location='cpu'))"
    )
    alone = lint_source("t.py", _SHADOWED.format(second=""), LintConfig(select=("DDP503",)))
    assert [f.location.line for f in alone] == [7]
    replaced = lint_source("t.py", _SHADOWED.format(second=later), LintConfig(select=("DDP503",)))
    assert replaced == []
    # a decorated second def (`@overload`, `@x.setter`) does not make the first one dead
    decorated = lint_source(
        "t.py", _SHADOWED.format(second="@some.register\n" + later), LintConfig(select=("DDP503",))
    )
    assert [f.location.line for f in decorated] == [7]
