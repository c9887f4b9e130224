"""DDP315: wandb logged on every rank, but started on some ranks only.

## What it does
Finds `wandb.log(...)` (and `wandb.watch`, `wandb.define_metric`, `wandb.save`, `wandb.log_artifact`)
that every rank reaches in a distributed script whose every `wandb.init(...)` sits behind a rank
test (`if rank == 0: wandb.init(...)`). A call under a rank test of its own, or under a test of
`wandb.run`, is left alone, and so is a script that starts wandb on the other ranks too (`mode=
"disabled"` for them, or an `init` outside any rank test).

## Why is this bad?
wandb refuses to log before `wandb.init()`: on every rank that skipped the init, the first
`wandb.log` raises `wandb.Error: You must call wandb.init() before wandb.log()`. Those ranks die at
the first logged step, and the rank that started wandb waits for them in the next collective until
the timeout.

## Example
```python
if rank == 0:
    wandb.init(project="run")
for step, batch in enumerate(loader):
    loss = train_step(batch)
    wandb.log({"loss": loss})
```

## Use instead
```python
if rank == 0:
    wandb.init(project="run")
for step, batch in enumerate(loader):
    loss = train_step(batch)
    if rank == 0:
        wandb.log({"loss": loss})
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script import ranks
from ddpdoctor.script.names import dotted
from ddpdoctor.script.nodes import caught
from ddpdoctor.script.writers import every_rank_reaches, guard_chains

CODE = "DDP315"
TITLE = "wandb logged on every rank, started on some ranks only"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

_NEEDS_INIT = ("log", "watch", "define_metric", "save", "log_artifact")


def _wandb_calls(m, attr: str) -> list[ast.Call]:
    return m.calls_named(f"wandb.{attr}")


def _under_run_test(m, node: ast.AST) -> bool:
    """``if wandb.run is not None:`` (or any test that asks for the run) around ``node``."""
    child = node
    for a in m.ancestors(node):
        if isinstance(a, (ast.If, ast.IfExp)) and child is not a.test and "wandb.run" in ast.unparse(a.test):
            return True
        child = a
    return False


_BROAD = frozenset(("Exception", "BaseException"))


def _others_sent_on_before(m, node: ast.AST) -> bool:
    """An earlier statement of a block around ``node`` sends the other ranks away on a rank test
    (``if rank > 0: continue``, ``if not is_main: return``)."""
    child = node
    for a in m.ancestors(node):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(a, field, None)
            if not isinstance(block, list) or not any(child is st for st in block):
                continue
            for st in block:
                if st is child:
                    break
                if (
                    isinstance(st, ast.If)
                    and not st.orelse
                    and isinstance(st.body[-1], (ast.Continue, ast.Return, ast.Break))
                    and ranks.guard_kind(m, st.test) is not None
                ):
                    return True
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)):
            break
        child = a
    return False


def _name_rebound(m) -> bool:
    """``wandb = None`` (or an ``import wandb`` in a branch): on some ranks the name is not the module."""
    for node in m.nodes(ast.Assign):
        if any(isinstance(t, ast.Name) and t.id == "wandb" for t in node.targets):
            return True
    return any(
        m.enclosing_function(node) is not None
        and any(a.name == "wandb" and a.asname is None for a in node.names)
        for node in m.nodes(ast.Import)
    )


def check(m):
    if not m.distributed_context or m.one_process:
        return
    inits = _wandb_calls(m, "init")
    if not inits or _name_rebound(m):
        return
    # every init behind a rank test on every way to it: the other ranks never start wandb
    if not all(chains and all(chain for chain in chains) for chains in (guard_chains(m, c) for c in inits)):
        return
    for attr in _NEEDS_INIT:
        for call in _wandb_calls(m, attr):
            if _under_run_test(m, call) or caught(m, call, _BROAD) or _others_sent_on_before(m, call):
                continue
            if not every_rank_reaches(m, call):
                continue
            init = inits[0]
            yield m.finding(
                CODE,
                call,
                f"every rank calls `{dotted(call.func)}` here, but `wandb.init` runs on some ranks only "
                f"(line {init.lineno}): on the others wandb raises 'You must call wandb.init() before "
                f"wandb.{attr}()', those ranks die and the rest wait for them in the next collective",
                SEVERITY,
                hint="log under the same rank test as the init, or start wandb on every rank "
                "(`wandb.init(mode='disabled')` on the others)",
                chain=[init.lineno, call.lineno],
            )
            return  # one finding per cause: the init that only some ranks run
