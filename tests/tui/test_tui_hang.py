"""`ddpdoctor tui HANG.json`: the verdict, ranks x operations as a grid and the stacks, driven by a
Textual pilot at 80x24 on diagnoses of the real gloo evidence (tests/fixtures/hang)."""

from __future__ import annotations

import json

import pytest

from ddpdoctor.commands import tui as tui_cmd
from ddpdoctor.commands.hang import analyse
from ddpdoctor.model.hang.analysis import HangDiagnosis
from ddpdoctor.tui.views.hang import HangApp
from tests.hang.evidence_helpers import fixture

from .helpers import SIZE, screen_text

pytestmark = [pytest.mark.timeout(120)]


def saved(tmp_path, name: str) -> HangDiagnosis:
    """Diagnose a fixture, save it as `hang --json` does, and load it back as the TUI does."""
    path = tmp_path / "hang.json"
    path.write_text(json.dumps(analyse([fixture(name, tmp_path)]).to_dict()))
    loaded = tui_cmd._hang_diagnosis(str(path))
    assert isinstance(loaded, HangDiagnosis)
    return loaded


@pytest.mark.asyncio
async def test_grid_verdict_and_culprit_stack(tmp_path):
    app = HangApp(saved(tmp_path, "python_stuck"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "Verdict: rank 2 never called all_reduce #2" in text
        assert "#1 all_reduce" in text and "#2 all_reduce" in text
        rows = {
            line.split()[0]: line.split() for line in text.splitlines() if line.split()[:2][-1:] == ["vm"]
        }
        assert rows["0"][2:4] == ["ok", "wait"] and rows["2"][2:4] == ["ok", "--"]
        # the cursor starts on the culprit: its stack, innermost user frame first
        assert "rank 2 on vm: in Python, in no collective" in text
        assert "python_stuck.py:12 in wait_for_data" in text
        await pilot.press("up", "up")  # rank 0: a waiting rank
        await pilot.pause()
        text = screen_text(app)
        assert "rank 0 on vm: waiting in all_reduce #2" in text and "python_stuck.py:19 in main" in text
        await pilot.press("q")
    assert app.return_value == 1


@pytest.mark.asyncio
async def test_mismatch_cells_and_lint_on_the_stack(tmp_path):
    app = HangApp(saved(tmp_path, "barrier_rank0"))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        row0 = next(line for line in text.splitlines() if line.split()[:2] == ["0", "vm"])
        assert row0.split()[2:] == ["ok", "ok", "ok", "DIFF"]
        assert "barrier_rank0.py:9 in save_checkpoint" in text
        assert "this is DDP301" in text


@pytest.mark.asyncio
async def test_no_hang_quits_with_0(tmp_path):
    d = saved(tmp_path, "python_stuck")
    d.kind, d.culprit_ranks = "none", []
    app = HangApp(d)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
    assert app.return_value == 0


def test_broken_hang_file_is_a_clear_error(tmp_path):
    p = tmp_path / "hang.json"
    p.write_text(json.dumps({"format": "ddpdoctor-hang-diagnosis", "version": 1, "verdict": "x"}))
    assert "not a readable hang diagnosis" in tui_cmd._hang_diagnosis(str(p))
    p.write_text(json.dumps({"format": "ddpdoctor-hang-diagnosis", "version": 9}))
    assert "version 9" in tui_cmd._hang_diagnosis(str(p))
    p.write_text(json.dumps({"schema_version": 1}))
    assert tui_cmd._hang_diagnosis(str(p)) is None  # a check report: not ours to judge


def test_cli_refuses_a_broken_hang_file_before_taking_the_terminal(tmp_path):
    import subprocess
    import sys

    p = tmp_path / "hang.json"
    p.write_text(json.dumps({"format": "ddpdoctor-hang-diagnosis", "version": 1, "verdict": "x"}))
    out = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "tui", str(p)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2 and str(p) in out.stderr and "not a readable hang diagnosis" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.asyncio
async def test_g_cycles_the_process_groups(tmp_path):
    from ddpdoctor.model.hang.analysis import diagnose
    from ddpdoctor.readers.hang_files import read_evidence
    from tests.hang.evidence_helpers import entry, rank_doc, write_ranks

    groups = {
        "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"},
        "1": {"name": "1", "desc": "tp", "ranks": "[0, 1]"},
    }
    tp = ("1", "tp")
    docs = [
        rank_doc(0, 2, [entry(1), entry(1, pg=tp), entry(2, pg=tp, retired=False)], groups=groups),
        rank_doc(1, 2, [entry(1), entry(1, pg=tp)], groups=groups),
    ]
    app = HangApp(diagnose(read_evidence([write_ranks(tmp_path / "ev", docs)])))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = screen_text(app)  # opens on the group of the verdict
        assert "tp: ranks x operations · g: next of 2 groups" in text and "#2 all_reduce" in text
        row1 = next(line for line in text.splitlines() if line.split()[:1] == ["1"] and "node0" in line)
        assert row1.split()[2:4] == ["ok", "--"]
        await pilot.press("g")
        await pilot.pause()
        text = screen_text(app)
        assert "default_pg: ranks x operations" in text and "#2 all_reduce" not in text


@pytest.mark.asyncio
async def test_verify_findings_show_under_the_verdict(tmp_path):
    """What `watch --verify` found rides in the same JSON and shows in the hang view, with its lint join."""
    from ddpdoctor.model.hang.verify import RunFinding

    diag = analyse([fixture("python_stuck", tmp_path)])
    diag.verify = [RunFinding("p2p_unwaited", "/job/train.py", 11, "dist.isend(t, 1)", "an isend request made "
                              "here was never waited", [0], [], [], [{"code": "DDP202", "message": "discarded",
                              "where": "train.py:11"}], "isend", [1])]  # fmt: skip
    path = tmp_path / "hang.json"
    path.write_text(json.dumps(diag.to_dict()))
    loaded = tui_cmd._hang_diagnosis(str(path))
    assert isinstance(loaded, HangDiagnosis) and loaded.verify[0].seqs == [1]
    app = HangApp(loaded)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "watch --verify: 1 finding" in text
        assert "/job/train.py:11 (rank 0; p2p request #1): an isend request made here was never waited" in text
        assert "DDP202 at train.py:11, confirmed at run time: discarded" in text
        await pilot.press("q")
