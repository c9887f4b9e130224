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
# why it is not in the default selection (measured with benchmarks/lint_rule_precision.py)
OPT_IN_BECAUSE = (
    "on labelled real code 1 of 3 reports was a bug (0.33): models with branches that skip "
    "parameters need `find_unused_parameters=True`, and the file rarely shows whether they do"
)


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
