"""DDP433: a model with no parameter that requires a gradient wrapped in DistributedDataParallel.

## What it does
Finds a model frozen whole (`for p in ref_model.parameters(): p.requires_grad = False`, or
`ref_model.requires_grad_(False)`) and then, in the same function and with nothing unfreezing it
on the way, wrapped in DistributedDataParallel, directly or through the project's DDP helper
(`wrap_model_distributed(ref_model, rank)`). The frozen reference model of DPO and the teacher of
distillation are the usual cases.

## Why is this bad?
DDP exists to all-reduce gradients, and refuses a module that has none to reduce:
`RuntimeError: DistributedDataParallel is not needed when a module doesn't have any parameter that
requires a gradient`, on every rank, at the wrap (tests/test_torch_facts_for_lint.py runs it against
the installed torch). A model that only runs forwards needs no wrapper: every rank holds the same
frozen weights already.

## Example
```python
for p in ref_model.parameters():
    p.requires_grad = False
ref_model = DDP(ref_model, device_ids=[rank])
```

## Use instead
```python
ref_model.requires_grad_(False)
ref_model.to(rank)          # no DDP: nothing to all-reduce
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dotted
from ddpdoctor.script.nodes import walk

CODE = "DDP433"
TITLE = "DDP around a frozen model"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

_MOVES = frozenset(("to", "cuda", "eval", "half", "float", "bfloat16"))


def check(m):
    for wrap in (*m.ddp_constructors, *m.ddp_wrapper_calls):
        target = wrap.args[0] if wrap.args else m.keyword(wrap, "module")
        while isinstance(target, ast.Call) and isinstance(target.func, ast.Attribute) and target.func.attr in _MOVES:
            target = target.func.value  # `DDP(ref_model.to(rank))`: the model moved, still frozen
        name = dotted(target) if target is not None else None
        if not name:
            continue
        scope = m.enclosing_function(wrap) or m.tree
        freeze = _frozen_before(m, scope, name, wrap)
        if freeze is None:
            continue
        yield m.finding(
            CODE,
            wrap,
            f"`{name}` is frozen whole on line {freeze.lineno} (no parameter requires a gradient), and "
            "DistributedDataParallel refuses such a module: RuntimeError on every rank at this wrap",
            SEVERITY,
            hint=f"leave `{name}` unwrapped (it only runs forwards), or unfreeze what it trains before wrapping",
        )


def _frozen_before(m, scope, name: str, wrap: ast.Call) -> ast.stmt | None:
    """The last statement before ``wrap`` that freezes ``name`` whole, when nothing after it (up to
    the wrap) unfreezes or rebinds it, and it runs whenever the wrap does."""
    found = None
    for st in walk(scope):
        if not isinstance(st, ast.stmt) or not st.lineno < wrap.lineno:
            continue
        if _freezes(st, name):
            found = st
        elif found is not None and st.lineno > found.lineno and (_unfreezes(st, name) or _rebinds(st, name)):
            found = None
    if found is None or not _runs_with(m, found, wrap):
        return None
    return found


def _freezes(st: ast.stmt, name: str) -> bool:
    if isinstance(st, ast.For) and _parameters_of(st.iter, name) and isinstance(st.target, ast.Name):
        p = st.target.id
        return any(_sets_grad(s, p, False) for s in st.body)  # a direct statement: every parameter
    if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
        return _requires_grad_call(st.value, name, False)
    return False


def _parameters_of(it: ast.AST, name: str) -> bool:
    return (
        isinstance(it, ast.Call)
        and isinstance(it.func, ast.Attribute)
        and it.func.attr == "parameters"
        and dotted(it.func.value) == name
        and not it.args
    )


def _sets_grad(st: ast.stmt, p: str, value: bool) -> bool:
    if isinstance(st, ast.Assign):
        return (
            any(isinstance(t, ast.Attribute) and t.attr == "requires_grad" and dotted(t.value) == p for t in st.targets)
            and isinstance(st.value, ast.Constant)
            and st.value.value is value
        )
    return isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and _requires_grad_call(st.value, p, value)


def _requires_grad_call(call: ast.Call, name: str, value: bool) -> bool:
    """``name.requires_grad_(False)`` (also after ``.eval()``)."""
    f = call.func
    if not (isinstance(f, ast.Attribute) and f.attr == "requires_grad_"):
        return False
    owner = f.value
    if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Attribute) and owner.func.attr in ("eval", "train"):
        owner = owner.func.value
    if dotted(owner) != name:
        return False
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "requires_grad"), None)
    given = True if arg is None else (arg.value if isinstance(arg, ast.Constant) else None)
    return given is value


def _unfreezes(st: ast.stmt, name: str) -> bool:
    """Anything that may make a parameter of ``name`` trainable again."""
    text = ast.unparse(st) if isinstance(st, (ast.Expr, ast.Assign, ast.For)) else ""
    return name in text and ("requires_grad = True" in text or "requires_grad_(True)" in text or "requires_grad_()" in text)


def _rebinds(st: ast.stmt, name: str) -> bool:
    return isinstance(st, ast.Assign) and any(dotted(t) == name for t in st.targets)


def _runs_with(m, freeze: ast.stmt, wrap: ast.Call) -> bool:
    """The freeze sits in a block that holds the wrap too (or one around it): not in an ``if`` arm
    the wrap may run without."""
    _stmt, block = m.statement_in_block(freeze)
    if block is None:
        return False
    ids = {id(s) for s in block}
    return any(id(a) in ids for a in m.ancestors(wrap))
