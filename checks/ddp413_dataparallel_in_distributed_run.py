"""DDP413: DataParallel where the distributed run needs DistributedDataParallel.

## What it does
Finds `torch.nn.DataParallel` in a script that uses torch.distributed where the distributed run
itself goes through it: not behind any `if`, or in the arm of a distributed-mode test (`if
args.distributed:`, `if local_rank != -1:`, the `else` of `if world_size == 1:`). The one-process
fallback beside a DDP path is DDP405 (opt-in).

## Why is this bad?
DataParallel is single-process multi-GPU: it never talks to the other processes. Each rank trains
its own replica on its own shard, no gradient is all-reduced, and the replicas drift apart (only
the one rank 0 saves is kept); wrapped over every visible GPU, the ranks also fight for them.

## Example
```python
dist.init_process_group("nccl")
if args.distributed:
    model = nn.DataParallel(model, device_ids=[args.local_rank])
```

## Use instead
```python
dist.init_process_group("nccl")
if args.distributed:
    model = DDP(model, device_ids=[args.local_rank])
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script import ranks
from ddpdoctor.script.writers import parent_only

CODE = "DDP413"
TITLE = "DataParallel where the distributed run needs DistributedDataParallel"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def check(m):
    if not m.uses_distributed:
        return
    for call in m.calls_named("DataParallel"):
        if not ranks.dataparallel_in_distributed_run(m, call):
            continue  # the one-process fallback: DDP405
        if parent_only(m, call):
            continue  # the parent's own pass (a test after the workers joined): no process group there
        if _other_mode(m, call):
            continue
        arm = ranks.distributed_arm(m, call)
        where = (
            f"in the distributed arm (`{ast.unparse(arm.test)}` on line {arm.lineno})"
            if arm
            else "in a torch.distributed script"
        )
        yield m.finding(
            CODE,
            call,
            f"`DataParallel` {where}: it never talks to the other processes, so each rank trains its "
            "own replica and no gradient is all-reduced across ranks",
            SEVERITY,
            hint="wrap with DistributedDataParallel (`DDP(model, device_ids=[local_rank])`), one process per GPU",
        )


def _scope(m, node: ast.AST) -> ast.AST | None:
    """The class a method belongs to, else the function ``node`` is in."""
    fn = m.enclosing_function(node)
    if fn is not None and m.is_method(fn):
        return m.parents.get(fn)
    return fn


def _other_mode(m, call: ast.Call) -> bool:
    """A mode of its own beside the file's DDP one (fastai's ``ParallelTrainer`` callback next to its
    ``DistributedTrainer``): this class or function wraps with DataParallel and touches no process
    group or rank, while another one of the file wraps with DistributedDataParallel. Which mode a
    run uses is chosen by the caller, out of sight: unknown, not guilty."""
    scope = _scope(m, call)
    if scope is None:
        return False
    scopes = [_scope(m, c) for c in m.ddp_constructors]
    if not scopes or any(s is scope for s in scopes):
        return False  # no DDP mode elsewhere, or this very scope also wraps with DDP
    inside = {id(n) for n in ast.walk(scope)}
    dist = m.dist_calls("init_process_group", "get_rank", "get_world_size", "barrier", "all_reduce", "broadcast")
    return not any(id(c) in inside for c in dist) and not any(k in inside for k in m.rank_nodes)

