"""DDP601: gradient accumulation without no_sync().

## What it does
Finds a DDP training loop that calls `backward()` every iteration but steps the optimizer only every
k-th iteration (`if (step + 1) % accum == 0:`, `if step % accum != 0: continue`, or an inner
`for micro in range(accum):` loop of backwards before the step, or any `for j in range(n):` loop of
backwards that steps nothing itself, before one step), without using `model.no_sync()`.
A `backward()` inside a helper of the same file counts, and so does a loss scaler called with the
loss and the optimizer (`loss_scaler(loss, optimizer, update_grad=...)`, which does the backward and
the step out of sight): then the gradients zeroed only every k-th iteration show the accumulation.
Also finds
`model.require_backward_grad_sync = ...` set after the model's forward in the same micro-step: DDP
reads the flag during the forward, so the toggle applies to the wrong micro-step.

## Why is this bad?
Every `backward()` of a DDP model all-reduces all gradients. With accumulation only the last
backward's all-reduce is needed; the others move the whole model's gradients over the network for
nothing — with k accumulation steps, k-1 of every k all-reduces are wasted.

## Example
```python
for step, batch in enumerate(loader):
    loss = model(batch).mean() / accum
    loss.backward()
    if (step + 1) % accum == 0:
        optimizer.step(); optimizer.zero_grad()
```

## Use instead
```python
for step, batch in enumerate(loader):
    sync = (step + 1) % accum == 0
    with (contextlib.nullcontext() if sync else model.no_sync()):
        (model(batch).mean() / accum).backward()
    if sync:
        optimizer.step(); optimizer.zero_grad()
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dotted

CODE = "DDP601"
TITLE = "Gradient accumulation without no_sync"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"
_ACCUM_WORDS = ("accum", "grad_acc", "micro")
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _is_accum_test(test: ast.AST, strict: bool = False) -> bool:
    """``(step + 1) % accum == 0``; strict: the condition also names the accumulation."""
    text = ast.unparse(test).lower()
    worded = any(w in text for w in _ACCUM_WORDS)
    if strict:
        return worded
    return worded or any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(test))


def _may_be_ddp(m) -> bool:
    """The file wraps a model in DDP, imports the wrapper for a model it is handed, wraps it through
    a helper named for it (``smart_DDP(model)``, ``wrap_ddp``), or hands it to accelerate's
    ``Accelerator.prepare``, which wraps it in DDP in a distributed run."""
    if m.ddp_constructors or any(
        v.rsplit(".", 1)[-1] == "DistributedDataParallel" and v.startswith("torch.")
        for v in m.aliases.values()
    ):
        return True
    for call, _q in m.calls:
        last = (dotted(call.func) or "").rsplit(".", 1)[-1].lower()
        # a wrapper takes the model and returns the wrapped one; `is_ddp()`, `get_ddp_rank()` ask
        if (
            "ddp" in last
            and call.args
            and m.assigned_to(call)
            and not last.startswith(("is_", "get_", "has_"))
        ):
            return True
    return any(v.startswith("accelerate.Accelerator") for v in m.aliases.values()) or (
        m.mentions("Accelerator(") and bool(m.method_calls("prepare"))
    )


def _backward_helpers(m) -> dict[str, int]:
    """The file's own functions and methods whose body calls ``.backward()`` (``def backward(loss,
    scaler):``, ``def backward_step(self, loss): self.accelerator.backward(loss)``), with the line of
    that call."""
    out: dict[str, int] = {}
    for call in m.method_calls("backward"):
        fn = m.enclosing_function(call)
        if fn is not None:
            out.setdefault(fn.name, call.lineno)
    return out


def _last(e: ast.AST) -> str:
    name = dotted(e) if isinstance(e, (ast.Name, ast.Attribute)) else None
    return name.rsplit(".", 1)[-1].lower() if name else ""


def _backward_step_object(c: ast.Call) -> bool:
    """A call that does the backward (and the step) for the caller: a loss scaler called with the
    loss and the optimizer (``loss_scaler(loss, optimizer, ...)``, timm's NativeScaler and its
    copies), or a ``backward_step(loss, optimizer)`` of another module."""
    callee = _last(c.func)
    if not c.args or not any(w in callee for w in ("scaler", "backward")) or "loss" not in _last(c.args[0]):
        return False
    return any("optim" in _last(a) for a in (*c.args[1:], *(k.value for k in c.keywords)))


def _backwards(m, scope: ast.AST, helpers: dict[str, int]) -> list[ast.Call]:
    out = []
    for c in ast.walk(scope):
        if not isinstance(c, ast.Call):
            continue
        name = dotted(c.func) or ""
        if isinstance(c.func, ast.Attribute) and c.func.attr == "backward":
            # DeepSpeed's engine accumulates by itself; accelerate's backward all-reduces each time
            # unless `accelerator.accumulate()` is used (the check returns early when it is)
            if not name.startswith(("torch.autograd", "engine", "deepspeed", "self.engine")):
                out.append(c)
        elif isinstance(c.func, ast.Name) and c.func.id in helpers:
            out.append(c)
        elif _backward_step_object(c):
            out.append(c)
        elif (
            isinstance(c.func, ast.Attribute)
            and isinstance(c.func.value, ast.Name)
            and c.func.value.id == "self"
            and c.func.attr in helpers
        ):
            out.append(c)
    return out


def _optimizer_steps(m) -> list[ast.Call]:
    """``optimizer.step()``, and the calls of the file's own functions and methods that make one
    (``self.optimizer_step()`` whose body is ``self.optimizer.step()``)."""
    out = []
    for call in m.method_calls("step"):
        owner = (dotted(call.func.value) or "").lower()
        if any(w in owner for w in ("sched", "lr", "warmup", "tqdm", "bar", "env")):
            continue
        out.append(call)
    helpers = {fn.name for fn in filter(None, (m.enclosing_function(c) for c in out))}
    helpers -= {"step", "__call__"}  # an optimizer's own step, a wrapper object's call
    for call, _q in m.calls:
        f = call.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name in helpers and (isinstance(f, ast.Name) or dotted(f.value) == "self"):
            out.append(call)
    # where the step itself is out of sight (inside a loss scaler), the gradients being zeroed once
    # per accumulation says the same: they add up over the micro-steps in between
    out += [c for c in m.method_calls("zero_grad") if "optim" in _last(c.func.value)]
    return out


def _inside(m, node: ast.AST, outer: ast.AST) -> bool:
    return any(a is outer for a in m.ancestors(node))


def _accum_range_loop(m, step: ast.Call, helpers):
    """``for micro in range(accum): ...backward()`` in the same block before the step."""
    stmt, block = m.statement_in_block(step)
    while block is not None:
        for earlier in block[: block.index(stmt)]:
            for loop in ast.walk(earlier):
                if isinstance(loop, (ast.For, ast.AsyncFor)) and _splits_batch(m, loop):
                    found = _backwards(m, loop, helpers)
                    if found:
                        return loop, found[-1]
        parent = m.parents.get(stmt)
        if parent is None or isinstance(parent, (*_FUNCS, *_LOOPS)):
            return None
        stmt, block = m.statement_in_block(parent)
    return None


def _splits_batch(m, loop: ast.For) -> bool:
    """A loop of micro-steps: over ``range(accum)`` (named for the accumulation), or over any
    ``range(...)`` (``for j in range(args.batch_split):``) whose body steps no optimizer, so the
    backwards in it all feed the one step after it."""
    if _is_accum_test(loop.iter, strict=True):
        return True
    it = loop.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"):
        return False
    # the backward written in the loop itself: a helper called there may step inside (an epoch loop)
    calls = [c for c in ast.walk(loop) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)]
    return any(c.func.attr == "backward" for c in calls) and not any(c.func.attr == "step" for c in calls)


def _guarded_step(m, step: ast.Call, helpers):
    """The step sits under ``if <accum test>:`` in a loop (or in a per-iteration function such as an
    ignite update), with a backward outside that ``if``."""
    if_node = next((a for a in m.ancestors(step) if isinstance(a, ast.If)), None)
    if if_node is None:
        return None
    loop = m.enclosing_loop(step)
    if loop is not None:
        if not _is_accum_test(if_node.test) or not _inside(m, if_node, loop):
            return None
        scope = loop
    else:
        scope = m.enclosing_function(step)
        if scope is None or not _is_accum_test(if_node.test, strict=True):
            return None
    found = [c for c in _backwards(m, scope, helpers) if not _inside(m, c, if_node)]
    before = [c for c in found if c.lineno <= if_node.lineno]
    if not found:
        return None
    return if_node, (max(before, key=lambda c: c.lineno) if before else found[0])


def _skipped_step(m, step: ast.Call, helpers):
    """``if step % accum != 0: continue`` in the loop before the step, with a backward before it."""
    loop = m.enclosing_loop(step)
    if loop is None:
        return None
    for st in loop.body:
        if st.lineno >= step.lineno:
            break
        if (
            isinstance(st, ast.If)
            and any(isinstance(s, ast.Continue) for s in st.body)
            and _is_accum_test(st.test)
        ):
            found = [c for c in _backwards(m, loop, helpers) if c.lineno < st.lineno]
            if found:
                return st, found[-1]
    return None


def _late_sync_toggle(m):
    """``model.require_backward_grad_sync = ...`` after ``model(...)`` in the same loop iteration."""
    for node in m.nodes(ast.Assign):
        for t in node.targets:
            if not (isinstance(t, ast.Attribute) and t.attr == "require_backward_grad_sync"):
                continue
            model = dotted(t.value)
            loop = m.enclosing_loop(node)
            if model is None or loop is None:
                continue
            forward = next(
                (
                    c
                    for c in ast.walk(loop)
                    if isinstance(c, ast.Call) and dotted(c.func) == model and c.lineno < node.lineno
                ),
                None,
            )
            if forward is not None:
                yield node, forward


def check(m):
    if not _may_be_ddp(m):
        return
    for node, forward in _late_sync_toggle(m):
        yield m.finding(
            CODE,
            node,
            f"`require_backward_grad_sync` is set after the forward on line {forward.lineno}: DDP reads "
            "it during the forward, so each micro-step uses the previous one's setting (the last "
            "micro-step does not sync, the first one does) and the replicas drift apart",
            SEVERITY,
            hint="set the flag before the forward (or use `with model.no_sync():` around the forward)",
        )
    if m.mentions("no_sync", "require_backward_grad_sync", ".accumulate(", "static_graph"):
        return
    if m.one_process:  # init_process_group(world_size=1): no other rank to all-reduce with
        return
    helpers = _backward_helpers(m)
    for step in _optimizer_steps(m):
        for how in (_accum_range_loop, _guarded_step, _skipped_step):
            found = how(m, step, helpers)
            if found is None:
                continue
            cond, backward = found
            via = ""
            helper = backward.func.id if isinstance(backward.func, ast.Name) else None
            if helper is None and isinstance(backward.func, ast.Attribute):
                helper = backward.func.attr
            if helper in helpers:
                inner = helpers[helper]
                via = f" (in `{helper}()`: {m.chain_text((backward.lineno,), inner)})"
            elif helper is not None and not (
                isinstance(backward.func, ast.Attribute) and backward.func.attr == "backward"
            ):
                via = f" (in `{dotted(backward.func)}(...)`)"
            what = "the gradients are zeroed" if _last(step.func) == "zero_grad" else "the optimizer steps"
            yield m.finding(
                CODE,
                backward,
                f"gradients are accumulated ({what} on line {step.lineno} once per "
                f"accumulation, see line {cond.lineno}) but every backward{via} all-reduces: use "
                "`model.no_sync()` on the accumulation steps",
                SEVERITY,
                hint="wrap non-final accumulation steps in `with model.no_sync():`",
            )
            return
