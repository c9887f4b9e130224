"""The per-file budgets of lint (issue 24): a file whose analysis runs past the CPU budget is cut
short and said so, as a note that does not fail the run; a file whose per-rank simulation reached
its step budget says its findings may be incomplete."""

from __future__ import annotations

from ddpdoctor.lint import engine
from ddpdoctor.lint.engine import is_budget_note, lint_paths

SCRIPT = "import torch.distributed as dist\ndist.init_process_group('gloo')\n"


def _many_functions(n: int) -> str:
    body = "".join(
        f"def f{i}(x):\n    if dist.get_rank() == {i % 3}:\n        dist.barrier()\n    return x + {i}\n\n"
        for i in range(n)
    )
    return SCRIPT + body + "".join(f"f{i}(1)\n" for i in range(n))


def test_a_file_past_the_cpu_budget_is_cut_short_and_said(tmp_path, monkeypatch):
    f = tmp_path / "big.py"
    f.write_text(_many_functions(400))
    monkeypatch.setattr(engine, "FILE_CPU_BUDGET_S", 0.01)
    found = lint_paths([f], jobs=1)
    notes = [x for x in found if is_budget_note(x)]
    assert notes and "CPU budget" in notes[0].message and notes[0].location.path == str(f)


def test_the_step_budget_is_said(tmp_path, monkeypatch):
    from ddpdoctor.script import analysis

    monkeypatch.setattr(analysis, "MAX_FILE_STEPS", 1)
    f = tmp_path / "steps.py"
    f.write_text(_many_functions(20))
    found = lint_paths([f], jobs=1)
    assert any(is_budget_note(x) and "step budget" in x.message for x in found)


def test_a_budget_note_does_not_fail_lint(tmp_path, monkeypatch, capsys):
    from ddpdoctor.cli import main

    f = tmp_path / "ok.py"
    # parsing alone takes far longer than the budget: the profiling timer counts CPU time in
    # scheduler ticks (4 ms at HZ=250), so a file parsed in a few ms may run out only sometimes
    f.write_text(_many_functions(3000))
    monkeypatch.setattr(engine, "FILE_CPU_BUDGET_S", 0.001)
    rc = main(["lint", "--no-cache", "--select", "DDP000", str(f)])
    out = capsys.readouterr().out
    assert "CPU budget" in out and rc == 0


def test_a_file_cut_short_by_steps_is_cached_and_one_cut_by_time_is_not(tmp_path, monkeypatch):
    """The step budget gives the same answer every time: a warm cache keeps it (torch's largest
    test file was re-analysed on every warm run). The CPU budget depends on the machine's load: such
    a file is analysed again next time."""
    from ddpdoctor.lint import LintConfig
    from ddpdoctor.lint.cache import ResultCache
    from ddpdoctor.script import analysis

    f = tmp_path / "steps.py"
    f.write_text(_many_functions(20))
    config = LintConfig()
    monkeypatch.setattr(analysis, "MAX_FILE_STEPS", 1)
    cache = ResultCache(tmp_path / "cache", "key")
    found = engine.lint_file(f, config, cache=cache)
    assert any(is_budget_note(x) and x.evidence["limit"] == "steps" for x in found)
    assert cache.get(str(f), f.read_bytes()) is not None

    g = tmp_path / "slow.py"
    g.write_text(_many_functions(400))
    monkeypatch.setattr(engine, "FILE_CPU_BUDGET_S", 0.01)
    found = engine.lint_file(g, config, cache=cache)
    assert any(is_budget_note(x) and x.evidence["limit"] == "cpu" for x in found)
    assert cache.get(str(g), g.read_bytes()) is None
