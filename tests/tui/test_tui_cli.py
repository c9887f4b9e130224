"""`ddpdoctor tui` argument handling: clear errors (exit 2) before any terminal takeover."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from ddpdoctor.cli import main as cli_main
from ddpdoctor.commands import tui as tui_cmd

from .helpers import DATA


def parse(*argv: str):
    import argparse

    p = argparse.ArgumentParser()
    tui_cmd.add_arguments(p)
    return p.parse_args(list(argv))


def test_live_options_pass_on_to_check():
    argv = shlex.split(
        "--nodes 2 --nproc-per-node 4 --backend gloo --select P2P --skip BW002 -- --max-size 1M"
    )
    args = parse(*argv)
    tui_cmd.fix_passthrough(args)
    assert args.report is None
    assert tui_cmd.check_args(args) == [a for a in argv if a != "--"]


def test_report_then_options_are_not_swallowed():
    args = parse("r.json", "--lint", "x.py")
    assert (args.report, args.lint, args.passthrough) == ("r.json", ["x.py"], [])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["no-such-report.json"], "cannot read report"),
        ([str(DATA / "train_bad.py")], "not valid JSON"),
        ([str(DATA / "report_2x2_gloo.json"), "--lint", "x.py"], "not both"),
        ([str(DATA / "report_2x2_gloo.json"), "--nodes", "2"], "need no REPORT.json"),
        (["--lint", "no/such/dir"], "no such file or folder"),
    ],
)
def test_bad_input_exits_2_with_a_message(argv, message, capsys):
    assert cli_main(["tui", *argv]) == 2
    assert message in capsys.readouterr().err


def test_pure_modules_import_neither_textual_nor_torch():
    code = (
        "import sys\n"
        "import ddpdoctor.commands.tui, ddpdoctor.tui.adapt, ddpdoctor.tui.livestate\n"
        "import ddpdoctor.tui.charts, ddpdoctor.tui.live, ddpdoctor.tui.bindings, ddpdoctor.tui.source\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'torch'))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_lint_engine_is_called_with_the_paths_when_present(monkeypatch):
    import ddpdoctor.lint
    from ddpdoctor.core.report import Finding

    seen = []

    def fake_lint_paths(paths):
        seen.append(paths)
        return [Finding("DDP101", "error", "m", location={"path": "t.py", "line": 3}).to_dict()]

    monkeypatch.setattr(ddpdoctor.lint, "lint_paths", fake_lint_paths, raising=False)
    run_lint = tui_cmd._lint_callable(["t.py"])
    report = run_lint()  # the app calls it in a worker thread
    assert seen == [["t.py"]]
    assert [(f.code, f.location.line) for f in report.lint] == [("DDP101", 3)]
