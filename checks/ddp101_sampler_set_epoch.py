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
from pathlib import Path

from ddpdoctor.script.flow import Flow, repeats
from ddpdoctor.script.loaders import loader_calls, made_by_factory, passes, sampler_calls
from ddpdoctor.script.names import dotted

CODE = "DDP101"
TITLE = "DistributedSampler.set_epoch is never called"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def _epoch_pass(m, sampler_call):
    """(loader call, loop over it, chain of (file, line) that repeats that loop) when the project
    iterates the sampler's loader once per epoch; None when the loader goes to code it does not show,
    or to another file that calls set_epoch."""
    made = loader_calls(m, Flow(m, [sampler_call]))
    if not made:
        return None
    loader = min(made, key=lambda c: abs(c.lineno - sampler_call.lineno))
    loaders = Flow(m, made)
    for loop in passes(m, loaders):
        again = repeats(m, loop)
        if again is not None:
            return loader, loop, [(m.path, ln) for ln in (*again, loop.lineno)]
    return _epoch_pass_elsewhere(m, loader, loaders)


def _handed_on(m, loaders: Flow):
    """(call, parameter name, other module, def) for each call that hands a loader to a function of
    another file of the project."""
    for call, _q in m.calls:
        if not any(loaders.carries(a) for a in (*call.args, *(k.value for k in call.keywords))):
            continue
        found = m.resolve(dotted(call.func))
        if found is None:
            continue
        other, fn = found
        params = [*fn.args.posonlyargs, *fn.args.args]
        for i, a in enumerate(call.args):
            if i < len(params) and loaders.carries(a):
                yield call, params[i].arg, other, fn
        names = {p.arg for p in (*params, *fn.args.kwonlyargs)}
        for k in call.keywords:
            if k.arg in names and loaders.carries(k.value):
                yield call, k.arg, other, fn


def _epoch_pass_elsewhere(m, loader, loaders: Flow):
    if m.project is None:
        return None
    for call, param, other, fn in _handed_on(m, loaders):
        if other.method_calls("set_epoch"):
            return None  # that file takes care of the epochs (or at least knows about them)
        there = Flow(other, [], {param: fn.lineno})
        for loop in passes(other, there):
            if not any(a is fn for a in other.ancestors(loop)):
                continue
            again_there = repeats(other, loop)
            if again_there is not None and again_there[0] != loop.lineno:
                chain = [(m.path, call.lineno), *((other.path, ln) for ln in (*again_there, loop.lineno))]
                return loader, loop, chain
            again_here = repeats(m, call)
            if again_here is not None or again_there is not None:
                here = [(m.path, ln) for ln in (again_here or ())]
                return loader, loop, [*here, (m.path, call.lineno), (other.path, loop.lineno)]
    return None


def _made(m, call):
    """(where the sampler is made, whether it shuffles there: False, or None when it may) for the
    ``DistributedSampler(...)`` call: the call itself, or each call of the file's function that
    builds and returns it (the factory's caller picks the shuffle)."""
    sites = made_by_factory(m, call)
    if sites is None:
        return [(call, m.keyword(call, "shuffle"))]
    return sites


def _no_shuffle(value) -> bool:
    return isinstance(value, ast.Constant) and value.value is False


def check(m):
    samplers = sampler_calls(m)
    if not samplers or m.method_calls("set_epoch") or not m.nodes(ast.For, ast.AsyncFor, ast.While):
        return
    for call in samplers:
        if m.looks_like_eval(call):
            continue  # an evaluation sampler does not need set_epoch
        if m.keyword(call, "seed") is not None and repeats(m, call) is not None:
            continue  # a new sampler each epoch, seeded by the caller
        for made, shuffle in _made(m, call):
            if _no_shuffle(shuffle) or (made is not call and m.looks_like_eval(made)):
                continue  # an unshuffled sampler does not need set_epoch
            found = _epoch_pass(m, made)
            if found is None:
                continue  # the loader goes to code in another file, which may well call set_epoch
            yield _finding(m, made, *found)


def _finding(m, made, loader, _loop, again):
    chain = " -> ".join(
        f"{Path(p).name}:{ln}" for p, ln in [(m.path, made.lineno), (m.path, loader.lineno), *again]
    )
    path, line = again[-1]
    where = f"line {line}" if path == m.path else f"{Path(path).name}:{line}"
    return m.finding(
        CODE,
        made,
        f"DistributedSampler is never given the epoch: its loader is iterated every epoch at {where} "
        f"but `set_epoch` is never called, so every epoch shuffles the same way [{chain}]",
        SEVERITY,
        hint="call `sampler.set_epoch(epoch)` at the start of each epoch, before iterating the loader",
        chain=chain,
    )
