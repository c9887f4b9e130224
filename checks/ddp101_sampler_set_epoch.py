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

from ddpdoctor.lint.flow import Flow, repeats

CODE = "DDP101"
TITLE = "DistributedSampler.set_epoch is never called"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def _iterations(m, loaders: Flow):
    """Loops over one of the loaders (``for b in loader``, ``enumerate(self.loaders["train"])``)."""
    for loop in m.nodes(ast.For, ast.AsyncFor):
        for n in ast.walk(loop.iter):
            if isinstance(n, (ast.Name, ast.Attribute, ast.Subscript)) and loaders.held(n):
                yield loop
                break


def _epoch_pass(m, sampler_call):
    """(loader call, loop over it, call lines that repeat that loop) when this file iterates the
    sampler's loader once per epoch; None when the loader goes to code this file does not show."""
    samplers = Flow(m, [sampler_call])
    made = [dl for dl in m.calls_named("DataLoader") if samplers.carries(m.keyword(dl, "sampler"))]
    if not made:
        return None
    loaders = Flow(m, made)
    for loop in _iterations(m, loaders):
        again = repeats(m, loop)
        if again is not None:
            loader = min(made, key=lambda c: abs(c.lineno - sampler_call.lineno))
            return loader, loop, again
    return None


def check(m):
    samplers = m.calls_named("DistributedSampler")
    if not samplers or m.method_calls("set_epoch") or not m.nodes(ast.For, ast.AsyncFor, ast.While):
        return
    for call in samplers:
        if m.keyword_is(call, "shuffle", False) or m.looks_like_eval(call):
            continue  # an unshuffled or evaluation sampler does not need set_epoch
        found = _epoch_pass(m, call)
        if found is None:
            continue  # the loader goes to code in another file, which may well call set_epoch
        loader, loop, again = found
        chain = m.chain_text((call.lineno, loader.lineno, *again), loop.lineno)
        where = f"line {loop.lineno}"
        fn = m.enclosing_function(loop)
        if fn is not None and len(again) > 1:
            where += f" (in `{fn.name}`, run once per pass of the loop on line {again[0]})"
        yield m.finding(
            CODE,
            call,
            f"DistributedSampler is never given the epoch: its loader is iterated every epoch at {where} "
            f"but `set_epoch` is never called, so every epoch shuffles the same way [{chain}]",
            SEVERITY,
            hint="call `sampler.set_epoch(epoch)` at the start of each epoch, before iterating the loader",
            chain=chain,
        )
