"""DDP107: a distributed sampler given the node-local rank among all the job's replicas (or the
job's rank among one node's).

## What it does
Finds a sampler built with `num_replicas=` the job's world size (also left out: torch's
`DistributedSampler` then counts the whole process group) and `rank=` a local rank (`LOCAL_RANK`,
`local_rank`, `dist.get_node_local_rank()`): `DistributedSampler` or any sampler with the same
`num_replicas`/`rank` contract (or a project's loader factory taking `rank=` and `world_size=`:
`get_dataloader(..., rank=local_rank, world_size=dist.get_world_size())`), and the same split by Hugging Face datasets
(`split_dataset_by_node(ds, rank, world_size)`, `ds.shard(num_shards, index)`).

The mirror case too: `rank=` the job's rank with `num_replicas=` this node's number of processes
(`num_replicas=args.ngpus_per_node, rank=args.rank`).

## Why is this bad?
A sampler gives replica `rank` every `num_replicas`-th sample. With the local rank, rank 0 of every
node takes the same shard, and so on: on two nodes each shard is trained twice per epoch and half
the data never. On one node local and global rank agree, so the bug appears only when the job
grows to a second node.

## Example
```python
sampler = DistributedSampler(ds, num_replicas=world_size, rank=local_rank)
```

## Use instead
```python
sampler = DistributedSampler(ds, num_replicas=world_size, rank=dist.get_rank())  # or omit both
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.loaders import sampler_calls
from ddpdoctor.script.ranks import (
    GLOBAL,
    LOCAL,
    assignments_seen_at,
    names_world_size,
    per_node_count,
    same_as_group_local_rank,
)

CODE = "DDP107"
TITLE = "Sampler given the local rank"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

# a replica count that is itself per node (shards within each node on purpose)
_PER_NODE_WORDS = ("local", "device_count", "nproc", "per_node", "gpus")


def _shard_args(m, call: ast.Call, qualname: str | None):
    """(count, index, their parameter names) of a call that shards data by a count of parts and the
    index of this process's part: any ``num_replicas=``/``rank=`` sampler, Hugging Face datasets'
    ``split_dataset_by_node(ds, rank, world_size)`` and ``ds.shard(num_shards, index)``."""
    if call.keywords:  # (most calls have none: then only the positional forms below shard)
        replicas, rank = m.keyword(call, "num_replicas"), m.keyword(call, "rank")
        count_name = "num_replicas"
        if replicas is None and m.keyword(call, "num_replica") is not None:
            replicas, count_name = m.keyword(call, "num_replica"), "num_replica"  # a project's own loader
        if replicas is not None and rank is not None:
            return replicas, rank, (count_name, "rank")
        if rank is not None and replicas is None and _is_torch_sampler(m, call):
            # torch's DistributedSampler counts the replicas of the default process group: the whole job
            return None, rank, ("num_replicas", "rank")
        size = m.keyword(call, "world_size")
        if size is not None and rank is not None and any(w in _callee(call) for w in _DATA_WORDS):
            # a project's loader factory that shards by the same contract (`get_dataloader(...,
            # rank=..., world_size=...)`); the process group's own `rank=` is DDP414's
            return size, rank, ("world_size", "rank")
    handed = _handed_place(m, call)
    if handed is not None:
        return handed
    last = (qualname or "").rsplit(".", 1)[-1]
    if last == "split_dataset_by_node":
        rank = m.keyword(call, "rank") or (call.args[1] if len(call.args) > 1 else None)
        size = m.keyword(call, "world_size") or (call.args[2] if len(call.args) > 2 else None)
        return (size, rank, ("world_size", "rank")) if size is not None and rank is not None else None
    if isinstance(call.func, ast.Attribute) and call.func.attr == "shard":
        count = m.keyword(call, "num_shards") or (call.args[0] if call.args else None)
        index = m.keyword(call, "index") or (call.args[1] if len(call.args) > 1 else None)
        return (count, index, ("num_shards", "index")) if count is not None and index is not None else None
    return None


_DATA_WORDS = ("loader", "sampler", "dataset", "data")
# what a call that reads this process's part of the data is named (`FineWebDataLoader`,
# `get_dataset(task)(...)`, `make_iterator`, `shard_files`)
_PART_WORDS = (*_DATA_WORDS, "iterator", "shard", "reader", "stream")


def _maker_name(call: ast.Call) -> str:
    """The name of what the call runs: ``FineWebDataLoader``, ``get_dataset`` of
    ``DatasetRegistry.get_dataset(task)(...)``."""
    f = call.func
    while isinstance(f, ast.Call):
        f = f.func
    return (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "").lower()


def _set_per_node(m, size: ast.AST) -> bool:
    """A world-size name the file sets from a count of this node's processes (``rank, world =
    args.local_rank, args.local_world_size``)."""
    if per_node_count(m, size):
        return True
    return any(
        any(w in ast.unparse(v).lower() for w in _PER_NODE_WORDS) for v, _n in assignments_seen_at(m, size)[:8]
    )


def _handed_place(m, call: ast.Call):
    """A data maker of the project handed this process's node-local rank and the job's world size
    by position (`FineWebDataLoader(B, T, local_rank, world_size, "train")`) or by keywords other
    than `rank=` and `local_rank=`: it takes its part by them. (count, index, their names), or None."""
    if not any(w in _maker_name(call) for w in _PART_WORDS):
        return None
    # (a keyword that asks for the node-local rank, `local_rank=`, may be the callee's device: unknown)
    values = [(None, a) for a in call.args] + [
        (k.arg, k.value) for k in call.keywords if k.arg and "local" not in k.arg.lower()
    ]
    rank = next(
        ((n, v) for n, v in values if isinstance(v, (ast.Name, ast.Attribute)) and m.rank_kind(v) == LOCAL), None
    )
    size = next(((n, v) for n, v in values if names_world_size(v) and not _set_per_node(m, v)), None)
    if rank is None or size is None:
        return None
    if rank[0] is None and _asks_for_local_rank(m, call, rank[1]):
        return None  # this file's `make_loader(ds, world_size, local_rank)`: its own body is judged
    return size[1], rank[1], (size[0], rank[0])  # (None: handed by position)


def _asks_for_local_rank(m, call: ast.Call, value: ast.AST) -> bool:
    """The file's own function that ``call`` runs names the parameter ``value`` goes to as a local
    rank: it asks for that, and what it does with it is judged inside it."""
    name = _maker_name(call)
    defs = [fn for fn in m.functions if fn.name.lower() == name]
    if len(defs) != 1:
        return False
    params = [a.arg for a in (*defs[0].args.posonlyargs, *defs[0].args.args)]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    at = next((i for i, a in enumerate(call.args) if a is value), None)
    return at is not None and at < len(params) and "local" in params[at].lower()


def _counts_one_node(m, replicas: ast.AST) -> bool:
    """The replica count is this node's number of processes (``args.ngpus_per_node``,
    ``torch.cuda.device_count()``, a name set from it), not a product that makes it the job's."""
    if isinstance(replicas, (ast.Constant, ast.BinOp)):
        return False
    text = ast.unparse(replicas).lower()
    return per_node_count(m, replicas) or any(w in text for w in ("per_node", "device_count", "local_world_size"))


