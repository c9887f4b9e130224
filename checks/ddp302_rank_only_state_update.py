"""DDP302: learning-rate scheduler or optimizer stepped on some ranks only.

## What it does
Finds `scheduler.step()`, `optimizer.step()` (and `scaler.step(optimizer)`) that run only under a
rank test (`if rank == 0:`, `if args.nr == 0 and scheduler:`, `if is_main_process():`, an early
return on the rank, or a guard around every call of the function that does it) in a DDP script
(also one whose model accelerate's `accelerator.prepare` wraps), and
an optimizer's, scheduler's or scaler's `load_state_dict(...)` under such a test (a resume that
restores their state on rank 0 only).

## Why is this bad?
DDP keeps the replicas equal by averaging gradients, but each rank applies them with its own
optimizer and learning rate. A scheduler stepped on rank 0 alone decays rank 0's learning rate
while the others keep the initial one, so the parameters silently drift apart, and usually only
rank 0's copy is checkpointed. No error is raised.

## Example
```python
for epoch in range(args.epochs):
    train(loader, model, optimizer)
    if rank == 0:
        scheduler.step()
        save(model)
```

## Use instead
```python
for epoch in range(args.epochs):
    train(loader, model, optimizer)
    scheduler.step()          # every rank
    if rank == 0:
        save(model)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import also_lines, dotted, name_words, training_state
from ddpdoctor.script.ranks import assignments, rank_kind

CODE = "DDP302"
TITLE = "Scheduler or optimizer stepped on some ranks only"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def _pipeline_schedule(m, owner: str) -> bool:
    """``owner`` is made by torch's pipelining (``ScheduleGPipe(stage, ...)``): its ``step(x)`` runs
    a pipeline schedule, not a learning-rate scheduler."""
    made = [v for v, _node in assignments(m, owner)]
    return bool(made) and all(
        isinstance(v, ast.Call) and (m.qualname(v.func) or "").startswith("torch.distributed.pipelining")
        for v in made
    )


def _steps(body: list, owner: str) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step"
        and dotted(n.func.value) == owner
        for st in body
        for n in ast.walk(st)
    )


def _every_arm_steps(node: ast.If, owner: str) -> bool:
    """Each arm of the ``if``/``elif``/``else`` chain steps ``owner``: every rank does, one way or another."""
    if not node.orelse or not _steps(node.body, owner):
        return False
    if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
        return _every_arm_steps(node.orelse[0], owner)
    return _steps(node.orelse, owner)


def _rate_broadcast_after(m, call: ast.Call) -> bool:
    """After the step, every rank takes a broadcast and writes a learning rate from it
    (``dist.broadcast(lr, src=0)`` then ``group["lr"] = lr.item()``): the rate one rank's scheduler
    set is everyone's again."""
    fn = m.enclosing_function(call)
    scope = fn if fn is not None else m.tree
    sent = [
        b for b in m.dist_calls("broadcast", "broadcast_object_list")
        if b.lineno > call.lineno and m.enclosing_function(b) is fn and m.rank_guard(b) is None
    ]
    if not sent:
        return False
    first = min(b.lineno for b in sent)
    return any(
        isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value == "lr"
        for a in ast.walk(scope) if isinstance(a, ast.Assign) and a.lineno > first
        for t in a.targets
    )


def _sides(m, test: ast.AST) -> set[str]:
    """Which ranks a test lets through, as far as it says: "zero" (``rank == 0``), "others"
    (``rank != 0``, ``rank > 0``)."""
    out = set()
    for c in ast.walk(test):
        if not (isinstance(c, ast.Compare) and len(c.ops) == 1):
            continue
        left, right = c.left, c.comparators[0]
        if isinstance(left, ast.Constant):
            left, right = right, left
        if not (isinstance(right, ast.Constant) and right.value == 0 and rank_kind(m, left) is not None):
            continue
        if isinstance(c.ops[0], ast.Eq):
            out.add("zero")
        elif isinstance(c.ops[0], (ast.NotEq, ast.Gt)):
            out.add("others")
    return out


def _complemented(m, steps: list) -> bool:
    """The owner is stepped under ``rank == 0`` in one place and under ``rank != 0`` in another of
    the same function (rank 0 replays the schedule while loading, the others after the broadcast of
    the step count): every rank steps."""
    by_fn: dict[int, set[str]] = {}
    for call, _owner, guard in steps:
        by_fn.setdefault(id(m.enclosing_function(call)), set()).update(_sides(m, guard.test))
    return any(sides >= {"zero", "others"} for sides in by_fn.values())


