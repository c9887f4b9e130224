"""DDP102: set_epoch called with a constant.

## What it does
Finds `sampler.set_epoch(0)` (any literal) in a loop instead of the epoch counter, and
`set_epoch(start_epoch)` with a variable that the loop never changes. The sampler of a held-out
split (`valid_loader.sampler.set_epoch(0)`) is left alone: it is read in order, and a fixed epoch
keeps it that way. So is a constant given to a sampler that the same loop also gives the changing
epoch (`set_epoch(epoch)` at the top, `set_epoch(0)` before an extra fixed-order pass).

## Why is this bad?
The sampler's permutation depends only on `seed + epoch`; a constant makes every epoch use the same
order, exactly as if set_epoch were never called.

## Example
```python
for epoch in range(epochs):
    sampler.set_epoch(0)
```

## Use instead
```python
for epoch in range(epochs):
    sampler.set_epoch(epoch)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.analysis import names_eval_split
from ddpdoctor.script.names import dotted

CODE = "DDP102"
TITLE = "set_epoch called with a constant"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def _unchanging_name(m, call, loop) -> str | None:
    """``set_epoch(start_epoch)`` in a loop that never changes ``start_epoch`` (a plain local name that
    is no loop variable and is not assigned inside the loop)."""
    arg = call.args[0]
    if not isinstance(arg, ast.Name):
        return None
    fn = m.enclosing_function(call)
    scope = fn if fn is not None else m.tree
    if any(isinstance(n, (ast.Global, ast.Nonlocal)) and arg.id in n.names for n in ast.walk(scope)):
        return None
    for a in m.ancestors(call):
        if isinstance(a, (ast.For, ast.AsyncFor, ast.comprehension)) and any(
            isinstance(n, ast.Name) and n.id == arg.id for n in ast.walk(a.target)
        ):
            return None
        if a is fn:
            break
    for n in ast.walk(loop):
        if isinstance(n, ast.Name) and n.id == arg.id and isinstance(n.ctx, (ast.Store, ast.Del)):
            return None
    return arg.id


def _epoch_loop(m, call):
    """The loop around ``call`` that can be the epoch loop: not one that walks over the samplers
    themselves (``for s in samplers: s.set_epoch(epoch)`` gives each sampler the same epoch, as it
    should); None when there is none in its function."""
    receiver = {n.id for n in ast.walk(call.func.value) if isinstance(n, ast.Name)}
    for a in m.ancestors(call):
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return None
        if isinstance(a, (ast.For, ast.AsyncFor)):
            if receiver & {n.id for n in ast.walk(a.target) if isinstance(n, ast.Name)}:
                continue
            return a
        if isinstance(a, ast.While):
            return a
    return None


def _given_the_epoch_too(m, call, owner: str | None, loop) -> bool:
    """The same sampler gets a changing epoch in the same loop as well (``sampler.set_epoch(epoch)``
    at the top, ``sampler.set_epoch(0)`` before a fixed-order evaluation pass): every training pass
    starts from the changing one."""
    if owner is None:
        return False
    for other in m.method_calls("set_epoch"):
        if (
            other is call
            or not other.args
            or isinstance(other.args[0], ast.Constant)
            or not isinstance(other.func, ast.Attribute)
            or dotted(other.func.value) != owner
            or _epoch_loop(m, other) is not loop
        ):
            continue
        if _unchanging_name(m, other, loop) is None:
            return True
    return False


def check(m):
    for call in m.method_calls("set_epoch"):
        loop = _epoch_loop(m, call) if isinstance(call.func, ast.Attribute) else m.enclosing_loop(call)
        if not call.args or loop is None:
            continue
        owner = dotted(call.func.value) if isinstance(call.func, ast.Attribute) else None
        if owner and names_eval_split(owner):
            continue  # `valid_queue.sampler.set_epoch(0)`: a held-out split is read in order anyway
        if _given_the_epoch_too(m, call, owner, loop):
            continue  # `set_epoch(0)` for an extra pass, after `set_epoch(epoch)` began this one
        if isinstance(call.args[0], ast.Constant):
            yield m.finding(
                CODE,
                call,
                f"`set_epoch({call.args[0].value!r})` inside a loop passes the same epoch every time: the "
                "shuffle order never changes",
                SEVERITY,
                hint="pass the loop's epoch counter",
            )
            continue
        name = _unchanging_name(m, call, loop)
        if name is not None:
            yield m.finding(
                CODE,
                call,
                f"`set_epoch({name})` inside the loop on line {loop.lineno}: `{name}` never changes in "
                "that loop, so every epoch gets the same shuffle order",
                SEVERITY,
                hint="pass the loop's epoch counter",
            )
