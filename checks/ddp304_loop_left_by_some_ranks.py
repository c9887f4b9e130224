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
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _rank_test_between(m, exit_node: ast.AST, loop: ast.AST):
    """The rank test of an ``if`` between the exit and its loop (the exit in its body or else)."""
    child = exit_node
    for a in m.ancestors(exit_node):
        if a is loop:
            return None
        if isinstance(a, ast.If) and child is not a.test and ranks.guard_kind(m, a.test) is not None:
            return a
        child = a
    return None


def _communicates(m, loop: ast.AST, skip: ast.AST) -> ast.AST | None:
    """A call in ``loop`` (outside the rank-tested ``skip`` block) that every rank must join: a
    collective, or a backward pass when the job wraps its model in DDP."""
    collectives = {id(c) for c in m.dist_calls(*COLLECTIVES)}
    # a project's own wrapper of the process group (`distr.barrier()`, `comm.all_reduce(t)`)
    collectives |= {id(c) for op in _WRAPPED for c in m.method_calls(op)}
    ddp = bool(m.ddp_constructors) or m.distributed_context and m.mentions("DistributedDataParallel", "prepare(")
    for n in ast.walk(loop):
        if not isinstance(n, ast.Call) or any(a is skip for a in m.ancestors(n)):
            continue
        if id(n) in collectives:
            return n
        if ddp and isinstance(n.func, ast.Attribute) and n.func.attr == "backward":
            return n
    return None


def _loop_of(m, exit_node: ast.AST) -> ast.AST | None:
    """The loop a ``break`` leaves, or the outermost loop of the function a ``return`` leaves."""
    found = None
    for a in m.ancestors(exit_node):
        if isinstance(a, _SCOPES):
            return found
        if isinstance(a, _LOOPS):
            if isinstance(exit_node, ast.Break):
                return a
            found = a
    return found


def check(m):
    if not m.distributed_context or m.pinned_rank is not None:
        return
    reported: set[int] = set()
    for exit_node in m.nodes(ast.Break, ast.Return):
        loop = _loop_of(m, exit_node)
        if loop is None or id(loop) in reported:
            continue
        test = _rank_test_between(m, exit_node, loop)
        if test is None:
            continue
        comm = _communicates(m, loop, test)
        if comm is None:
            continue
        reported.add(id(loop))
        how = "break" if isinstance(exit_node, ast.Break) else "return"
        yield m.finding(
            CODE,
            exit_node,
            f"this `{how}` leaves the loop on line {loop.lineno} only on the ranks that pass the rank "
            f"test `{ast.unparse(test.test)[:40]}` (line {test.lineno}); the others go on to the "
            f"next iteration and wait in its collective (line {comm.lineno}) for a rank that has left "
            f"({m.chain_text((test.lineno, exit_node.lineno), comm.lineno)})",
            SEVERITY,
            hint="take the decision on one rank, then broadcast it (dist.broadcast / "
            "broadcast_object_list) so that every rank leaves the loop together",
        )
