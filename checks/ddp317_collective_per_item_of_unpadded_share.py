"""DDP317: a collective once per item of a per-rank share that is not padded.

## What it does
Finds a loop that runs a collective on every iteration (a torch.distributed collective, or the
backward of a DDP model, which all-reduces the gradients) over items the ranks split between them
without evening out the counts:
- a slice by rank, `data[rank::world_size]`, looped over directly or through a name;
- a round-robin skip, `if i % world_size != rank: continue`;
- `np.array_split(data, world_size)[rank]`, `torch.chunk(data, world_size)[rank]`;
- a DataLoader whose sampler is a class of this file that takes `indices[self.rank::self.num_replicas]`
  and never pads them (torch's DistributedSampler pads, so its loaders are left alone).
A slice of a list padded to a multiple of the world size first (`total_size`) is left alone, and so
is a collective under a rank test or a `join()` context.

## Why is this bad?
Unless the number of items divides by the world size, some ranks get one item (or one batch) more
than the others. On their last iteration they enter the collective alone and wait for ranks that
have already left the loop, or pair it with whatever those ranks do next: the job hangs at the end
of the pass, or its reductions mix up.

## Example
```python
for batch in DataLoader(dataset, sampler=UnpaddedSampler(dataset, rank, world_size)):
    correct += score(model(batch))
    dist.all_reduce(correct)
```

## Use instead
```python
for batch in loader:                  # accumulate locally ...
    correct += score(model(batch))
dist.all_reduce(correct)              # ... and reduce once, after the loop
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.interp import COLLECTIVES
from ddpdoctor.script.loaders import loop_root
from ddpdoctor.script.names import dotted
from ddpdoctor.script.ranks import (
    last_value_before,
    names_world_size,
    rank_kind,
    round_robin_split,
    under_join,
)

CODE = "DDP317"
TITLE = "Collective once per item of an unpadded per-rank share"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

_SPLITS = ("array_split", "chunk", "tensor_split", "split")
_PADDING_WORDS = ("total_size", "padding", "pad_size", "num_samples")


def _rank_slice(m, e: ast.AST) -> bool:
    """``x[rank::world_size]`` (or ``x[rank:n:world_size]``)."""
    return (
        isinstance(e, ast.Subscript)
        and isinstance(e.slice, ast.Slice)
        and e.slice.step is not None
        and e.slice.lower is not None
        and names_world_size(e.slice.step)
        and rank_kind(m, e.slice.lower) is not None
    )


def _split_by_rank(m, e: ast.AST) -> bool:
    """``np.array_split(x, world_size)[rank]``, ``torch.chunk(x, world_size)[rank]``."""
    if not (isinstance(e, ast.Subscript) and isinstance(e.value, ast.Call) and rank_kind(m, e.slice) is not None):
        return False
    call = e.value
    last = (dotted(call.func) or "").rsplit(".", 1)[-1]
    return last in _SPLITS and any(names_world_size(a) for a in call.args[1:2])


def _padded_before(m, node: ast.AST) -> bool:
    fn = m.enclosing_function(node) or m.tree
    text = ast.unparse(fn) if fn is not m.tree else ""
    return any(w in text for w in _PADDING_WORDS)


def _unpadded_samplers(m) -> set[str]:
    """Classes of this file whose ``__iter__`` slices the indices by rank and never pads them."""
    out = set()
    for cls in m.nodes(ast.ClassDef):
        it = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__iter__"), None)
        if it is None:
            continue
        text = ast.unparse(it)
        if any(w in text for w in _PADDING_WORDS) or ".extend(" in text:
            continue
        if any(isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Add, ast.Mult)) for n in ast.walk(it)):
            continue
        if any(_self_rank_slice(n) for n in ast.walk(it)):
            out.add(cls.name)
    return out


def _self_rank_slice(e: ast.AST) -> bool:
    """``indices[self.rank::self.num_replicas]`` inside a sampler class."""
    if not (isinstance(e, ast.Subscript) and isinstance(e.slice, ast.Slice) and e.slice.step is not None):
        return False
    low, step = dotted(e.slice.lower) if e.slice.lower is not None else None, dotted(e.slice.step)
    return bool(low and step) and "rank" in low.rsplit(".", 1)[-1] and names_world_size(e.slice.step)


def _share_of(m, loop: ast.For, samplers: set[str]) -> tuple[str, ast.AST] | None:
    """(how the items are split, where) when the loop walks an unpadded per-rank share."""
    it = loop_root(loop.iter)
    if isinstance(it, ast.Name):
        it = last_value_before(m, it.id, loop) or it
    if _rank_slice(m, it) and not _padded_before(m, it):
        return f"`{ast.unparse(it)}`", it
    if _split_by_rank(m, it):
        return f"`{ast.unparse(it)}`", it
    if samplers and isinstance(it, ast.Call) and (dotted(it.func) or "").rsplit(".", 1)[-1] == "DataLoader":
        sampler = m.keyword(it, "sampler")
        if isinstance(sampler, ast.Name):
            sampler = last_value_before(m, sampler.id, it) or sampler
        if isinstance(sampler, ast.Call) and (dotted(sampler.func) or "").rsplit(".", 1)[-1] in samplers:
            return f"the sampler `{dotted(sampler.func)}`, which never pads its indices", sampler
    split = round_robin_split(m, loop)
    if split is not None and split[1] == "others":
        return f"`{ast.unparse(split[0].test)}`", split[0].test
    return None


def _per_item_collectives(m, loop: ast.For, backwards: bool) -> list[ast.Call]:
    out = []
    for n in ast.walk(loop):
        if not isinstance(n, ast.Call) or m.enclosing_loop(n) is not loop:
            continue
        q = m.qualname(n.func) or ""
        is_collective = id(n) in _collectives(m) or (
            backwards and isinstance(n.func, ast.Attribute) and n.func.attr == "backward" and not q.startswith("torch.autograd")
        )
        if is_collective and m.rank_guard(n) is None and not under_join(m, n):
            out.append(n)
    return out


def _collectives(m) -> set[int]:
    """ids of the file's collectives over the whole job (one on a subgroup may be the subgroup's own)."""
    found = m.__dict__.get("_ddp317_collectives")
    if found is None:
        found = m.__dict__["_ddp317_collectives"] = {
            id(c) for c in m.dist_calls(*COLLECTIVES) if m.keyword(c, "group") is None
        }
    return found


def check(m):
    if not m.distributed_context or m.one_process:
        return
    if not _collectives(m) and not m.ddp_constructors:
        return
    samplers = _unpadded_samplers(m)
    backwards = bool(m.ddp_constructors)
    # (only the loops right around a collective or a backward: the few, not every loop of the file)
    calls = [c for c in m.dist_calls(*COLLECTIVES) if id(c) in _collectives(m)]
    calls += m.method_calls("backward") if backwards else []
    loops = {id(lp) for c in calls if (lp := m.enclosing_loop(c)) is not None}
    for loop in m.nodes(ast.For):
        if id(loop) not in loops:
            continue
        found = _per_item_collectives(m, loop, backwards)
        if not found:
            continue
        share = _share_of(m, loop, samplers)
        if share is None:
            continue
        how, where = share
        first = found[0]
        yield m.finding(
            CODE,
            first,
            f"`{ast.unparse(first.func)}` runs once per item of this rank's share, and the shares are "
            f"not evened out ({how}, line {where.lineno}): unless the count divides by the world size, "
            "some ranks run it once more than the others, which have left the loop: it hangs at the "
            "end of the pass, or pairs with a different collective",
            SEVERITY,
            hint="accumulate inside the loop and reduce once after it, or pad the shares to equal "
            "length (DistributedSampler does), or wrap the loop in `model.join()`",
        )
