"""DDP104: shuffle=True together with a sampler.

## What it does
Finds `DataLoader(..., sampler=..., shuffle=True)`.

## Why is this bad?
`shuffle` and `sampler` are mutually exclusive: DataLoader raises `ValueError` on every rank at
start-up. With a DistributedSampler the shuffling is the sampler's job (`shuffle=True` is its default).

## Example
```python
loader = DataLoader(ds, sampler=DistributedSampler(ds), shuffle=True)
```

## Use instead
```python
loader = DataLoader(ds, sampler=DistributedSampler(ds, shuffle=True))
```
"""

from __future__ import annotations

import ast

CODE = "DDP104"
TITLE = "shuffle=True together with a sampler"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def check(m):
    for call in m.calls_named("DataLoader"):
        # DataLoader(dataset, batch_size, shuffle, sampler, ...) by keyword or by position
        sampler = m.keyword(call, "sampler") or (call.args[3] if len(call.args) > 3 else None)
        shuffle = m.keyword(call, "shuffle") or (call.args[2] if len(call.args) > 2 else None)
        shuffled = isinstance(shuffle, ast.Constant) and shuffle.value is True
        if sampler is not None and not m.is_none(sampler) and shuffled:
            # at `shuffle=True`: in a call spread over lines, the line to change
            yield m.finding(
                CODE,
                shuffle,
                "DataLoader gets both `sampler=` and `shuffle=True`: they are "
                "mutually exclusive and DataLoader raises ValueError",
                SEVERITY,
                hint="drop `shuffle=True`; DistributedSampler shuffles (and set_epoch reseeds it)",
            )
