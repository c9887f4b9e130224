"""DDP109: a sampler assigned to a DataLoader after it is built.

## What it does
Finds `loader.sampler = ...` (or `loader.batch_sampler = ...`) where `loader` is a DataLoader the
file builds, or a name that says it holds one (`train_loader`, `test_dl` from a factory), in code
that runs under torch.distributed.

## Why is this bad?
`DataLoader` fixes its sampler when it is built and refuses the attribute afterwards: the assignment
raises `ValueError: sampler attribute should not be set after DataLoader is initialized` on every
rank. Meant to shard the data with a `DistributedSampler`, it never does.

## Example
```python
train_loader = get_dataloaders(args)
train_loader.sampler = DistributedSampler(train_loader.dataset)
```

## Use instead
```python
sampler = DistributedSampler(train_set)
train_loader = DataLoader(train_set, batch_size=bs, sampler=sampler)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import also_lines, dotted, names_a_loader

CODE = "DDP109"
TITLE = "Sampler set on a DataLoader after it is built"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

_FIXED = ("sampler", "batch_sampler")


def _holds_a_loader(m, base: ast.AST) -> bool:
    """``base`` names a loader (``train_loader``, ``self.val_dl``) or is bound only to DataLoader(...) here."""
    key = dotted(base)
    if key is None:
        return False
    if names_a_loader(key):
        return True
    made = [a.value for a in m.nodes(ast.Assign) for t in a.targets if dotted(t) == key]
    return bool(made) and all(
        isinstance(v, ast.Call) and (m.qualname(v.func) or "").endswith("DataLoader") for v in made
    )


def check(m):
    if not m.distributed_context:
        return
    by_scope: dict[int, list] = {}  # one finding per function: the first assignment raises
    for a in m.nodes(ast.Assign):
        for t in a.targets:
            if isinstance(t, ast.Attribute) and t.attr in _FIXED and _holds_a_loader(m, t.value):
                by_scope.setdefault(id(m.enclosing_function(a)), []).append((a, t))
    for found in by_scope.values():
        found.sort(key=lambda at: at[0].lineno)
        a, t = found[0]
        also = also_lines(x.lineno for x, _t in found[1:])
        yield m.finding(
            CODE,
            a,
            f"`{ast.unparse(t)} = ...` sets the {t.attr} of a DataLoader after it is built{also}: "
            f"DataLoader raises ValueError ('{t.attr} attribute should not be set after DataLoader is "
            "initialized'), so the data is never sharded this way",
            SEVERITY,
            hint=f"pass `{t.attr}=` when the DataLoader is built (to the factory that builds it)",
        )
