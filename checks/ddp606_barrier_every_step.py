"""DDP606: a barrier on every training step.

## What it does
Finds `dist.barrier()` that runs on every pass of a training loop: a loop whose own body runs the
backward pass, with the barrier in that body under no test that picks some passes (every N steps,
one rank); a setting the loop never changes (`if not args.debug:`) picks none.

## Why is this bad?
DDP's gradient all-reduce already keeps the ranks in step: no rank starts step N+1 before every rank
has sent its gradients of step N. A barrier on top of it is one more round trip through the whole
job on every step, and the fastest ranks wait idle for the slowest one twice per step instead of
once. On many nodes the lost time adds up to several percent of the run.

## Example
```python
for x, y in loader:
    loss = criterion(model(x), y)
    dist.barrier()
    loss.backward()
    optimizer.step()
```

## Use instead
```python
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()          # the gradient all-reduce is the synchronisation
    optimizer.step()
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.nodes import child_nodes
from ddpdoctor.script.ranks import guard_kind

CODE = "DDP606"
TITLE = "Barrier on every training step"
KIND = "script"
SEVERITY = "info"
CONFIDENCE = "medium"
# why it is not in the default selection (benchmarks/lint_rule_precision.py on the labelled sets)
OPT_IN_BECAUSE = (
    "on the 42 labelled folders 4 of its 5 reports are labelled bugs; the fifth is a per-step barrier "
    "placed to wait for rank 0's periodic save, which the labeller marked correct (every rank reaches "
    "it): 0.80, under the 0.95 a default rule needs"
)

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _own_calls(loop: ast.AST):
    """The calls the loop's own body makes on each pass: not those of nested loops or functions."""
    stack = list(loop.body)
    while stack:
        n = stack.pop()
        if isinstance(n, (*_SCOPES, *_LOOPS)):
            continue
        if isinstance(n, ast.Call):
            yield n
        stack.extend(child_nodes(n))


def _every_pass(m, call: ast.Call, loop: ast.AST) -> bool:
    """Nothing between the call and the loop picks some passes: an `if` only on a setting the loop
    never changes (`if not args.debug:`), no test of the step or the rank, no `try` handler."""
    stored = set()  # the names the loop changes, also through an item or attribute (`state["step"] += 1`)
    for n in ast.walk(loop):
        if isinstance(n, (ast.Name, ast.Subscript, ast.Attribute)) and isinstance(n.ctx, ast.Store):
            root = n
            while isinstance(root, (ast.Subscript, ast.Attribute)):
                root = root.value
            if isinstance(root, ast.Name):
                stored.add(root.id)
    for a in m.ancestors(call):
        if a is loop:
            return True
        if isinstance(a, ast.If):
            read = {n.id for n in ast.walk(a.test) if isinstance(n, ast.Name)}
            if (
                read & stored
                or guard_kind(m, a.test) is not None
                or any(
                    isinstance(n, ast.Call) or isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)
                    for n in ast.walk(a.test)
                )
            ):
                return False
            continue
        if isinstance(a, (ast.IfExp, ast.ExceptHandler, ast.BoolOp, *_SCOPES, *_LOOPS)):
            return False
    return False


def check(m):
    for call in m.dist_calls("barrier"):
        if call.args or call.keywords:
            continue  # a barrier on a group of its own, or with a device list: not the job's step
        loop = m.enclosing_loop(call)
        if loop is None or not _every_pass(m, call, loop):
            continue
        backward = next(
            (c for c in _own_calls(loop) if isinstance(c.func, ast.Attribute) and c.func.attr == "backward"),
            None,
        )
        if backward is None:
            continue
        yield m.finding(
            CODE,
            call,
            f"a barrier on every training step (the loop on line {loop.lineno} runs the backward on line "
            f"{backward.lineno}): DDP's gradient all-reduce already keeps the ranks in step, so this adds "
            "a round trip through the whole job to every step",
            SEVERITY,
            hint="remove it, or keep it where ranks must wait for one rank's work (a save, a file), "
            "outside the per-step loop",
        )
