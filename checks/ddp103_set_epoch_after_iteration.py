"""DDP103: set_epoch called after the loader is iterated.

## What it does
Finds `set_epoch` called inside the batch loop or after the epoch's pass over the DataLoader.

## Why is this bad?
The DataLoader asks the sampler for its indices when iteration starts (`iter(loader)`). Calling
`set_epoch` afterwards only affects the next epoch — the first epoch's order is reused once, and with
persistent workers the change may never be seen by the epoch it was meant for.

## Example
```python
for epoch in range(start_epoch, epochs):
    for step, (x, y) in enumerate(train_loader):
        train_step(x, y)
    train_loader.sampler.set_epoch(epoch)     # too late: this epoch's order is already drawn
```

## Use instead
```python
for epoch in range(start_epoch, epochs):
    train_loader.sampler.set_epoch(epoch)     # before iter(train_loader)
    for step, (x, y) in enumerate(train_loader):
        train_step(x, y)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.loaders import loop_root
from ddpdoctor.script.names import dotted, names_training

CODE = "DDP103"
TITLE = "set_epoch called after the loader is iterated"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


_EVAL_WORDS = ("val", "test", "eval", "dev")


def _next_epoch(arg: ast.AST) -> bool:
    return isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add) and isinstance(arg.right, ast.Constant)


def _iterated_by_helper(m, earlier: list[ast.stmt], loaders: set[str]):
    """(call, loop) when an earlier statement hands a training loader to a function of this file that
    loops over it (``train_one_epoch(model, train_loader)``)."""
    own = {}
    for fn in m.functions:
        own.setdefault(fn.name, fn)
    for st in earlier:
        for c in ast.walk(st):
            if not isinstance(c, ast.Call):
                continue
            name = dotted(c.func) or ""
            fn = own.get(name.rsplit(".", 1)[-1])
            if fn is None or name.split(".", 1)[0] in m.aliases:
                continue
            params = [p.arg for p in (*fn.args.posonlyargs, *fn.args.args) if p.arg not in ("self", "cls")]
            for i, a in enumerate(c.args):
                text = (dotted(a) or "").lower()
                if i >= len(params) or not text or any(w in text for w in _EVAL_WORDS):
                    continue
                if text not in loaders and "loader" not in text.rsplit(".", 1)[-1]:
                    continue
                for loop in ast.walk(fn):
                    if isinstance(loop, (ast.For, ast.AsyncFor)) and any(
                        isinstance(n, ast.Name) and n.id == params[i] for n in ast.walk(loop.iter)
                    ):
                        return c, loop
    return None


def _receiver_loader(call: ast.Call) -> str | None:
    """``val_loader`` for ``val_loader.sampler.set_epoch(epoch)``: the loader whose sampler it is."""
    receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
    if isinstance(receiver, ast.Attribute) and receiver.attr in ("sampler", "batch_sampler"):
        return dotted(receiver.value)
    return None


def _trained_by_other_module(m, earlier: list[ast.stmt], loaders: set[str], strict: bool = False) -> ast.Call | None:
    """An earlier statement hands the training loaders to another module's function named for
    training (``train_xe(model, dataloaders, ...)``, ``train_one_epoch(model, train_loader)``): it
    iterates them, so this epoch's pass is over. ``strict``: ``loaders`` holds the one loader whose
    sampler is reseeded, and only that loader handed on counts (not the training loader handed
    on before ``val_loader.sampler.set_epoch(epoch)``)."""
    own = {fn.name for fn in m.functions}
    for st in earlier:
        for c in ast.walk(st):
            if not isinstance(c, ast.Call):
                continue
            last = (dotted(c.func) or "").rsplit(".", 1)[-1]
            if not last or last in own or not names_training(last):
                continue
            for a in (*c.args, *(k.value for k in c.keywords)):
                text = (dotted(a) or "").lower()
                if text and not any(w in text for w in _EVAL_WORDS) and (
                    text in loaders or not strict and "loader" in text.rsplit(".", 1)[-1]
                ):
                    return c
    return None


def _sets_the_item(call: ast.Call, loop: ast.AST) -> bool:
    """``for loader in self.data_loaders: loader.sampler.set_epoch(epoch)``: the loop's items are
    loaders (a batch has no sampler), so the loop is over a list of loaders, not over batches."""
    names = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    base = call.func.value if isinstance(call.func, ast.Attribute) else None
    while isinstance(base, ast.Attribute):
        base = base.value
    return isinstance(base, ast.Name) and base.id in names


def _another_loaders_sampler(call: ast.Call, loop: ast.AST) -> bool:
    """``labeled_loader.sampler.set_epoch(k)`` inside ``for batch in unlabeled_loader:``: the sampler
    of another loader, reseeded before that loader's next iterator is made (the pass over the
    shorter labeled set restarted inside the pass over the unlabeled one)."""
    receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
    if not (isinstance(receiver, ast.Attribute) and receiver.attr in ("sampler", "batch_sampler")):
        return False
    owner = dotted(receiver.value)
    looped = dotted(loop_root(loop.iter))
    return owner is not None and looped is not None and owner != looped


def check(m):
    loaders = m.loader_names()
    for call in m.method_calls("set_epoch"):
        inner = next(
            (
                a
                for a in m.ancestors(call)
                if isinstance(a, (ast.For, ast.AsyncFor))
                and m.iterates_loader(a.iter, loaders)
                and not _sets_the_item(call, a)
                and not _another_loaders_sampler(call, a)
            ),
            None,
        )
        if inner is not None:
            yield m.finding(
                CODE,
                call,
                f"`set_epoch` is called inside the loop over the loader (line "
                f"{inner.lineno}): its indices were already drawn for this epoch",
                SEVERITY,
                hint="move `set_epoch(epoch)` before the loop over the DataLoader",
            )
            continue
        if call.args and _next_epoch(call.args[0]):
            continue  # set_epoch(epoch + 1) after the pass: seeding the next epoch on purpose
        stmt, body = m.statement_in_block(call)
        if body is None:
            continue
        helper = _iterated_by_helper(m, body[: body.index(stmt)], loaders)
        if helper is not None and m.enclosing_loop(call) is not None:
            site, loop = helper
            yield m.finding(
                CODE,
                call,
                f"`set_epoch` is called after this epoch's pass over the loader "
                f"({m.chain_text((site.lineno,), loop.lineno)}): it only takes effect one epoch late",
                SEVERITY,
                hint="call `set_epoch(epoch)` before the epoch's pass over the DataLoader",
            )
            continue
        own = _receiver_loader(call)
        site = _trained_by_other_module(m, body[: body.index(stmt)], {own.lower()} if own else loaders, strict=bool(own))
        if site is not None and m.enclosing_loop(call) is not None:
            yield m.finding(
                CODE,
                call,
                f"`set_epoch` is called after this epoch's pass over the loader, which "
                f"`{ast.unparse(site.func)[:40]}(...)` (line {site.lineno}) runs: it only takes effect one epoch late",
                SEVERITY,
                hint="call `set_epoch(epoch)` before the epoch's training call",
                chain=[site.lineno, call.lineno],
            )
            continue
        for earlier in body[: body.index(stmt)]:
            loop = next(
                (
                    n
                    for n in ast.walk(earlier)
                    if isinstance(n, (ast.For, ast.AsyncFor)) and m.iterates_loader(n.iter, loaders)
                ),
                None,
            )
            if loop is not None and m.enclosing_loop(call) is not None:
                yield m.finding(
                    CODE,
                    call,
                    f"`set_epoch` is called after the loader was iterated (line "
                    f"{loop.lineno}) in this epoch: it only takes effect one epoch late",
                    SEVERITY,
                    hint="call `set_epoch(epoch)` before iterating the DataLoader",
                )
                break
