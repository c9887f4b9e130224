"""DDP301: a collective reached by some ranks only.

## What it does
Compares every rank's sequence of collectives (all_reduce, broadcast, barrier, all_gather, ...,
new_group) and DistributedDataParallel forwards, as the per-rank interpreter computes them for world
sizes 2..8 through rank-dependent branches (`rank == 0`, `rank % 2`, `local_rank`, `get_rank()`,
`RANK`), early returns and calls to the file's own functions. Reports the first call where the ranks
part ways. Branches where every rank reaches a matching call are fine. A handler registered on some
ranks only (pytorch-ignite's `trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda _:
evaluator.run(val_loader))` under `if local_rank == 0:`) runs on those ranks only: its collectives
and DDP forwards count there. A rank test that keeps only DDP forwards from the other ranks is
DDP308's: whether those communicate depends on the model's buffers, which the file rarely shows.

## Why is this bad?
A collective completes only when every rank of the group calls it. If rank 0 alone calls
`dist.barrier()` (or runs the DDP model, whose forward/backward synchronise), it waits forever and the
job hangs until the timeout, with no error pointing at the cause.

## Example
```python
if rank == 0:
    dist.barrier()         # only rank 0 waits
```

## Use instead
```python
dist.barrier()             # every rank reaches it
```
"""

from __future__ import annotations

import ast
from dataclasses import replace

from ddpdoctor.script.divergent import by_rank_test, guard_text, partings, ranks_text

CODE = "DDP301"
TITLE = "Collective reached by some ranks only"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def _label(ev, m=None) -> str:
    name = "the DDP model's forward" if ev.kind == "ddp_forward" else f"`{ev.op}`"
    if ev.kind == "ddp_forward" and ev.arg:  # inside a function of another module handed the wrapper
        name = f"the DDP model's forward inside `{ev.arg}(...)`, which is handed the DDP wrapper,"
    if ev.library:
        name = f"`{ev.library}` ({'an' if ev.op[0] in 'aeiou' else 'a'} {ev.op} of every rank inside it)"
    via = ""
    if ev.chain:
        last = ev.chain_paths[-1] if ev.chain_paths else None
        at = f"line {ev.chain[-1]}" if last is None else f"{last.rsplit('/', 1)[-1]}:{ev.chain[-1]}"
        via = f" (reached through the call on {at})"
    if m is not None and ev.chain:
        via = f" (reached through {m.event_chain(ev)})"
    where = f"line {ev.node.lineno}" if ev.path is None else f"{ev.path.rsplit('/', 1)[-1]}:{ev.node.lineno}"
    return f"{name} on {where}{via}"


def check(m):
    for group in by_rank_test(partings(m)):
        if all(p.forward for p in group):
            continue  # DDP forwards only: DDP308
        first, rest = group[0], group[1:]
        anchor = first.anchor
        if anchor is first.event.node:  # (no call on the way sits under a rank test of its own)
            anchor = _early_exit(m, first.guard, anchor) or anchor
        held = _held_at_forward(m, first)
        if held is not None:
            anchor = held  # no rank test: where the others part from it, their DDP forward
        f = _finding(m, first.run, first.event, list(first.ranks), first.alt, first.guard, anchor)
        if rest:
            lines = ", ".join(str(p.anchor.lineno) for p in rest)
            f = replace(
                f,
                message=f"{f.message}; the same "
                + ("rank test" if first.guard is not None else "parting")
                + f" keeps the other ranks from the collectives on line{'s' if len(rest) > 1 else ''} {lines} too",
            )
            if first.forward:  # as severe as the worst of them: an all_reduce will hang
                f = replace(f, severity=m.finding(CODE, first.anchor, "", SEVERITY).severity)
        yield f


def _held_at_forward(m, p):
    """With no rank test in sight, the DDP forward of this file where all the other ranks are held
    (rank 0 evaluates a copy it alone made, the others the DDP model): the line that parts them."""
    if p.guard is not None or not p.alt:
        return None
    others = {id(other.node): other for _rs, other in p.alt if other is not None}
    if len(others) != 1:
        return None
    other = next(iter(others.values()))
    if other.kind != "ddp_forward" or other.path is not None or not isinstance(other.node, ast.AST):
        return None
    return other.node


def _early_exit(m, guard, anchor):
    """The ``if`` of a rank test that sends some ranks out early (``if done and rank == 0: return``)
    when the collective it keeps from them is in another function: that test is the line to change."""
    if guard is None or guard.path is not None:
        return None
    node = m.parents.get(guard.test)
    if not isinstance(node, ast.If) or node.test is not guard.test or not node.body:
        return None
    if not isinstance(node.body[-1], (ast.Return, ast.Break, ast.Continue, ast.Raise)):
        return None
    # a collective of a plain statement of the same block, right after the exit, is where the
    # labels and users look; one deep in the loops below, or in another function, is not
    block = m.parents.get(node)
    for a in (anchor, *m.ancestors(anchor)):
        if m.parents.get(a) is block and isinstance(a, ast.stmt):
            plain = isinstance(a, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return))
            return None if plain or anchor.lineno == a.lineno else node  # (or the header of a `with`)
    return node


def _finding(m, run, ev, ranks, alt, guard, anchor):
    instead = "; ".join(
        f"{ranks_text(rs)} "
        + ("reach" if len(rs) > 1 else "reaches")
        + (" no further collective" if other is None else f" {_label(other)} instead")
        for rs, other in alt
    )
    others = [r for r in range(run.world_size) if r not in ranks]
    sev = "warning" if ev.kind == "ddp_forward" else SEVERITY
    return m.finding(
        CODE,
        anchor,
        f"{_label(ev, m)} is reached by {ranks_text(ranks)} only{guard_text(guard)} (world size "
        f"{run.world_size}); {instead}: "
        + (
            f"{'they' if len(ranks) > 1 else 'it'} may wait forever (a DDP forward broadcasts the "
            "model's buffers, BatchNorm statistics, from rank 0 and needs every rank for it)"
            if ev.kind == "ddp_forward"
            else f"{'they' if len(ranks) > 1 else 'it'} will wait forever"
        ),
        sev,
        hint="make every rank reach the same collectives in the same order (move it out of the "
        "rank-dependent branch, or use the unwrapped `model.module` for rank-0-only evaluation)",
        world_size=run.world_size,
        ranks=ranks,
        other_ranks=others,
    )
