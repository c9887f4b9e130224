"""DDP105: a DDP training loop whose DataLoader has no DistributedSampler.

## What it does
Finds a script that wraps its model in DistributedDataParallel but builds its training DataLoader
with no sampler, and never uses a DistributedSampler or another way of sharding the data.

## Why is this bad?
Every rank then iterates the whole dataset: N ranks do N times the work per epoch on identical (or
identically shuffled) batches, and the effective batch is not what you think.

## Example
```python
model = DDP(model, device_ids=[local_rank])
loader = DataLoader(train_set, batch_size=32, shuffle=True)
```

## Use instead
```python
sampler = DistributedSampler(train_set)
loader = DataLoader(train_set, batch_size=32, sampler=sampler)
```
"""

from __future__ import annotations

import ast

CODE = "DDP105"
TITLE = "DataLoader without DistributedSampler in a DDP script"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "medium"
# why it is not in the default selection (measured with benchmarks/lint_rule_precision.py)
OPT_IN_BECAUSE = (
    "on labelled real code its only report was a false alarm (0 true, 1 false: a dataset already "
    "sharded per rank in another file, `dataset.shard(world_size, rank)`); below the 0.95 precision "
    "a default rule needs"
)
# other ways a script shards its data across ranks
_SHARDING = (
    "DistributedSampler",
    "split_dataset_by_node",
    "split_by_node",
    ".shard(",
    "IterableDataset",
    "num_replicas",
    "Subset(",
    "accelerator.prepare",
    "DistributedBatchSampler",
    "sampler=",
)


def check(m):
    if not m.ddp_constructors or m.mentions(*_SHARDING):
        return
    for call in m.calls_named("DataLoader"):
        if m.keyword(call, "batch_sampler") is not None or len(call.args) > 3 or m.looks_like_eval(call):
            continue
        if m.is_none(m.keyword(call, "batch_size") or ast.Constant(1)):
            continue  # batch_size=None: the dataset yields whole batches itself, and such datasets shard
        yield m.finding(
            CODE,
            call,
            "this DataLoader has no DistributedSampler in a DDP script: every rank "
            "iterates the whole dataset",
            SEVERITY,
            hint="pass `sampler=DistributedSampler(dataset)` (and call set_epoch each epoch)",
        )
        return