def check(m):
    # one cause, one finding: the steps one rank test decides are one finding, at the first
    by_test: dict[tuple, list] = {}
    # steps only where the file knows the DDP model; a restore under a rank test wherever ranks are
    # tested (the test says the job has several ranks, whoever builds the DDP model)
    # (accelerate's `accelerator.prepare(model)` and a project's `ddp_wrap(model)` wrap it too)
    stepping = bool(m.ddp_constructors or m.ddp_params or m.ddp_wrapper_calls)
    for call in m.method_calls("step") if stepping else ():
        owner = training_state(call)
        if owner is None:
            continue
        guard = m.rank_guard(call)
        if guard is None or _pipeline_schedule(m, owner):
            continue
        if "optim" not in owner.lower() and _rate_broadcast_after(m, call):
            continue  # the scheduler steps on rank 0, which then hands every rank its learning rate
        test_of = m.parents.get(guard.test) if not guard.chain else None
        if isinstance(test_of, ast.If) and _every_arm_steps(test_of, owner):
            continue  # `if first: s.step(x) elif last: s.step(target=y) else: s.step()`: every rank
        by_test.setdefault((guard.path, id(guard.test)), []).append((call, owner, guard))
    groups = [g for g in _by_owner(m, by_test) if not _complemented(m, g)]
    # a load under a test that also keeps a step away is the same cause: the step's finding says it
    yield from _restored(m, {id(guard.test) for g in groups for _c, _o, guard in g})
    for steps in groups:
        steps.sort(key=lambda s: (s[0].lineno, s[0].col_offset))
        call, owner, guard = steps[0]
        via = f", reached through {m.chain_text(guard.chain, call.lineno)}" if guard.chain else ""
        test = ast.unparse(guard.test)
        if len(test) > 40:
            test = test[:37] + "..."
        also = also_lines(c.lineno for c, o, _g in steps[1:] if o == owner)
        others = "".join(f" and `{o}.step()` (line {c.lineno})" for c, o, _g in steps[1:] if o != owner)
        # the test may let the step through or keep it away (an early return before it): either
        # way it runs on some ranks only, which is what the message says
        yield m.finding(
            CODE,
            call,
            f"`{owner}.step()`{also}{others} depend{'' if others else 's'} on the rank test `{test}` "
            f"(line {guard.line}{via}) and run{'' if others else 's'} on some ranks only: the other "
            "ranks keep their old learning rate or weights, and the replicas silently drift apart",
            SEVERITY,
            hint="step schedulers and optimizers on every rank; keep only logging and saving under the "
            "rank test",
            guard_line=guard.line,
        )


def _by_owner(m, by_test: dict[tuple, list]) -> list[list]:
    """The groups of steps, one per rank test, joined where they step the same object in one function:
    the scheduler stepped on rank 0 after the resume, every step and every epoch is one habit, one
    finding (a name in another function may hold another object)."""
    groups: list[list] = []

    def owners(steps) -> set:
        return {(o, id(m.enclosing_function(c))) for c, o, _g in steps}

    for steps in by_test.values():
        joined = [g for g in groups if owners(steps) & owners(g)]
        for g in joined:
            groups.remove(g)
            steps = steps + g
        groups.append(steps)
    return groups


def _restored(m, reported: set[int]):
    """``optimizer.load_state_dict(ckpt["optimizer"])`` under a rank test: DDP broadcasts the model's
    weights from rank 0 when it wraps the model, but nothing sends the optimizer's moments or the
    scheduler's position to the other ranks."""
    seen = set(reported)
    for call in [*m.method_calls("load_state_dict"), *_loaders_given_optimizer(m)]:
        owner = _optimizer_handed(call) or (training_state(call) if call.args else None)
        guard = m.rank_guard(call) if owner is not None else None
        if guard is None or id(guard.test) in seen:
            continue
        seen.add(id(guard.test))
        yield m.finding(
            CODE,
            call,
            f"{_what_loads(call, owner)} depends on the rank test `{ast.unparse(guard.test)[:40]}` "
            f"(line {guard.line}): the state is restored on some ranks only, and the others resume "
            "with a fresh optimizer or schedule, so the same averaged gradients move the replicas "
            "apart (DDP broadcasts the weights when it wraps the model, not the optimizer's state)",
            SEVERITY,
            hint="load the checkpoint on every rank (`map_location` to the rank's own device)",
            guard_line=guard.line,
        )


def _optimizer_handed(call: ast.Call) -> str | None:
    """The optimizer a checkpoint-loading helper is handed (``load_checkpoint(path, model,
    optimizer)``, ``resume(ckpt, optimizer=opt)``): it restores that optimizer's state."""
    name = (dotted(call.func) or "").rsplit(".", 1)[-1]
    if name == "load_state_dict" or not any(w.lower() in ("load", "resume", "restore") for w in name_words(name)):
        return None
    if (dotted(call.func) or "").startswith(("torch.", "np.", "numpy.")):
        return None  # a file read (`torch.load(optim_path)`): what it restores is decided after
    for a in (*call.args, *(k.value for k in call.keywords)):
        d = dotted(a) if isinstance(a, (ast.Name, ast.Attribute)) else None
        words = [w.lower() for w in name_words(d.rsplit(".", 1)[-1])] if d else []
        # the optimizer object itself, not a path or a state dict of it (`optim_state_path`)
        if words and words[0].startswith("optim") and not {"path", "file", "dir", "state", "sd", "ckpt"} & set(words):
            return d
    return None


def _loaders_given_optimizer(m) -> list[ast.Call]:
    return [c for c, _q in m.calls if _optimizer_handed(c) is not None]


def _what_loads(call: ast.Call, owner: str) -> str:
    if _optimizer_handed(call) is None:
        return f"`{owner}.load_state_dict()`"
    return f"`{(dotted(call.func) or 'load')}(...)`, handed `{owner}`,"

