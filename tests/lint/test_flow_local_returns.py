"""Flow compares names as text, but a function's own local name is its own: ``return loader`` in a
helper that binds ``loader`` to another DataLoader does not hand out the caller's ``loader``."""

from __future__ import annotations

import ast
from pathlib import Path

from ddpdoctor.script.analysis import ModuleAnalysis
from ddpdoctor.script.flow import Flow

FIXTURE = Path(__file__).parent / "fixtures" / "DDP309_ok_helper_returns_its_own_loader.py"


def _flow_of_train_loader():
    src = FIXTURE.read_text()
    m = ModuleAnalysis(str(FIXTURE), src, ast.parse(src))
    train = next(
        c for c in m.calls_named("DataLoader") if m.enclosing_function(c).name == "main"
    )
    return m, Flow(m, [train])


def test_a_helper_returning_its_own_loader_does_not_carry_the_callers():
    m, flow = _flow_of_train_loader()
    helper_call = next(c for c, _q in m.calls if getattr(c.func, "id", None) == "get_val_loader")
    assert not flow.carries(helper_call)
    assert flow.held(ast.Name("loader"))  # the caller's own name still holds it
