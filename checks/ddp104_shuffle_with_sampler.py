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
_GRAPH_LOADERS = ("torch_geometric.loader.DataLoader", "torch_geometric.data.DataLoader")


def check(m):
    for call in m.calls_named("DataLoader", *_GRAPH_LOADERS):
        # DataLoader(dataset, batch_size, shuffle, sampler, ...) by keyword or by position; PyTorch
        # Geometric's (dataset, batch_size, shuffle, follow_batch, ...) hands `sampler=` on to it
        positional = 3 if m.qualname(call.func) not in _GRAPH_LOADERS else None
        sampler = m.keyword(call, "sampler") or (
            call.args[positional] if positional is not None and len(call.args) > positional else None
        )
        shuffle = m.keyword(call, "shuffle") or (call.args[2] if len(call.args) > 2 else None)
        shuffled = isinstance(shuffle, ast.Constant) and shuffle.value is True
        inverted = _inverted_bool(shuffle)
        shuffled = shuffled or inverted
        if not shuffled and sampler is not None:
            shuffled = _flag_shared_with_sampler(m, call, shuffle, sampler)
        if sampler is not None and not m.is_none(sampler) and shuffled:
            # at `shuffle=True`: in a call spread over lines, the line to change
            yield m.finding(
                CODE,
                shuffle,
                f"DataLoader gets `sampler=` and `shuffle={ast.unparse(shuffle)}`: `~` of a bool is -1 or -2, "
                "never false, so the loader is always asked to shuffle too; the two are mutually "
                "exclusive and DataLoader raises ValueError"
                if inverted
                else "DataLoader gets both `sampler=` and `shuffle=True`: they are "
                "mutually exclusive and DataLoader raises ValueError"
                if isinstance(shuffle, ast.Constant)
                else f"DataLoader gets `sampler=` and, as its shuffle, `{shuffle.id}`, the flag the "
                "DistributedSampler shuffles by: whenever it is true (a training loader) the two are "
                "mutually exclusive and DataLoader raises ValueError",
                SEVERITY,
                hint="drop `shuffle=True`; DistributedSampler shuffles (and set_epoch reseeds it)",
            )


def _inverted_bool(e: ast.AST | None) -> bool:
    """``~(world_size > 1)``, ``~args.distributed``-like tests written with ``~``: bitwise not of a
    comparison or a ``not``/``and``/``or`` gives -1 or -2, which is always true."""
    if not (isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Invert)):
        return False
    inner = e.operand
    return isinstance(inner, (ast.Compare, ast.BoolOp)) or (
        isinstance(inner, ast.UnaryOp) and isinstance(inner.op, ast.Not)
    ) or (isinstance(inner, ast.Constant) and isinstance(inner.value, bool))


def _flag_shared_with_sampler(m, call: ast.Call, shuffle: ast.AST | None, sampler: ast.AST) -> bool:
    """``shuffle`` is the very flag the sampler was made with (``sampler = DistributedSampler(ds,
    shuffle=shuffle)`` then ``DataLoader(ds, bs, shuffle, sampler=sampler)``): whenever the sampler
    is asked to shuffle, the loader is too, with it."""
    if not (isinstance(shuffle, ast.Name) and isinstance(sampler, ast.Name)):
        return False
    fn = m.enclosing_function(call)
    for a in m.nodes(ast.Assign):
        if m.enclosing_function(a) is not fn or a.lineno > call.lineno or not isinstance(a.value, ast.Call):
            continue
        if not any(isinstance(t, ast.Name) and t.id == sampler.id for t in a.targets):
            continue
        made = a.value
        if not (m.qualname(made.func) or "").endswith("DistributedSampler"):
            continue
        flag = m.keyword(made, "shuffle") or (made.args[3] if len(made.args) > 3 else None)
        if (
            isinstance(flag, ast.Name)
            and flag.id == shuffle.id
            and not _set_again(m, fn, shuffle.id, a, call)
        ):
            return True
    return False


def _set_again(m, fn, name: str, after: ast.AST, before: ast.AST) -> bool:
    """``name`` is assigned again between the sampler and the loader (``shuffle = False  # the sampler
    shuffles``)."""
    return any(
        after.lineno < a.lineno < before.lineno
        and m.enclosing_function(a) is fn
        and any(isinstance(t, ast.Name) and t.id == name for t in a.targets)
        for a in m.nodes(ast.Assign)
    )
