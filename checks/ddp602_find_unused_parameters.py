"""DDP602: find_unused_parameters=True.

## What it does
Finds `DistributedDataParallel(..., find_unused_parameters=True)`.

## Why is this bad?
DDP then traverses the autograd graph from the outputs after every forward to find parameters that
got no gradient — extra CPU time every iteration — and the bucket order cannot be rebuilt to match
gradient readiness (unless static_graph). Most models use all their parameters, so it is pure cost;
turn it on only if DDP tells you some parameters were unused.

## Example
```python
model = DDP(model, device_ids=[local_rank], find_unused_parameters=True)
```

## Use instead
```python
model = DDP(model, device_ids=[local_rank])   # or static_graph=True if the unused set never changes
```
"""

from __future__ import annotations

CODE = "DDP602"
TITLE = "find_unused_parameters=True"
KIND = "script"
SEVERITY = "info"
CONFIDENCE = "low"


def check(m):
    for call in m.ddp_constructors:
        if m.keyword_is(call, "find_unused_parameters", True) and not m.keyword_is(
            call, "static_graph", True
        ):
            yield m.finding(
                CODE,
                call,
                "`find_unused_parameters=True` walks the autograd graph every iteration and "
                "keeps DDP's bucket order from adapting",
                SEVERITY,
                hint="drop it unless DDP reports unused parameters; prefer static_graph=True",
            )