def _callee(call: ast.Call) -> str:
    f = call.func
    return (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "").lower()


def _is_torch_sampler(m, call: ast.Call) -> bool:
    """``call`` makes torch's DistributedSampler, with no positional arguments past the dataset (the
    second one would be ``num_replicas``)."""
    return len(call.args) <= 1 and any(c is call for c in sampler_calls(m))


def _arg(name: str | None, value: ast.AST) -> str:
    return f"`{name}={ast.unparse(value)}`" if name else f"`{ast.unparse(value)}`"


def check(m):
    # no file-level gate: a call that takes both a count of replicas and this process's rank shards
    # data across processes by its own contract, even in a script whose process group is set up by
    # a helper in another module (`local_rank, world_size, rank = setup_distributed()`)
    if m.single_node:
        return  # every rank on this machine (a rendezvous pinned here, a spawn of the whole world):
        # the local rank is the global one
    for call, q in m.calls:
        found = _shard_args(m, call, q)
        if found is None:
            continue
        replicas, rank, (count_name, rank_name) = found
        kind = m.rank_kind(rank)
        if kind == GLOBAL and replicas is not None and _counts_one_node(m, replicas):
            yield m.finding(
                CODE,
                rank,
                f"{_arg(rank_name, rank)} is the rank in the whole job (by its name or where it comes "
                "from), but "
                f"{_arg(count_name, replicas)} counts this node's processes: on a second node the "
                "rank runs past the count (DistributedSampler raises ValueError) and the shards do not add up",
                SEVERITY,
                hint="give both for the whole job (`dist.get_world_size()`, `dist.get_rank()`), or leave both "
                "out: DistributedSampler reads them from the process group",
            )
            continue
        if kind != LOCAL or same_as_group_local_rank(m, rank):
            continue  # (the process group was given the same local rank: one cause, DDP414's)
        if replicas is None:
            count = f"`{count_name}` left out (the process group's world size)"
        else:
            text = ast.unparse(replicas).lower()
            if isinstance(replicas, ast.Constant) or any(w in text for w in _PER_NODE_WORDS):
                continue
            if per_node_count(m, replicas):
                continue  # `world_size = torch.cuda.device_count()`: a count per node, by its value
            count = _arg(count_name, replicas)
        yield m.finding(
            CODE,
            rank,  # the wrong value: where a call spans lines, that is the line to change
            f"{_arg(rank_name, rank)} is the rank on this node, but {count} "
            "counts the whole job: on several nodes their ranks take the same shards and the rest of the "
            "data is never seen",
            SEVERITY,
            hint="give the global rank (`dist.get_rank()`, torchrun's RANK); a DistributedSampler reads "
            "both from the process group when they are left out",
        )
