"""DDP313: a training step's error handler that lets one rank go on quietly.

## What it does
Finds a `try` around a training step of a DDP job (a backward pass, or a collective) inside a loop,
whose handler catches the errors one rank meets alone (`RuntimeError` such as CUDA out of memory
on a long batch, `Exception`, a bare `except`) and then leaves the step without failing: `continue`
to the next batch, `break` or `return` out of the loop, or a process exit with status 0 (`exit(0)`,
`sys.exit()`). A handler that re-raises or exits with an error status is left alone (the launcher
then stops every rank), and so are `KeyboardInterrupt` handlers (Ctrl-C reaches every rank).

## Why is this bad?
An out-of-memory error or a bad batch happens on one rank, not on all. The rank that skips its
backward (or leaves the loop, or exits with success) no longer joins the gradient all-reduce that
the others enter: they wait in it until the NCCL timeout. torchrun does not stop the job for a
worker that exited with status 0, so the others hang.

## Example
```python
for batch in loader:
    try:
        loss = ddp_model(batch).loss
        loss.backward()
        optimizer.step()
    except RuntimeError:        # CUDA out of memory on this rank's batch
        torch.cuda.empty_cache()
        continue                # the other ranks wait in this step's all-reduce
```

## Use instead
```python
for batch in loader:
    loss = ddp_model(batch).loss   # let the error end the job: torchrun stops every rank
    loss.backward()
    optimizer.step()
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.interp import COLLECTIVES
from ddpdoctor.script.names import EXIT_CALLS, dotted

CODE = "DDP313"
TITLE = "Error handler lets one rank leave the training step quietly"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "medium"
OPT_IN_BECAUSE = (
    "new in the fifth round: 2 of 2 reports on the labelled sets are bugs, too few to show 0.95 on "
    "code nobody has seen"
)

# errors one rank meets alone: CUDA out of memory, a malformed batch
_CAUGHT = frozenset(("RuntimeError", "Exception", "BaseException", "OutOfMemoryError", "torch.cuda.OutOfMemoryError"))
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


def _catches(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((dotted(t) or "") in _CAUGHT for t in types)


def _quiet_exit(m, stmts: list[ast.stmt]) -> ast.AST | None:
    """The statement by which the handler leaves the step without failing, else None (it raises,
    exits with an error status or falls through)."""
    for st in stmts:
        for n in ast.walk(st):
            if isinstance(n, ast.Raise):
                return None
            if isinstance(n, ast.Call) and (m.qualname(n.func) or dotted(n.func) or "") in EXIT_CALLS:
                status = n.args[0] if n.args else None
                if status is None or (isinstance(status, ast.Constant) and status.value in (0, None, False)):
                    return n  # a success status: the launcher lets the other ranks wait
                return None
    last = stmts[-1] if stmts else None
    if isinstance(last, (ast.Continue, ast.Break, ast.Return)):
        return last
    return None


def _steps(m, body: list[ast.stmt]) -> ast.Call | None:
    """A call in ``body`` every rank must join: a backward pass of the DDP job, or a collective."""
    collectives = {id(c) for c in m.dist_calls(*COLLECTIVES)}
    for st in body:
        for n in ast.walk(st):
            if not isinstance(n, ast.Call):
                continue
            if id(n) in collectives:
                return n
            if isinstance(n.func, ast.Attribute) and n.func.attr == "backward":
                return n
    return None


def check(m):
    if not m.ddp_constructors or m.one_process:
        return  # a DDP model of this file: its backward all-reduces on every rank
    for node in m.nodes(ast.Try):
        if not any(isinstance(a, _LOOPS) for a in m.ancestors(node)):
            continue
        step = _steps(m, node.body)
        if step is None:
            continue
        for handler in node.handlers:
            if not _catches(handler):
                continue
            leave = _quiet_exit(m, handler.body)
            if leave is None:
                continue
            how = (
                f"`{ast.unparse(leave)}`"
                if isinstance(leave, ast.Call)
                else f"`{type(leave).__name__.lower()}`"
            )
            yield m.finding(
                CODE,
                handler,
                f"an error this rank meets alone (CUDA out of memory, a bad batch) in the step with "
                f"the backward or collective on line {step.lineno} is caught here and the rank goes on "
                f"with {how} (line {leave.lineno}): the other ranks wait for it in the all-reduce it "
                "skips, until the timeout",
                SEVERITY,
                hint="let the error propagate (or re-raise it) so the launcher stops every rank; "
                "to skip a batch, agree on it first (all-reduce a flag) so every rank skips it",
                chain=[step.lineno, handler.lineno, leave.lineno],
            )
            break
