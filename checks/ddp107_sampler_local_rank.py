"""DDP107: a distributed sampler given the node-local rank among all the job's replicas.

## What it does
Finds a sampler built with `num_replicas=` the job's world size and `rank=` a local rank
(`LOCAL_RANK`, `local_rank`, `dist.get_node_local_rank()`): `DistributedSampler` or any sampler with
the same `num_replicas`/`rank` contract.

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

from ddpdoctor.script.ranks import LOCAL

CODE = "DDP107"
TITLE = "Sampler given the local rank"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

# a replica count that is itself per node (shards within each node on purpose)
_PER_NODE_WORDS = ("local", "device_count", "nproc", "per_node", "gpus")


def check(m):
    if not m.uses_distributed and not m.distributed_context:
        return
    for call, _q in m.calls:
        replicas, rank = m.keyword(call, "num_replicas"), m.keyword(call, "rank")
        if replicas is None or rank is None or m.rank_kind(rank) != LOCAL:
            continue
        text = ast.unparse(replicas).lower()
        if isinstance(replicas, ast.Constant) or any(w in text for w in _PER_NODE_WORDS):
            continue
        yield m.finding(
            CODE,
            rank,  # the wrong value: where a call spans lines, that is the line to change
            f"`rank={ast.unparse(rank)}` is the rank on this node, but `num_replicas={ast.unparse(replicas)}` "
            "counts the whole job: on several nodes their ranks take the same shards and the rest of the "
            "data is never seen",
            SEVERITY,
            hint="give the global rank (`dist.get_rank()`), or leave both out: DistributedSampler "
            "reads them from the process group",
        )
