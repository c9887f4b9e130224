"""``writers.every_rank_reaches`` answers the same whatever was asked before it: a "no" found while a
caller was still being explored is not kept (rules share the per-file cache, so one rule's
question must not change another's answer)."""

from __future__ import annotations

import ast

from ddpdoctor.script.analysis import ModuleAnalysis
from ddpdoctor.script.writers import every_rank_reaches

SOURCE = '''
import torch.distributed as dist


def f1():
    f2()


def f2(again=False):
    open("shared.txt", "w").write("x")
    if again:
        f1()


dist.init_process_group("gloo")
if dist.get_rank() == 0:
    f2()
f1()
'''


def _analysis() -> ModuleAnalysis:
    return ModuleAnalysis("cycle.py", SOURCE, ast.parse(SOURCE))


def _write(m: ModuleAnalysis) -> ast.Call:
    return next(c for c, _q in m.calls if ast.unparse(c.func).endswith(".write"))


def _f1_call(m: ModuleAnalysis) -> ast.Call:
    return next(c for c, _q in m.calls if isinstance(c.func, ast.Name) and c.func.id == "f2" and c.lineno == 6)


def test_the_answer_does_not_depend_on_what_was_asked_first():
    fresh = _analysis()
    alone = every_rank_reaches(fresh, _write(fresh))
    m = _analysis()
    assert every_rank_reaches(m, _f1_call(m))  # f1 is called at module level on every rank
    assert every_rank_reaches(m, _write(m)) == alone
    assert alone  # f2 runs on every rank through f1
