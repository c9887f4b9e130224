"""DDP101: DistributedSampler whose set_epoch is never called.

## What it does
Finds a shuffling `DistributedSampler` in a script with an epoch loop where `set_epoch` is never
called on any sampler.

## Why is this bad?
DistributedSampler seeds its shuffle with `seed + epoch`. Without `set_epoch(epoch)` every epoch
uses the same permutation, so each rank sees its shard in the same order every epoch — the shuffle
you asked for silently does nothing and convergence suffers.

## Example
```python
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, sampler=sampler)
for epoch in range(epochs):
    for batch in loader:
        ...
```

## Use instead
```python
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    for batch in loader:
        ...
```
"""

from __future__ import annotations

import ast

CODE = "DDP101"
TITLE = "DistributedSampler.set_epoch is never called"
KIND = "script"
SEVERITY = "warning"


def check(m):
    samplers = m.calls_named("DistributedSampler")
    if not samplers or m.method_calls("set_epoch") or not m.nodes(ast.For, ast.AsyncFor, ast.While):
        return
    for call in samplers:
        if m.keyword_is(call, "shuffle", False) or m.looks_like_eval(call):
            continue  # an unshuffled or evaluation sampler does not need set_epoch
        yield m.finding(
            CODE,
            call,
            "DistributedSampler is never given the epoch: `set_epoch` is not called, so every epoch "
            "shuffles the same way",
            SEVERITY,
            hint="call `sampler.set_epoch(epoch)` at the start of each epoch, before iterating the loader",
        )
