"""DDP102: set_epoch called with a constant.

## What it does
Finds `sampler.set_epoch(0)` (any literal) instead of the epoch counter.

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

CODE = "DDP102"
TITLE = "set_epoch called with a constant"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def check(m):
    for call in m.method_calls("set_epoch"):
        if call.args and isinstance(call.args[0], ast.Constant) and m.enclosing_loop(call) is not None:
            yield m.finding(
                CODE,
                call,
                f"`set_epoch({call.args[0].value!r})` inside a loop passes the same epoch every time: the "
                "shuffle order never changes",
                SEVERITY,
                hint="pass the loop's epoch counter",
            )
