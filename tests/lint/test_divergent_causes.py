"""One cause, one finding: a divergence no rank test explains, in a walk where one does, is that
test's consequence (the ranks are out of step after it) and is not reported again."""

from __future__ import annotations

import ast
from types import SimpleNamespace

from ddpdoctor.script.divergent import Parting, consequences_dropped


def _part(entry: str, guarded: bool, line: int) -> Parting:
    node = ast.parse("dist.barrier()").body[0]
    node.lineno = line
    guard = SimpleNamespace(test=node, path=None) if guarded else None
    return Parting(SimpleNamespace(kind="collective"), SimpleNamespace(entry=entry), (0,), (), guard, node)


def test_unexplained_divergence_beside_a_rank_test_is_dropped():
    kept = consequences_dropped([_part("<module>", False, 30), _part("<module>", True, 12)])
    assert [p.anchor.lineno for p in kept] == [12]


def test_unexplained_divergence_alone_is_kept():
    parts = [_part("<module>", False, 30), _part("train", True, 12)]
    assert [p.anchor.lineno for p in consequences_dropped(parts)] == [30, 12]


def test_ddp301_anchors_at_an_early_exit_on_the_rank(tmp_path):
    """When no call on the way sits under a rank test, the rank test that sent some ranks out early
    (``if done and rank == 0: return``) is the line to change, not the collective far away."""
    import importlib.util
    from pathlib import Path

    from ddpdoctor.script.analysis import ModuleAnalysis
    from ddpdoctor.script.ranks import Guard

    spec = importlib.util.spec_from_file_location(
        "ddp301", Path(__file__).parents[2] / "checks" / "ddp301_divergent_collective.py"
    )
    rule = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rule)
    src = (
        "def stage(rank, done, t):\n"
        "    if done and rank == 0:\n"
        "        return {}\n"
        "    train(t)\n"
        "def train(t):\n"
        "    dist.all_reduce(t)\n"
    )
    m = ModuleAnalysis("s.py", src, ast.parse(src))
    exit_if = m.tree.body[0].body[0]
    collective = m.tree.body[1].body[0].value
    assert rule._early_exit(m, Guard(exit_if.test, "global"), collective) is exit_if
    # a plain statement right after the exit, in the same block, stays where it is
    assert rule._early_exit(m, Guard(exit_if.test, "global"), m.tree.body[0].body[1]) is None


def test_rank_leaving_the_batch_loop_is_reported_at_its_test_as_a_skipped_step():
    """``if torch.isnan(total): stop = True; break`` after the step: the rank that leaves skips the
    backward of the iterations the others still run. One finding, at that test, naming the skipped
    backward; the epoch loop's ``if stop: break`` only carries the decision on."""
    from pathlib import Path

    from ddpdoctor.lint.config import LintConfig
    from ddpdoctor.lint.engine import lint_paths

    path = Path(__file__).parent / "fixtures" / "DDP305_bad_nan_break_after_step.py"
    found = lint_paths([path], LintConfig(select=("DDP305",)), jobs=1)
    assert len(found) == 1
    assert "`break`" in found[0].message and "backward" in found[0].message
