"""DDP601: gradient accumulation without no_sync().

## What it does
Finds a DDP training loop that calls `backward()` every iteration but steps the optimizer only every
k-th iteration (`if (step + 1) % accum == 0:`), without using `model.no_sync()`.

## Why is this bad?
Every `backward()` of a DDP model all-reduces all gradients. With accumulation only the last
backward's all-reduce is needed; the others move the whole model's gradients over the network for
nothing — with k accumulation steps, k-1 of every k all-reduces are wasted.

## Example
```python
for step, batch in enumerate(loader):
    loss = model(batch).mean() / accum
    loss.backward()
    if (step + 1) % accum == 0:
        optimizer.step(); optimizer.zero_grad()
```

## Use instead
```python
for step, batch in enumerate(loader):
    sync = (step + 1) % accum == 0
    with (contextlib.nullcontext() if sync else model.no_sync()):
        (model(batch).mean() / accum).backward()
    if sync:
        optimizer.step(); optimizer.zero_grad()
```
"""

from __future__ import annotations

import ast

CODE = "DDP601"
TITLE = "Gradient accumulation without no_sync"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def _is_accum_test(test: ast.AST) -> bool:
    return any(
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(test)
    ) or "accum" in ast.unparse(test)


def check(m):
    if not m.ddp_constructors or m.mentions(
        "no_sync", "require_backward_grad_sync", ".accumulate(", "static_graph"
    ):
        return
    for call in m.method_calls("step"):
        if_node = next((a for a in m.ancestors(call) if isinstance(a, ast.If)), None)
        loop = m.enclosing_loop(call)
        if if_node is None or loop is None or not _is_accum_test(if_node.test):
            continue
        if not any(a is loop for a in m.ancestors(if_node)):
            continue
        backward = next(
            (
                c
                for c in ast.walk(loop)
                if isinstance(c, ast.Call)
                and isinstance(c.func, ast.Attribute)
                and c.func.attr == "backward"
                and not any(a is if_node for a in m.ancestors(c))
            ),
            None,
        )
        if backward is not None:
            yield m.finding(
                CODE,
                backward,
                f"gradients are accumulated (optimizer steps under the condition on line "
                f"{if_node.lineno}) but every backward all-reduces: use `model.no_sync()` on the "
                "accumulation steps",
                SEVERITY,
                hint="wrap non-final accumulation steps in `with model.no_sync():`",
            )
            return
