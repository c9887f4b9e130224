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

CODE = "DDP104"
TITLE = "shuffle=True together with a sampler"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def check(m):
    for call in m.calls_named("DataLoader"):
        sampler = m.keyword(call, "sampler")
        if sampler is not None and not m.is_none(sampler) and m.keyword_is(call, "shuffle", True):
            yield m.finding(
                CODE,
                call,
                "DataLoader gets both `sampler=` and `shuffle=True`: they are "
                "mutually exclusive and DataLoader raises ValueError",
                SEVERITY,
                hint="drop `shuffle=True`; DistributedSampler shuffles (and set_epoch reseeds it)",
            )
