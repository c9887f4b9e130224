"""DDP316: the result of an in-place collective used as a value.

## What it does
Finds a call of a `torch.distributed` collective that works in place (`all_reduce`, `broadcast`,
`all_gather`, `broadcast_object_list`, `all_gather_object`, `barrier`, ...) whose result the code
uses: bound to a name (`loss = dist.all_reduce(loss)`), indexed (`dist.broadcast_object_list([cfg],
src=0)[0]`), read (`dist.all_reduce(t).item()`), or handed on or computed with. Left alone: a call
made with `async_op=True` (by keyword or position) or with a setting the file does not fix (it then returns a work handle), a
result bound to `_`, and `dist.recv`, which returns the sender's rank.

## Why is this bad?
These functions write their output into the tensors or list they are handed and return `None`
(a work handle only with `async_op=True`). The code that reads the result gets `None`: indexing or
reading it raises `TypeError` / `AttributeError` on every rank at the first call, and a name bound to
it silently replaces the reduced tensor with `None`, to fail later, far from the cause.

## Example
```python
cfg = dist.broadcast_object_list([cfg], src=0)[0]
loss = dist.all_reduce(loss)
```

## Use instead
```python
box = [cfg]
dist.broadcast_object_list(box, src=0)
cfg = box[0]
dist.all_reduce(loss)        # loss now holds the sum
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dist_op

CODE = "DDP316"
TITLE = "Result of an in-place collective used as a value"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

# torch.distributed functions that return None unless called with async_op=True -> the position of
# async_op among their arguments (None: they have none and always return None)
_IN_PLACE = {
    "all_reduce": 3,
    "broadcast": 3,
    "reduce": 4,
    "all_gather": 3,
    "all_gather_into_tensor": 3,
    "gather": 4,
    "scatter": 4,
    "reduce_scatter": 4,
    "reduce_scatter_tensor": 4,
    "all_to_all": 3,
    "all_to_all_single": 5,
    "barrier": 1,
    "send": None,
    "broadcast_object_list": None,
    "all_gather_object": None,
    "gather_object": None,
    "scatter_object_list": None,
}


def _returns_none(op: str, call: ast.Call) -> bool:
    """Called so that it returns None: async_op not given (by keyword or position) or given False."""
    if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        return False  # `**kwargs` / `*args` may carry async_op=True
    at = _IN_PLACE[op]
    flag = next((k.value for k in call.keywords if k.arg == "async_op"), None)
    if flag is None and at is not None and len(call.args) > at:
        flag = call.args[at]
    return flag is None or (isinstance(flag, ast.Constant) and flag.value is False)


def _use(m, call: ast.Call) -> str | None:
    """How the code uses the call's result, or None where it drops it."""
    parent = m.parents.get(call)
    if isinstance(parent, ast.Expr):
        return None
    if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        if all(isinstance(t, ast.Name) and t.id == "_" for t in targets):
            return None
        return f"binds it to `{ast.unparse(targets[0])}`"
    if isinstance(parent, ast.Subscript) and parent.value is call:
        return "indexes it"
    if isinstance(parent, ast.Attribute) and parent.value is call:
        return f"reads `.{parent.attr}` of it"
    if isinstance(parent, (ast.BinOp, ast.UnaryOp)):
        return "computes with it"
    if isinstance(parent, ast.Call) and call in parent.args:
        return "hands it on"
    return None  # a return, a condition, a lambda body: left alone


def check(m):
    for call, q in m.calls:
        op = dist_op(q)
        if op not in _IN_PLACE or not _returns_none(op, call):
            continue
        use = _use(m, call)
        if use is None:
            continue
        yield m.finding(
            CODE,
            call,
            f"`{op}` works in place and returns None, but this line {use}: it gets None "
            f"({'TypeError or AttributeError on every rank' if use.startswith(('indexes', 'reads')) else 'the value is lost'})",
            SEVERITY,
            hint=f"call `{op}(...)` as a statement and read the tensor or list it was handed "
            "(`box = [obj]; dist.broadcast_object_list(box, src=0); obj = box[0]`)",
        )
