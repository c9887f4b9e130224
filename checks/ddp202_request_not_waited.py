"""DDP202: an isend/irecv request or an async collective handle never waited.

## What it does
Finds `dist.isend`/`dist.irecv` whose returned request is thrown away, never used again, overwritten
by the next assignment before anything looks at it, or kept in one variable inside a loop that only
uses it after the loop (so only the last iteration's request is waited). Also a collective started
with `async_op=True` as a statement of its own (`dist.all_reduce(p.grad, async_op=True)`), whose
work handle is thrown away.

## Why is this bad?
The operation is only known to be finished after `req.wait()`. Without it the received buffer may
still be empty when read, a sent buffer may be reused too early, and with NCCL the pending operation
can block the next collective or leak until the process group is destroyed.

## Example
```python
dist.isend(tensor, dst=1)
```

## Use instead
```python
req = dist.isend(tensor, dst=1)
req.wait()
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.interp import COLLECTIVES
from ddpdoctor.script.names import dotted

CODE = "DDP202"
TITLE = "isend/irecv request or async collective handle never waited"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def check(m):
    for call in _async_collectives_dropped(m):
        op = call.func.attr if isinstance(call.func, ast.Attribute) else "collective"
        yield m.finding(
            CODE,
            call,
            f"`{op}(..., async_op=True)` returns a work handle that is discarded: nothing waits for "
            "it, so the code after it reads or changes the tensor while the collective may still be "
            "running",
            SEVERITY,
            hint="keep the handle and call `.wait()` before using the tensor (or drop async_op)",
        )
    for call, msg in _batch_not_waited(m):
        yield m.finding(CODE, call, msg, SEVERITY, hint="wait every request (`for r in reqs: r.wait()`)")
    for call in m.dist_calls("isend", "irecv"):
        parent = m.parents.get(call)
        op = call.func.attr if isinstance(call.func, ast.Attribute) else "isend/irecv"
        if isinstance(parent, ast.Expr):
            yield m.finding(
                CODE,
                call,
                f"the request returned by `{op}` is discarded: nothing waits for it",
                SEVERITY,
                hint="keep the request and call `.wait()` before using the buffer",
            )
            continue
        name = m.assigned_to(call)
        if name is not None and "." in name:
            if _attribute_never_read(m, name):
                yield m.finding(
                    CODE,
                    call,
                    f"request `{name}` from `{op}` is kept in an attribute that nothing in this file "
                    "reads: it is never waited, and the next call replaces it",
                    SEVERITY,
                    hint=f"wait it before it is replaced (`if {name} is not None: {name}.wait()`)",
                )
            continue
        if name is None:
            continue
        scope = m.enclosing_function(call) or m.tree
        uses = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name]
        loads = [n for n in uses if isinstance(n.ctx, ast.Load)]
        if not loads:
            yield m.finding(
                CODE,
                call,
                f"request `{name}` from `{op}` is never waited",
                SEVERITY,
                hint=f"call `{name}.wait()` before using the buffer",
            )
            continue
        lost = _overwritten(m, call, name, uses) or _dropped_in_loop(m, call, loads)
        if lost:
            yield m.finding(
                CODE,
                call,
                f"request `{name}` from `{op}` {lost}: that operation is never waited",
                SEVERITY,
                hint="keep every request (`reqs.append(dist.isend(...))`) and wait all of them",
            )


def _async_collectives_dropped(m):
    """``dist.all_reduce(p.grad, async_op=True)`` as a statement of its own: the handle that says
    when the result is there is thrown away."""
    for call in m.dist_calls(*COLLECTIVES):
        flag = m.keyword(call, "async_op")
        if (
            isinstance(flag, ast.Constant)
            and flag.value is True
            and isinstance(m.parents.get(call), ast.Expr)
            and not _expected_to_raise(m, call)
        ):
            yield call


def _expected_to_raise(m, call) -> bool:
    """Inside ``with pytest.raises(...)`` / ``self.assertRaises...(...)``: the call is meant to fail."""
    for a in m.ancestors(call):
        if isinstance(a, (ast.With, ast.AsyncWith)) and any(
            isinstance(i.context_expr, ast.Call) and "raises" in (dotted(i.context_expr.func) or "").lower()
            for i in a.items
        ):
            return True
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
    return False


def _batch_not_waited(m):
    """``batch_isend_irecv`` returns one request per op: dropping the list, or keeping it in a name
    nothing reads again, leaves every op unwaited (the same as a dropped ``isend``)."""
    for call in m.dist_calls("batch_isend_irecv"):
        if _expected_to_raise(m, call):
            continue
        if isinstance(m.parents.get(call), ast.Expr):
            yield call, "the requests returned by `batch_isend_irecv` are discarded: nothing waits for them"
            continue
        kept = _keeps_one(m, call)
        if kept is not None:
            yield call, (
                f"`batch_isend_irecv(...){kept}` keeps one request of a batch of several ops: backends "
                "other than NCCL (Gloo, MPI) return one request per op, and the others are never waited"
            )
            continue
        name = m.assigned_to(call)
        if name is not None and "." in name:
            if _attribute_never_read(m, name):
                yield call, (
                    f"the requests `{name}` from `batch_isend_irecv` are kept in an attribute that "
                    "nothing in this file reads: they are never waited"
                )
            continue
        if name is None:
            continue
        scope = m.enclosing_function(call) or m.tree
        if not any(
            isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(scope)
        ):
            yield call, f"the requests `{name}` from `batch_isend_irecv` are never waited"


def _keeps_one(m, call: ast.Call) -> str | None:
    """``.pop()``, ``[0]`` or ``[-1]`` on the request list of a batch that holds several ops (a list
    literal of two or more, or a list the function fills by two or more ``append``/``extend``): the
    text of the access, else None. One op, or a list of unknown length, keeps its only request."""
    parent = m.parents.get(call)
    if isinstance(parent, ast.Attribute) and parent.attr == "pop":
        grand = m.parents.get(parent)
        if not (isinstance(grand, ast.Call) and grand.func is parent and not grand.args):
            return None
        kept = ".pop()"
    elif isinstance(parent, ast.Subscript) and parent.value is call and isinstance(parent.slice, (ast.Constant, ast.UnaryOp)):
        kept = f"[{ast.unparse(parent.slice)}]"
    else:
        return None
    ops = call.args[0] if call.args else m.keyword(call, "p2p_op_list")
    return kept if ops is not None and _several_ops(m, call, ops) else None


def _several_ops(m, call: ast.Call, ops: ast.AST) -> bool:
    if isinstance(ops, (ast.List, ast.Tuple)):
        return len(ops.elts) >= 2
    if not isinstance(ops, ast.Name):
        return False
    scope = m.enclosing_function(call) or m.tree
    added = 0
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == ops.id for t in node.targets):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                added += len(node.value.elts)
            else:
                return False  # filled from elsewhere as well: its length is not ours to count
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("append", "extend")
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == ops.id
        ):
            added += 1
    return added >= 2


def _pos(n: ast.AST) -> tuple[int, int]:
    return (n.lineno, n.col_offset)


def _overwritten(m, call: ast.Call, name: str, uses: list[ast.Name]) -> str | None:
    """The next mention of ``name`` after this assignment stores into it again."""
    stmt = m.parents.get(call)
    after = sorted((n for n in uses if _pos(n) > _pos(stmt) and n.lineno > stmt.lineno), key=_pos)
    if after and isinstance(after[0].ctx, ast.Store):
        nxt = after[0]
        if m.enclosing_loop(nxt) is m.enclosing_loop(call) and not m.conditional(nxt):
            return f"is overwritten on line {nxt.lineno} before it is waited"
    return None


def _dropped_in_loop(m, call: ast.Call, loads: list[ast.Name]) -> str | None:
    """Assigned in a loop, looked at only after the loop: earlier iterations' requests are lost."""
    loop = m.enclosing_loop(call)
    if loop is None:
        return None
    inside = [n for n in loads if any(a is loop for a in m.ancestors(n))]
    if inside:
        return None
    return f"is replaced on every pass of the loop on line {loop.lineno} and only looked at after it"


def _attribute_never_read(m, name: str) -> bool:
    """``self.send_req = dist.isend(...)`` where no code of the file ever reads an attribute of that
    name (``x.send_req``, ``getattr(x, "send_req")``): nobody can wait it. Another file could, but a
    request kept for another module is rare next to one simply forgotten."""
    attr = name.rsplit(".", 1)[-1]
    for node in m.nodes(ast.Attribute):
        if node.attr == attr and isinstance(node.ctx, ast.Load):
            return False
    return not any(isinstance(c.value, str) and c.value == attr for c in m.nodes(ast.Constant))
