"""DDP504: other ranks load right after a rank-0 save, with no barrier between.

## What it does
Using the per-rank interpreter, finds a `torch.save` that only rank 0 runs followed by a
`torch.load` of the same path on the other ranks, with no collective (barrier) that separates them.

## Why is this bad?
Nothing makes the other ranks wait for rank 0 to finish writing: they read a missing, partial or
previous checkpoint. It usually works on a fast local disk and fails on a shared file system.

## Example
```python
if rank == 0:
    torch.save(model.module.state_dict(), path)
model.load_state_dict(torch.load(path, map_location=device))
```

## Use instead
```python
if rank == 0:
    torch.save(model.module.state_dict(), path)
dist.barrier()
model.load_state_dict(torch.load(path, map_location=device))
```
"""

from __future__ import annotations

CODE = "DDP504"
TITLE = "Load after a rank-0 save without a barrier"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"
_SYNC = ("collective", "ddp_forward")


def _syncs_before(events, index: int) -> int:
    # a load past as many collectives as rank 0's save is in the same unsynchronised stretch
    return sum(1 for e in events[:index] if e.kind in _SYNC)


def check(m):
    if not m.calls_named("torch.save") or not m.calls_named("torch.load"):
        return
    reported: set[int] = set()
    for run in m.runs:
        if not run.complete:
            continue
        r0 = run.traces[0].events
        for i, save in enumerate(r0):
            if save.kind != "save" or save.arg is None:
                continue
            if any(e.node is save.node for t in run.traces[1:] for e in t.events):
                continue  # not a rank-0-only save
            c0 = _syncs_before(r0, i)
            for rank, t in enumerate(run.traces[1:], 1):
                for j, load in enumerate(t.events):
                    if load.kind == "load" and load.arg == save.arg and _syncs_before(t.events, j) == c0:
                        if id(load.node) not in reported:
                            reported.add(id(load.node))
                            yield m.finding(
                                CODE,
                                load.node,
                                f"rank {rank} loads `{load.arg}` while rank 0 may still "
                                f"be saving it (line {save.node.lineno}): no barrier between them",
                                SEVERITY,
                                hint="call `dist.barrier()` after the rank-0 save",
                            )
