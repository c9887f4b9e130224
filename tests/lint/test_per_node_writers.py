"""Messages of the per-node checkpoint writers (DDP506) and the launch-mode test around another
module's checkpoint helper (DDP501): they name what lets the other processes through."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.lint import LintConfig, lint_source

FIXTURES = Path(__file__).parent / "fixtures"


def _findings(name: str, code: str):
    path = FIXTURES / name
    # select the rule asked about on top of the defaults (DDP506 is one of them since 2026-11-27)
    config = LintConfig(extend_select=(code,))
    return [f for f in lint_source(str(path), path.read_bytes(), config) if f.code == code]


def test_per_node_test_in_a_trainer_module_names_the_other_side():
    (found,) = _findings("DDP506_bad_per_node_trainer_module.py", "DDP506")
    assert "opts.rank % gpus_per_node == 0" in found.message
    assert "where `not opts.spawn` holds, every process writes it" in found.message


def test_launch_mode_test_around_a_helper_names_the_flag_and_the_call():
    (found,) = _findings("DDP501_bad_launch_mode_helper.py", "DDP501")
    assert "`--spawn`" in found.message
    assert "DDP501_bad_launch_mode_helper.py:23" in found.message  # the helper call it keeps
    assert "one writer per node" in found.message


def test_a_checkpoint_helper_is_known_by_its_words_with_or_without_underscores():
    """``save_check_point`` (Post2Vec's util) says checkpoint as ``save_checkpoint`` does; a plot
    saver does not."""
    import ast

    from ddpdoctor.script.analysis import ModuleAnalysis
    from ddpdoctor.script.writers import checkpoint_helper_call

    src = (
        "from util.util import save_check_point, save_checkpoint, save_figure\n"
        "save_check_point(model, path)\n"
        "save_checkpoint(model, path)\n"
        "save_figure(fig, path)\n"
    )
    m = ModuleAnalysis("t.py", src, ast.parse(src))
    calls = {c.func.id: checkpoint_helper_call(m, c) for c, _q in m.calls}
    assert calls == {"save_check_point": True, "save_checkpoint": True, "save_figure": False}
