"""DDP103: set_epoch called after the loader is iterated.

## What it does
Finds `set_epoch` called inside the batch loop or after the epoch's pass over the DataLoader.

## Why is this bad?
The DataLoader asks the sampler for its indices when iteration starts (`iter(loader)`). Calling
`set_epoch` afterwards only affects the next epoch — the first epoch's order is reused once, and with
persistent workers the change may never be seen by the epoch it was meant for.

## Example
```python
for epoch in range(start_epoch, epochs):
    for step, (x, y) in enumerate(train_loader):
        train_step(x, y)
    train_loader.sampler.set_epoch(epoch)     # too late: this epoch's order is already drawn
```

## Use instead
```python
for epoch in range(start_epoch, epochs):
    train_loader.sampler.set_epoch(epoch)     # before iter(train_loader)
    for step, (x, y) in enumerate(train_loader):
        train_step(x, y)
```
"""

from __future__ import annotations

import ast

CODE = "DDP103"
TITLE = "set_epoch called after the loader is iterated"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def check(m):
    loaders = m.loader_names()
    for call in m.method_calls("set_epoch"):
        inner = next(
            (
                a
                for a in m.ancestors(call)
                if isinstance(a, (ast.For, ast.AsyncFor)) and m.iterates_loader(a.iter, loaders)
            ),
            None,
        )
        if inner is not None:
            yield m.finding(
                CODE,
                call,
                f"`set_epoch` is called inside the loop over the loader (line "
                f"{inner.lineno}): its indices were already drawn for this epoch",
                SEVERITY,
                hint="move `set_epoch(epoch)` before the loop over the DataLoader",
            )
            continue
        stmt, body = m.statement_in_block(call)
        if body is None:
            continue
        for earlier in body[: body.index(stmt)]:
            loop = next(
                (
                    n
                    for n in ast.walk(earlier)
                    if isinstance(n, (ast.For, ast.AsyncFor)) and m.iterates_loader(n.iter, loaders)
                ),
                None,
            )
            if loop is not None and m.enclosing_loop(call) is not None:
                yield m.finding(
                    CODE,
                    call,
                    f"`set_epoch` is called after the loader was iterated (line "
                    f"{loop.lineno}) in this epoch: it only takes effect one epoch late",
                    SEVERITY,
                    hint="call `set_epoch(epoch)` before iterating the DataLoader",
                )
                break
