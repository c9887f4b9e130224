"""DDP202: isend/irecv whose request is never waited.

## What it does
Finds `dist.isend`/`dist.irecv` whose returned request is thrown away or never used again.

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

CODE = "DDP202"
TITLE = "isend/irecv request never waited"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def check(m):
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
        if name is None or "." in name:
            continue
        scope = m.enclosing_function(call) or m.tree
        used = any(
            isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(scope)
        )
        if not used:
            yield m.finding(
                CODE,
                call,
                f"request `{name}` from `{op}` is never waited",
                SEVERITY,
                hint=f"call `{name}.wait()` before using the buffer",
            )
