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
