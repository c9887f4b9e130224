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

from ddpdoctor.lint.names import dotted

CODE = "DDP101"
TITLE = "DistributedSampler.set_epoch is never called"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def _loaders_of(m, sampler_call) -> set[str]:
    """Names of the DataLoaders built on this sampler (`sampler=s` or `sampler=DistributedSampler(...)`)."""
    name = m.assigned_to(sampler_call)
    out = set()
    for dl in m.calls_named("DataLoader"):
        arg = m.keyword(dl, "sampler")
        if arg is sampler_call or (name is not None and arg is not None and ast.unparse(arg) == name):
            target = m.assigned_to(dl)
            if target:
                out.add(target)
    return out


def _epochs_run_here(m, sampler_call) -> bool:
    """A loop in this file iterates the sampler's loader, or hands it to a function of this file."""
    loaders = _loaders_of(m, sampler_call)
    if not loaders:
        return False
    own = {f.name for f in m.functions}
    for loop in m.nodes(ast.For, ast.AsyncFor):
        if any(dotted(n) in loaders for n in ast.walk(loop.iter) if isinstance(n, (ast.Name, ast.Attribute))):
            return True
    for call, _q in m.calls:
        callee = (dotted(call.func) or "").rsplit(".", 1)[-1]
        if callee in own and any(dotted(a) in loaders for a in call.args):
            return True
    return False


def check(m):
    samplers = m.calls_named("DistributedSampler")
    if not samplers or m.method_calls("set_epoch") or not m.nodes(ast.For, ast.AsyncFor, ast.While):
        return
    for call in samplers:
        if m.keyword_is(call, "shuffle", False) or m.looks_like_eval(call):
            continue  # an unshuffled or evaluation sampler does not need set_epoch
        if not _epochs_run_here(m, call):
            continue  # the loader goes to code in another file, which may well call set_epoch
        yield m.finding(
            CODE,
            call,
            "DistributedSampler is never given the epoch: `set_epoch` is not called, so every epoch "
            "shuffles the same way",
            SEVERITY,
            hint="call `sampler.set_epoch(epoch)` at the start of each epoch, before iterating the loader",
        )
