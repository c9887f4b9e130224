"""DDP309: a loader sharded over the ranks, read by some ranks only.

## What it does
Finds a `DistributedSampler` whose loader is iterated only under a rank test: every loop over it
(also in the file's function it is handed to) runs on rank 0 alone, or on some ranks, as the rank
tests on the way say (`if args.local_rank in [-1, 0]: evaluate(...)`, where `evaluate` builds the
sampler). A loop that trains (a backward pass) is left alone, and so is a sampler made for one
replica (`num_replicas=1`) or on the single-process arm of the script.

## Why is this bad?
A DistributedSampler hands each rank 1/world_size of the dataset. When only rank 0 iterates its
loader, the evaluation covers rank 0's shard alone: the accuracy, perplexity or loss it reports
(and the "best" checkpoint chosen on it) describe a fraction of the validation set, and change with
the number of GPUs. Nothing fails; the numbers are just wrong.

## Example
```python
def evaluate(model, dataset):
    sampler = DistributedSampler(dataset)          # rank 0's shard: 1/world of the data
    for x, y in DataLoader(dataset, sampler=sampler): ...

if dist.get_rank() == 0:
    evaluate(model.module, val_set)
```

## Use instead
```python
# either every rank evaluates its shard and the sums are all-reduced,
evaluate(model.module, val_set)                    # on every rank, then dist.all_reduce(totals)
# or rank 0 evaluates the whole set without a DistributedSampler
DataLoader(dataset, sampler=SequentialSampler(dataset))
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script import ranks
from ddpdoctor.script.flow import Flow
from ddpdoctor.script.loaders import (
    loader_calls,
    loop_root,
    param_names,
    passes,
    sampler_calls,
    sharded_passes,
    trains,
)
from ddpdoctor.script.names import short_text as _short

CODE = "DDP309"
TITLE = "Sharded loader read by some ranks only"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "medium"
OPT_IN_BECAUSE = (
    "on 68 labelled sets (about 940 real files) 5 of its 6 reports were bugs (0.83): the sixth was a "
    "rank-0 test over a sharded loader in a method whose only call is commented out; too few reports "
    "to show 0.95"
)


def _one_replica(m, sampler: ast.Call) -> bool:
    n = m.keyword(sampler, "num_replicas")
    return isinstance(n, ast.Constant) and n.value == 1


def _near(m, node: ast.AST, made: ast.AST) -> bool:
    """``node`` can see what ``made`` made: the same function, or ``made`` kept on an attribute
    (``self.loader``) or handed on (a parameter: ``sharded_passes`` binds those call by call)."""
    fn = m.enclosing_function(node)
    if fn is m.enclosing_function(made):
        return True
    target = m.assigned_to(made)
    if target is not None and "." in target:
        return True
    root = loop_root(node.iter) if isinstance(node, (ast.For, ast.AsyncFor)) else None
    return isinstance(root, ast.Name) and fn is not None and root.id in param_names(fn)


def _bound_here(m, loop: ast.AST, flow: Flow) -> bool:
    """A loop over a local name of its function iterates what that function put in it: one of
    ``flow``'s loaders where it assigns the name (``loader = DataLoader(train_set, ...)`` in
    ``main`` is not ``evaluate``'s ``loader`` parameter, though Flow reads both as one text)."""
    fn = m.enclosing_function(loop)
    root = loop_root(loop.iter)
    if fn is None or not isinstance(root, ast.Name):
        return True
    values = [
        a.value
        for a in ast.walk(fn)
        if isinstance(a, ast.Assign) and any(isinstance(t, ast.Name) and t.id == root.id for t in a.targets)
    ]
    return not values or any(flow.carries(v) for v in values)


def check(m):
    if not m.distributed_context or m.one_process:
        return
    samplers = sampler_calls(m)
    if not samplers:
        return
    sharded = sharded_passes(m)
    for sampler in samplers:
        if _one_replica(m, sampler) or ranks.single_process_arm(m, sampler):
            continue
        # names are text in Flow: a `sampler` or `loader` of another function is another object
        loaders = [c for c in loader_calls(m, Flow(m, [sampler])) if _near(m, c, sampler)]
        if not loaders:
            continue
        flow = Flow(m, loaders)
        loops = [
            loop
            for loop in passes(m, flow)
            if id(loop) in sharded and any(_near(m, loop, c) for c in loaders) and _bound_here(m, loop, flow)
        ]
        if not loops or any(trains(m, loop) for loop in loops):
            continue
        guards = [m.rank_guard(loop) for loop in loops]
        if not all(guards) or any(ranks.single_process_arm(m, loop) for loop in loops):
            continue
        guard, loop = guards[0], loops[0]
        via = m.chain_text([guard.line, *guard.chain, loop.lineno]) if guard.path is None else ""
        yield m.finding(
            CODE,
            sampler,
            f"this DistributedSampler gives each rank 1/world_size of the data, but its loader is read "
            f"only on the ranks that pass `{_short(guard.test)}` (line {guard.line}; the loop "
            f"on line {loop.lineno}): what that pass computes covers their shards alone, not the whole "
            f"dataset{f' ({via})' if via else ''}",
            SEVERITY,
            hint="evaluate on every rank and all-reduce the sums, or read the whole dataset on the one "
            "rank without a DistributedSampler",
        )
