"""DDP503: torch.load without map_location in distributed code.

## What it does
Finds `torch.load(path)` with no `map_location` in a script that sets up torch.distributed or DDP.

## Why is this bad?
Tensors are restored onto the device they were saved from — usually `cuda:0`. Every rank then
allocates the whole checkpoint on GPU 0: memory spikes on one GPU, out-of-memory errors, and a
slow start while it all funnels through one device.

## Example
```python
ckpt = torch.load("ckpt.pt")
```

## Use instead
```python
ckpt = torch.load("ckpt.pt", map_location="cpu")   # or {"cuda:0": f"cuda:{local_rank}"}
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.foreign import foreign_events, guarded_on_the_way, reported_there
from ddpdoctor.script.writers import per_process_path

CODE = "DDP503"
TITLE = "torch.load without map_location"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def _source(m, call) -> str | None:
    """The file a load reads, as text to compare (``args.resume``)."""
    arg = call.args[0] if call.args else m.keyword(call, "f")
    return ast.dump(arg) if arg is not None else None


def _other_arm_maps(m, call) -> bool:
    """This load is one arm of an ``if`` whose other arm loads the same file with ``map_location``
    (``if gpu is None: torch.load(p) else: torch.load(p, map_location=f"cuda:{gpu}")``): the author
    chose the device per case, and the plain load is the case with no GPU of its own to map to. A
    load of another file in the other arm (resume a model here, read a pretrained part there) says
    nothing about this one."""
    path = _source(m, call)
    if path is None:
        return False
    child = call
    for a in m.ancestors(call):
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            return False
        if isinstance(a, ast.If):
            other = a.orelse if any(child is s for s in a.body) else a.body
            loads = {id(c) for c in m.calls_named("torch.load")}
            for st in other:
                for n in ast.walk(st):
                    if id(n) in loads and m.keyword(n, "map_location") is not None and _source(m, n) == path:
                        return True
        child = a
    return False


def _unmapped(m, call) -> bool:
    return (
        len(call.args) < 2
        and m.keyword(call, "map_location") is None
        and not any(k.arg is None for k in call.keywords)
        # a file of this rank's own (`queue{rank}.pth`) was saved from this rank's device:
        # it comes back there, not onto cuda:0
        and not per_process_path(call.args[0] if call.args else m.keyword(call, "f"), m)
        and not _other_arm_maps(m, call)
    )


def check(m):
    if m.one_process:  # init_process_group(world_size=1): no other rank to collide with
        return
    if not m.distributed_context:
        return
    yield from _loads_in_other_files(m)
    for call in m.calls_named("torch.load"):
        if m.rank_guard(call) is None and _unmapped(m, call):  # one rank loading crowds nothing
            yield m.finding(
                CODE,
                call,
                "`torch.load` without `map_location` in a distributed script: every rank "
                "loads the tensors onto the GPU they were saved from (usually cuda:0)",
                SEVERITY,
                hint="pass map_location='cpu' or the rank's own device",
            )


def _loads_in_other_files(m):
    """Project mode: ``torch.load`` without ``map_location`` in another file (a checkpoint helper with
    no distributed code of its own) that several ranks reach through a call here. One finding per
    call here, naming every such load it leads to."""
    by_anchor: dict[int, list] = {}
    for fe in foreign_events(m, "load"):
        load, other = fe.event.node, fe.other
        if not isinstance(load, ast.Call) or not _unmapped(other, load) or guarded_on_the_way(m, fe):
            continue
        if not any(len(ranks) > 1 for _run, ranks in fe.reach):
            continue
        if reported_there(check, other, load):
            continue
        by_anchor.setdefault(id(fe.anchor), []).append(fe)
    for found in by_anchor.values():
        first = found[0]
        name = ast.unparse(first.anchor.func) if isinstance(first.anchor, ast.Call) else "the helper"
        places = sorted({(fe.other.path.rsplit("/", 1)[-1], fe.event.node.lineno) for fe in found})
        wheres = [f"{file}:{line}" for file, line in places]
        loads = f"its `torch.load` at {wheres[0]} has" if len(wheres) == 1 else (
            f"its `torch.load` calls at {', '.join(wheres)} have"
        )
        yield m.finding(
            CODE,
            first.anchor,
            f"every rank calls `{name}` here, and {loads} no `map_location`: every rank loads the "
            f"tensors onto the GPU they were saved from, usually cuda:0 ({m.event_chain(first.event)})",
            SEVERITY,
            hint="pass map_location='cpu' or the rank's own device there",
            cause=" ".join(sorted({f"{fe.other.path}:{fe.event.node.lineno}" for fe in found})),
        )
