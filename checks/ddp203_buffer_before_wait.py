"""DDP203: buffer used before its isend/irecv is waited.

## What it does
Finds the buffer of an `irecv` read, or the buffer of an `isend` modified, between the call and the
`wait()` on its request.

## Why is this bad?
Until `wait()` returns the transfer may still be running: an irecv buffer can hold stale or partial
data, and changing an isend buffer can change what the peer receives. The result is silently wrong
numbers, not an error.

## Example
```python
req = dist.irecv(buf, src=0)
total += buf.sum()
req.wait()
```

## Use instead
```python
req = dist.irecv(buf, src=0)
req.wait()
total += buf.sum()
```
"""

from __future__ import annotations

import ast

CODE = "DDP203"
TITLE = "buffer used before wait"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def _waiting_helpers(m) -> set[str]:
    """Names of this file's functions and methods that call ``.wait()`` (``def sync(self, req):
    req.wait()``): handing them the request waits it."""
    cached = m.__dict__.get("_ddp203_waiters")
    if cached is None:
        # every function around a `.wait()` call, from the module's call index (no walk per function)
        cached = m.__dict__["_ddp203_waiters"] = set()
        for call in m.method_calls("wait"):
            fn = m.enclosing_function(call)
            while fn is not None:
                cached.add(fn.name)
                fn = m.enclosing_function(fn)
    return cached


def _waits(stmt: ast.AST, req: str, helpers: frozenset[str] | set[str] = frozenset()) -> bool:
    for n in ast.walk(stmt):
        if isinstance(n, ast.Call):
            f = n.func
            callee = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if callee in helpers and any(isinstance(a, ast.Name) and a.id == req for a in n.args):
                return True
            if isinstance(f, ast.Attribute) and f.attr == "wait":
                return True  # req.wait(), work.wait(), or waiting on a list that holds it
            if isinstance(f, (ast.Name, ast.Attribute)) and "wait" in (
                f.id if isinstance(f, ast.Name) else f.attr
            ):
                return True
    return False


def _touches(stmt: ast.AST, buf: str, write: bool) -> ast.AST | None:
    for n in ast.walk(stmt):
        if write:
            if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id == buf:
                return n
            if (
                isinstance(n, ast.Subscript)
                and isinstance(n.ctx, ast.Store)
                and isinstance(n.value, ast.Name)
                and n.value.id == buf
            ):
                return n
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and isinstance(n.func.value, ast.Name)
                and n.func.value.id == buf
                and (n.func.attr.endswith("_") and not n.func.attr.startswith("_"))
            ):
                return n
        elif isinstance(n, ast.Name) and n.id == buf and isinstance(n.ctx, ast.Load):
            return n
    return None


def check(m):
    for call in m.dist_calls("isend", "irecv"):
        req = m.assigned_to(call)
        buf = call.args[0] if call.args else m.keyword(call, "tensor")
        if req is None or not isinstance(buf, ast.Name):
            continue
        stmt, block = m.statement_in_block(call)
        if block is None:
            continue
        is_send = (
            isinstance(call.func, ast.Attribute)
            and call.func.attr == "isend"
            or (isinstance(call.func, ast.Name) and "isend" in call.func.id)
        )
        for later in block[block.index(stmt) + 1 :]:
            if _waits(later, req, _waiting_helpers(m)):
                break
            hit = _touches(later, buf.id, write=is_send)
            if hit is not None:
                what = "modified" if is_send else "read"
                yield m.finding(
                    CODE,
                    hit,
                    f"`{buf.id}` is {what} before the {'isend' if is_send else 'irecv'} on line "
                    f"{call.lineno} is waited: the transfer may still be running",
                    SEVERITY,
                    hint=f"call `{req}.wait()` first",
                )
                break
