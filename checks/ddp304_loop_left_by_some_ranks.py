"""DDP304: a training loop left by some ranks only.

## What it does
Finds a `break` (or `return`) out of a loop that sits under a rank test inside that loop (`if rank
== 0: ... if patience_exceeded: break`, `if is_main_process(): ... return`), where the loop itself
communicates on every rank: a torch.distributed collective, or a backward pass in a DDP job (DDP
all-reduces the gradients in it). Early stopping decided on rank 0 is the usual case.

## Why is this bad?
Only the ranks that pass the rank test can take that exit; whatever the inner condition says, the
others never even evaluate it. They go on to the next iteration and wait in its all-reduce or
barrier for a rank that has left the loop: the job hangs until the collective times out.

## Example
```python
for epoch in range(epochs):
    train_one_epoch(ddp_model, loader)      # backward: gradient all-reduce on every rank
    if rank == 0:
        if early_stopper.should_stop(validate(ddp_model.module)):
            break                           # rank 0 leaves; the others wait in the next epoch
```

## Use instead
```python
for epoch in range(epochs):
    train_one_epoch(ddp_model, loader)
    stop = torch.zeros(1, device=device)
    if rank == 0:
        stop += early_stopper.should_stop(validate(ddp_model.module))
    dist.broadcast(stop, src=0)             # every rank takes the same decision
    if stop.item():
        break
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script import ranks
from ddpdoctor.script.interp import COLLECTIVES

CODE = "DDP304"
TITLE = "Loop left by some ranks only"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

_WRAPPED = ("barrier", "all_reduce", "all_gather", "broadcast", "reduce_scatter", "all_gather_object")
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


def _communicates(m, loop: ast.AST, skip: ast.If) -> ast.AST | None:
    """A call in ``loop`` (outside the rank-tested ``skip`` block) that every rank must join: a
    collective, or a backward pass when the job wraps its model in DDP."""
    collectives = {id(c) for c in m.dist_calls(*COLLECTIVES)}
    # a project's own wrapper of the process group (`distr.barrier()`, `comm.all_reduce(t)`)
    collectives |= {id(c) for op in _WRAPPED for c in m.method_calls(op)}
    ddp = (
        bool(m.ddp_constructors)
        or m.distributed_context
        and m.mentions("DistributedDataParallel", "prepare(")
    )
    inside = range(skip.lineno, (skip.end_lineno or skip.lineno) + 1)
    for n in ast.walk(loop):
        if not isinstance(n, ast.Call) or n.lineno in inside:
            continue
        if id(n) in collectives:
            return n
        if ddp and isinstance(n.func, ast.Attribute) and n.func.attr == "backward":
            return n
    return None


def _exits(body: list, loops: list, ifs: list):
    """(exit statement, the loop it leaves, the ifs between them) for every ``break`` and ``return``
    in ``body`` (one walk per function, no parent map: the stacks say where each exit sits)."""
    for st in body:
        if isinstance(st, ast.Break) and loops:
            loop = loops[-1]
            yield st, loop, [i for depth, i in ifs if depth >= len(loops)]
        elif isinstance(st, ast.Return) and loops:
            yield st, loops[0], [i for depth, i in ifs if depth >= 1]
        elif isinstance(st, _LOOPS):
            yield from _exits(st.body, [*loops, st], ifs)
            yield from _exits(st.orelse, loops, ifs)
        elif isinstance(st, ast.If):
            inner = [*ifs, (len(loops), st)]
            yield from _exits(st.body, loops, inner)
            yield from _exits(st.orelse, loops, inner)
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            yield from _exits(st.body, loops, ifs)
        elif isinstance(st, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            for part in (st.body, *(h.body for h in st.handlers), st.orelse, st.finalbody):
                yield from _exits(part, loops, ifs)


def check(m):
    # a file that tests the rank and calls a project's barrier or all_reduce wrapper runs on every rank
    wrapped = any(m.method_calls(op) for op in _WRAPPED)
    if not (m.distributed_context or wrapped) or m.pinned_rank is not None:
        return
    if not (m.mentions("break", "return") and m.nodes(*_LOOPS)):
        return
    reported: set[int] = set()
    for fn in (m.tree, *m.functions):
        for exit_node, loop, ifs in _exits(fn.body, [], []):
            if id(loop) in reported:
                continue
            test = next((i for i in ifs if ranks.guard_kind(m, i.test) is not None), None)
            if test is None or ranks.single_process_arm(m, exit_node):
                continue  # (``if RANK == -1 and stop: break``: one process, no rank left behind)
            comm = _communicates(m, loop, test)
            if comm is None:
                continue
            reported.add(id(loop))
            how = "break" if isinstance(exit_node, ast.Break) else "return"
            yield m.finding(
                CODE,
                exit_node,
                f"this `{how}` leaves the loop on line {loop.lineno} only on the ranks that pass the "
                f"rank test `{ast.unparse(test.test)[:40]}` (line {test.lineno}); the others go on to "
                f"the next iteration and wait in its collective (line {comm.lineno}) for a rank that "
                f"has left ({m.chain_text((test.lineno, exit_node.lineno), comm.lineno)})",
                SEVERITY,
                hint="take the decision on one rank, then broadcast it (dist.broadcast / "
                "broadcast_object_list) so that every rank leaves the loop together",
            )
