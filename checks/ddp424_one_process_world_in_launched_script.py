"""DDP424: a process group of one process in a script that runs as several.

## What it does
Finds `init_process_group(world_size=1, ...)` with a literal 1 where the same call shows that
several processes start it: its `rank=` is each process's own rank (`args.local_rank`, a rank read
from the launcher, the spawned process index), or the call sits under a test that this machine has
more than one GPU (`if torch.cuda.device_count() > 1:`). A one-process group built on purpose (for
SyncBatchNorm or FSDP on a single GPU, `rank=0` outside any such test) is left alone.

## Why is this bad?
`world_size=1` tells every process it is the whole job. A process whose rank is 1 or more fails at
once ("Invalid rank"); with `rank=0` each launched process tries to host the rendezvous store on
`MASTER_PORT` and all but the first fail on the port in use, or, where they each get a store, they
train as unrelated single-process jobs whose gradients are never averaged. The launcher's
`WORLD_SIZE` is ignored.

## Example
```python
dist.init_process_group("nccl", init_method="env://", world_size=1, rank=args.local_rank)
```

## Use instead
```python
dist.init_process_group("nccl")   # env:// takes WORLD_SIZE and RANK from the launcher
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.loaders import param_names
from ddpdoctor.script.names import dotted, rebinds
from ddpdoctor.script.ranks import rank_kind

CODE = "DDP424"
TITLE = "Process group of one process in a script run as several"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def _one(e: ast.AST | None) -> bool:
    return isinstance(e, ast.Constant) and e.value == 1 and not isinstance(e.value, bool)


def _own_rank(m, e: ast.AST | None) -> bool:
    """Each process's own rank: a rank the launcher or the spawner hands it, by what the file shows
    or by its name (`args.local_rank`, `rank`, `gpu` of a spawned worker)."""
    if e is None or isinstance(e, ast.Constant):
        return False
    if isinstance(e, ast.Attribute) and _only_constants(m, e):
        return False  # `cls.rank = 0` then `rank=cls.rank`: one fixed rank
    if rank_kind(m, e) is not None:
        return True
    name = dotted(e) if isinstance(e, (ast.Name, ast.Attribute)) else None
    if name is None:
        return False
    last = name.rsplit(".", 1)[-1].lower()
    if "local_rank" in last:
        return True  # the launcher's option or variable, whatever the file does with it
    # a worker's parameter (`def train(rank, world_size)`, which mp.spawn calls with each index);
    # not an attribute set to a constant (`cls.rank = 0`)
    fn = m.enclosing_function(e)
    if not isinstance(e, ast.Name) or fn is None or isinstance(fn, ast.Lambda) or "rank" not in last:
        return False
    return e.id in param_names(fn) and not rebinds(fn, e.id)


def _only_constants(m, e: ast.Attribute) -> bool:
    """Every assignment of the attribute ``e`` in this file (of ``self.``/``cls.``, in its class) is
    a constant, and there is one."""
    name = dotted(e)
    owner = None
    if name is not None and name.split(".", 1)[0] in ("self", "cls"):
        owner = next((a for a in m.ancestors(e) if isinstance(a, ast.ClassDef)), None)
    values = [
        a.value
        for a in m.nodes(ast.Assign)
        for t in a.targets
        if dotted(t) == name and (owner is None or any(c is owner for c in m.ancestors(a)))
    ]
    return bool(values) and all(isinstance(v, ast.Constant) for v in values)


def _several_gpus_test(m, call: ast.Call) -> ast.AST | None:
    """The `if torch.cuda.device_count() > 1:` (or `n_gpu > 1`) the call sits under, if any."""
    child = call
    for a in m.ancestors(call):
        inside, child = isinstance(a, ast.If) and any(child is s for s in a.body), a
        if not inside:
            continue
        for t in ast.walk(a.test):
            if (
                isinstance(t, ast.Compare)
                and len(t.ops) == 1
                and isinstance(t.ops[0], ast.Gt)
                and isinstance(t.comparators[0], ast.Constant)
                and t.comparators[0].value == 1
                and _gpu_count(m, t.left)
            ):
                return t
    return None


def _gpu_count(m, e: ast.AST) -> bool:
    if isinstance(e, ast.Call):
        return (m.qualname(e.func) or "").endswith("cuda.device_count")
    name = dotted(e) if isinstance(e, (ast.Name, ast.Attribute)) else None
    return name is not None and name.rsplit(".", 1)[-1].lower() in ("n_gpu", "n_gpus", "num_gpus", "ngpus", "gpu_count")


def check(m):
    for call in m.dist_calls("init_process_group"):
        if not _one(m.keyword(call, "world_size")):
            continue
        rank = m.keyword(call, "rank")
        if _own_rank(m, rank):
            why = (
                f"`rank={ast.unparse(rank)}` is each process's own rank, so every process but the "
                "first fails at once (a rank past the world size)"
            )
        elif (test := _several_gpus_test(m, call)) is not None:
            why = (
                f"it runs only when `{ast.unparse(test)}`, for several processes: each one calls "
                "itself the whole job, so all but the first fail on the rendezvous port in use, or "
                "they train apart and never average their gradients"
            )
        else:
            continue
        yield m.finding(
            CODE,
            call,
            f"`init_process_group(world_size=1)` makes a group of one process, but {why}; the "
            "launcher's WORLD_SIZE is ignored",
            SEVERITY,
            hint="drop `world_size` and `rank` (env:// reads WORLD_SIZE and RANK from torchrun), or "
            "pass the launcher's values",
        )
