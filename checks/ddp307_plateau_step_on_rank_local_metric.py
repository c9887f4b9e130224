"""DDP307: a learning-rate decision taken on each rank's own, unreduced metric.

## What it does
Finds `scheduler.step(metric)` of a `ReduceLROnPlateau` made in the file, where `metric` is computed
from the rank's own batches and no collective made it the same on every rank first: a loss summed
in a loop over a loader whose sampler is a `DistributedSampler`, or in a loop that trains the model
(each rank trains on its own shard), also through the file's own functions that return it. A value
handed to `all_reduce` (in place, also through `.detach()`), or the result of a reducing helper
(`reduce_mean(loss)`), is the same everywhere and is left alone; so is a metric over a loader every
rank reads whole (no `DistributedSampler`).

## Why is this bad?
Each rank's scheduler watches a different number, so the ranks cut their learning rates at
different epochs. From then on they apply different steps to the same all-reduced gradients and
the replicas drift apart silently: the checkpoint rank 0 writes is no longer what the other ranks
train, and results depend on the world size.

## Example
```python
for x, y in train_loader:                    # DistributedSampler: this rank's shard
    loss = loss_fn(ddp_model(x), y)
    loss.backward(); optimizer.step()
    total += loss.item()
plateau.step(total / len(train_loader))      # each rank its own number
```

## Use instead
```python
t = torch.tensor([total, len(train_loader)], device=device)
dist.all_reduce(t)                            # every rank the same mean
plateau.step((t[0] / t[1]).item())
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.divergence import RankValues
from ddpdoctor.script.loaders import sharded_passes
from ddpdoctor.script.names import dotted

CODE = "DDP307"
TITLE = "Learning-rate decision on a rank's own metric"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def _plateau_schedulers(m) -> set[str]:
    """The names a ``ReduceLROnPlateau(...)`` made here is kept in (``scheduler``, ``self.sched``)."""
    out = set()
    for a in m.nodes(ast.Assign):
        v = a.value
        if isinstance(v, ast.Call) and (m.qualname(v.func) or dotted(v.func) or "").endswith("ReduceLROnPlateau"):
            out |= {name for t in a.targets if (name := dotted(t)) is not None}
    return out


def _rank_data_loops(m) -> frozenset[int]:
    """Loops whose items are the rank's own: over a loader that draws from a DistributedSampler, or
    over a loader in a loop that runs a backward pass (DDP trains each rank on its own shard)."""
    loops: set[int] = set(sharded_passes(m))
    if m.ddp_constructors or m.ddp_wrapper_calls:
        names = m.loader_names()
        for loop in m.nodes(ast.For, ast.AsyncFor):
            if m.iterates_loader(loop.iter, names) and any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward"
                for st in loop.body
                for n in ast.walk(st)
            ):
                loops.add(id(loop))
    return frozenset(loops)


def check(m):
    if not m.distributed_context or m.pinned_rank is not None:
        return
    schedulers = _plateau_schedulers(m)
    if not schedulers:
        return
    # the metric, by position or as ``metrics=`` (ReduceLROnPlateau.step's parameter)
    steps = [
        (c, metric)
        for c in m.method_calls("step")
        if isinstance(c.func, ast.Attribute)
        and dotted(c.func.value) in schedulers
        and (metric := c.args[0] if c.args else m.keyword(c, "metrics")) is not None
    ]
    if not steps:
        return
    loops = _rank_data_loops(m)
    if not loops:
        return
    values = RankValues(m, loops)
    for call, metric in steps:
        if m.rank_guard(call) is not None:
            continue  # stepped on some ranks only: another cause
        origin = values.reads(metric, m.enclosing_function(call))
        if origin is None or not origin.data:
            continue
        yield m.finding(
            CODE,
            call,
            f"`{ast.unparse(call.func.value)}` is a ReduceLROnPlateau stepped on every rank with "
            f"`{ast.unparse(metric)}`, computed from this rank's own batches (line "
            f"{origin.node.lineno}) and never reduced: the ranks cut their learning rates at different "
            "epochs and then apply different updates to the same gradients",
            SEVERITY,
            hint="all-reduce the metric first (`dist.all_reduce(t); t /= dist.get_world_size()`), then "
            "step the scheduler with it on every rank",
            chain=m.chain_text([origin.node.lineno], call.lineno),
        )
