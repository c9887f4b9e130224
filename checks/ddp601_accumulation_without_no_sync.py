"""DDP601: gradient accumulation without no_sync().

## What it does
Finds a DDP training loop that calls `backward()` every iteration but steps the optimizer only every
k-th iteration (`if (step + 1) % accum == 0:`, `if step % accum != 0: continue`, or an inner
`for micro in range(accum):` loop of backwards before the step, or any `for j in range(n):` loop of
backwards that steps nothing itself, before one step), without using `model.no_sync()`.
A `backward()` inside a helper of the same file counts, and so does a loss scaler called with the
loss and the optimizer (`loss_scaler(loss, optimizer, update_grad=...)`, which does the backward and
the step out of sight): then the gradients zeroed only every k-th iteration show the accumulation.
So does a step helper that backwards on every call and steps under a flag its caller sets with an
accumulation test (`optimizer_step(loss, opt, is_update=step % accum == 0)`). A static graph
(`static_graph=True`) still all-reduces on every backward.
Also finds
`model.require_backward_grad_sync = ...` set after the model's forward in the same micro-step, and
`with model.no_sync():` (also chosen by `model.no_sync() if not last else nullcontext()`) around
the backward only, when the loss was made before the window (earlier in the function, or by the
caller that passed it in, outside any no_sync window): DDP reads the flag during the forward, so
the toggle applies to the wrong micro-step, and a window opened after the forward changes nothing.
`model` is one the file wraps in DDP (or a helper named for it, or one named for a distributed run
that hands the model back under its name: `reader, opt = setup_for_distributed_mode(reader, opt)`) or tests with
`isinstance(model, DistributedDataParallel)`, or the model a function of a data-parallel job is
handed by its caller (`def train_one_epoch(model, ...)` in a file that all-reduces); a model the
file builds and trains without wrapping it is not. FSDP's no_sync is read by the backward and stays out.
A step and a `zero_grad()` under modulo tests of the same period in one per-iteration method
(`if idx % period == 0: zero_grad()` ... `if idx % period == period - 1: step()`) is accumulation
too, whatever the period is called.

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

from ddpdoctor.script.models import handed_a_model
from ddpdoctor.script.names import dotted, turns_grad_off
from ddpdoctor.script.ranks import own_call_sites
from ddpdoctor.script.steps import backward_step_object, last_name, reduces_across_ranks
from ddpdoctor.script.values import bound_argument

CODE = "DDP601"
TITLE = "Gradient accumulation without no_sync"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"
_ACCUM_WORDS = ("accum", "grad_acc", "gradient_acc", "accmul", "micro")  # (and common misspellings)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _is_accum_test(test: ast.AST, strict: bool = False) -> bool:
    """``(step + 1) % accum == 0``; strict: the condition also names the accumulation."""
    text = ast.unparse(test).lower()
    worded = any(w in text for w in _ACCUM_WORDS)
    if strict:
        return worded
    return worded or any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(test))


def _counter_reset(m, test: ast.AST) -> bool:
    """``if num_iter == config.step_per_update: ...; num_iter = 0``: a counter of micro-steps, set
    back to zero when it reaches the period (the modulo written by hand)."""
    node = m.parents.get(test)
    if not (isinstance(node, ast.If) and node.test is test and isinstance(test, ast.Compare)):
        return False
    if len(test.ops) != 1 or not isinstance(test.ops[0], (ast.Eq, ast.GtE)):
        return False
    counter = dotted(test.left)
    if counter is None or isinstance(test.comparators[0], ast.Constant):
        return False
    return any(
        isinstance(a, ast.Assign)
        and isinstance(a.value, ast.Constant)
        and a.value.value == 0
        and any(dotted(t) == counter for t in a.targets)
        for st in node.body
        for a in ast.walk(st)
    )


def _accum_test(m, test: ast.AST, strict: bool = False, depth: int = 0) -> bool:
    """``_is_accum_test``, following the names in the test to what they were given earlier in the
    same function: ``should_step = (i + 1) % accum == 0; stepped = should_step or last;
    if stepped:`` is the same test written in three lines."""
    if _is_accum_test(test, strict) or (not strict and _counter_reset(m, test)):
        return True
    if depth >= 3:
        return False
    fn = m.enclosing_function(test)
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    for a in m.nodes(ast.Assign, ast.AnnAssign):
        targets = a.targets if isinstance(a, ast.Assign) else [a.target]
        if (
            a.value is not None
            and a.lineno < test.lineno
            and any(isinstance(t, ast.Name) and t.id in names for t in targets)
            and m.enclosing_function(a) is fn
            and _accum_test(m, a.value, strict, depth + 1)
        ):
            return True
    return False


def _may_be_ddp(m) -> bool:
    """The file wraps a model in DDP, imports the wrapper for a model it is handed, wraps it through
    a helper named for it (``smart_DDP(model)``, ``wrap_ddp``), or hands it to accelerate's
    ``Accelerator.prepare``, which wraps it in DDP in a distributed run."""
    if m.ddp_constructors or m.ddp_wrapper_calls or m.ddp_params or any(
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
        ) or _rewraps_for_distributed(m, call, last):
            return True
    return any(v.startswith("accelerate.Accelerator") for v in m.aliases.values()) or (
        m.mentions("Accelerator(") and bool(m.method_calls("prepare"))
    )


def _rewraps_for_distributed(m, call: ast.Call, last: str) -> bool:
    """``reader, optimizer = setup_for_distributed_mode(reader, optimizer, ...)``: a helper named
    for a distributed run hands back, under the same name, an object it was given (the model it
    wrapped)."""
    if "distributed" not in last or not call.args:
        return False
    assign = m.parents.get(call)
    if not isinstance(assign, ast.Assign) or len(assign.targets) != 1:
        return False
    target = assign.targets[0]
    targets = {dotted(t) for t in (target.elts if isinstance(target, ast.Tuple) else [target])}
    return any(isinstance(a, ast.Name) and a.id in targets for a in call.args)


def _syncs_itself(m) -> bool:
    """The code (not a comment: "accumulation w/ fsdp requires a no_sync context") uses `no_sync`,
    sets `require_backward_grad_sync` or accumulates through a library (`accelerator.accumulate(model)`)."""
    if not m.mentions("no_sync", "require_backward_grad_sync", ".accumulate("):
        return False  # (most files: no node to look at)
    names = ("no_sync", "require_backward_grad_sync", "accumulate")
    return any(n.attr in names and not _evaluation_window(m, n) for n in m.nodes(ast.Attribute)) or any(
        n.id in names for n in m.nodes(ast.Name)
    )


def _evaluation_window(m, node: ast.AST) -> bool:
    """``with torch.no_grad(), model.no_sync():`` (an evaluation pass through the DDP model): no
    backward runs there, so it says nothing of how the training steps accumulate."""
    for a in m.ancestors(node):
        if isinstance(a, (ast.With, ast.AsyncWith)):
            return any(turns_grad_off(i.context_expr) for i in a.items)
        if isinstance(a, ast.stmt):
            break
    return False


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
        elif backward_step_object(c):
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
        if (
            call.args
            and not owner.rsplit(".", 1)[-1].startswith("opt")
            and "scaler" not in owner
            and not any(last_name(a).startswith("opt") or "optim" in last_name(a) for a in call.args)
        ):
            continue  # `ap_calculator.step(preds, gts)`: a step of something given data, not an optimizer
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
    out += [c for c in m.method_calls("zero_grad") if "optim" in last_name(c.func.value)]
    return out


def _inside(m, node: ast.AST, outer: ast.AST) -> bool:
    return any(a is outer for a in m.ancestors(node))


def _accum_range_loop(m, step: ast.Call, helpers):
    """``for micro in range(accum): ...backward()`` in the same block before the step."""
    stmt, block = m.statement_in_block(step)
    while block is not None:
        for earlier in block[: block.index(stmt)]:
            for loop in _run_here(earlier):
                if isinstance(loop, (ast.For, ast.AsyncFor)) and _splits_batch(m, loop):
                    found = _backwards(m, loop, helpers)
                    if found:  # the last in the text: the plain one after an  arm
                        return loop, max(found, key=lambda c: c.lineno)
        parent = m.parents.get(stmt)
        if parent is None or isinstance(parent, (*_FUNCS, *_LOOPS)):
            return None
        stmt, block = m.statement_in_block(parent)
    return None


def _run_here(stmt: ast.stmt):
    """The nodes of ``stmt`` that run where it stands: not the bodies of the functions and classes
    it defines (a `def capture(...)` above the `__main__` block runs only when called)."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, (*_FUNCS, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


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
    loop = m.enclosing_loop(step)
    scope = loop if loop is not None else m.enclosing_function(step)
    if scope is None:
        return None
    # the accumulation test may hold the step a few ifs further out (`if (i + 1) % accum == 0:` then
    # `if scaler is not None: scaler.step(opt) else: opt.step()`)
    if_node = None
    for a in m.ancestors(step):
        if a is scope:
            break
        if isinstance(a, ast.If) and (
            _accum_test(m, a.test)
            if loop is not None
            else _accum_test(m, a.test, strict=True) or _zeroed_per_period(m, scope, a)
        ):
            if_node = a
            break
    if if_node is None:
        return None
    if _own_step(m, if_node, step, helpers):
        return None
    found = [c for c in _backwards(m, scope, helpers) if not _inside(m, c, if_node)]
    before = [c for c in found if c.lineno <= if_node.lineno]
    if not found:
        return None
    # the backward every micro-step runs, rather than an optional second one (an adversarial pass)
    plain = [c for c in before if not any(isinstance(a, ast.If) for a in m.ancestors_below(c, scope))]
    return if_node, max(plain or before, key=lambda c: c.lineno) if before else found[0]


def _own_step(m, if_node: ast.If, step: ast.Call, helpers) -> bool:
    """The ``if`` makes a whole step of its own (``zero_grad()``, a backward, ``step()``: a lazy
    regulariser every k iterations), or the same optimizer also steps on every iteration outside
    it: what the backwards before it made is not being accumulated for this step."""
    calls = [c for c in ast.walk(if_node) if isinstance(c, ast.Call)]
    zeroed = [c.lineno for c in calls if isinstance(c.func, ast.Attribute) and c.func.attr == "zero_grad"]
    own = _backwards(m, if_node, helpers)
    if zeroed and any(b.lineno > min(zeroed) for b in own):
        return True
    owner = dotted(step.func.value) if isinstance(step.func, ast.Attribute) else None
    loop = m.enclosing_loop(step)
    if owner is None or loop is None:
        return False
    return any(
        c is not step
        and dotted(c.func.value) == owner
        and not _inside(m, c, if_node)
        and m.enclosing_loop(c) is loop
        and not _other_arm(m, c, if_node)
        for c in m.method_calls("step")
    )


def _other_arm(m, node: ast.AST, other: ast.AST) -> bool:
    """``node`` and ``other`` sit in the two arms of one ``if`` (``if accum > 1: ... else:
    optimizer.step()``): one iteration runs only one of them."""
    arm_of = {}
    child = other
    for a in m.ancestors(other):
        if isinstance(a, ast.If):
            arm_of[id(a)] = any(child is st for st in a.body)
        child = a
    child = node
    for a in m.ancestors(node):
        if isinstance(a, ast.If) and id(a) in arm_of:
            return arm_of[id(a)] != any(child is st for st in a.body)
        child = a
    return False


def _moduli(test: ast.AST) -> set[str]:
    """The right operands of the ``%`` in a test: ``optimizer_period`` in ``i % self.optimizer_period == 0``."""
    return {
        ast.unparse(n.right) for n in ast.walk(test) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)
    }


def _zeroed_per_period(m, fn: ast.AST, step_if: ast.If) -> bool:
    """A per-iteration function (no loop of its own) that both steps and zeroes the gradients under
    a modulo test of the same period (``if idx % period == 0: zero_grad()`` ...
    ``if idx % period == period - 1: step()``): the gradients of the calls in between add up, which
    is gradient accumulation however the period is named."""
    period = _moduli(step_if.test)
    if not period:
        return False
    for call in m.method_calls("zero_grad"):
        if m.enclosing_function(call) is not fn:
            continue
        guard = next((a for a in m.ancestors(call) if isinstance(a, ast.If)), None)
        if guard is not None and guard is not step_if and _inside(m, guard, fn) and period & _moduli(guard.test):
            return True
    return False


def _else_arm_backward(m, step: ast.Call, helpers):
    """``if n_iter % accum == 0: backward(); step() else: backward()``: the ``else`` arm is the
    accumulation step, and its backward all-reduces like the stepping one."""
    child: ast.AST = step
    for a in m.ancestors(step):
        if isinstance(a, _FUNCS):
            return None
        if isinstance(a, ast.If) and child in a.body and _is_accum_test(a.test, strict=True):
            found = [c for st in a.orelse for c in _backwards(m, st, helpers)]
            return (a, found[0]) if found else None
        child = a
    return None


def _step_on_callers_flag(m, step: ast.Call, helpers):
    """``def optimizer_step(loss, opt, ..., is_update=True): loss.backward(); if is_update:
    opt.step()`` called as ``optimizer_step(loss, opt, ..., is_update=step % accum == 0)`` (or a
    name given that test before the call): the helper backwards on every call and steps only on the
    calls the caller's accumulation test lets through."""
    fn = m.enclosing_function(step)
    if fn is None or isinstance(fn, ast.Lambda):
        return None
    params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    if_node = next(
        (
            a
            for a in m.ancestors_below(step, fn)
            if isinstance(a, ast.If) and isinstance(a.test, ast.Name) and a.test.id in params
        ),
        None,
    )
    if if_node is None:
        return None
    backwards = [c for c in _backwards(m, fn, helpers) if c.lineno < if_node.lineno and not _inside(m, c, if_node)]
    if not backwards:
        return None
    for site in own_call_sites(m, fn):
        known, given = bound_argument(fn, site, if_node.test.id)
        if known and given is not None and not isinstance(given, ast.Constant) and _accum_test(m, given):
            return if_node, max(backwards, key=lambda c: c.lineno)
    return None


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
            and _accum_test(m, st.test)
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


def _no_sync_owners(m, expr: ast.AST, depth: int = 0) -> list[ast.AST]:
    """The objects whose ``no_sync()`` a ``with`` item enters: ``model.no_sync()``, either arm of
    ``model.no_sync() if c else nullcontext()``, and a name given one of those in its function."""
    if depth > 3:
        return []
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "no_sync":
        return [expr.func.value]
    if isinstance(expr, ast.IfExp):
        return [*_no_sync_owners(m, expr.body, depth + 1), *_no_sync_owners(m, expr.orelse, depth + 1)]
    if isinstance(expr, ast.Name):
        fn = m.enclosing_function(expr)
        values = [
            a.value
            for a in m.nodes(ast.Assign)
            if m.enclosing_function(a) is fn
            and a.lineno < expr.lineno
            and any(isinstance(t, ast.Name) and t.id == expr.id for t in a.targets)
        ]
        return _no_sync_owners(m, values[0], depth + 1) if len(values) == 1 else []
    return []


def _ddp_holders(m) -> set[str]:
    """Names and attributes given a DDP model (``DistributedDataParallel(...)``, a helper named for
    it), or tested for one (``isinstance(self.ddp, DistributedDataParallel)``): no_sync there is
    DDP's, whose switch the forward reads. FSDP's no_sync is read by the backward, so a
    backward-only window is right for it and it stays out."""
    out = set(m.ddp_model_names)
    # `self.model = self._prepare_model(model)` where that method `return DDP(...)`
    makers = {
        fn.name
        for c in m.ddp_constructors
        if isinstance(m.parents.get(c), ast.Return) and (fn := m.enclosing_function(c)) is not None
    }
    for call, _q in m.calls if makers else ():
        if (dotted(call.func) or "").rsplit(".", 1)[-1] in makers and (n := m.assigned_to(call)):
            out.add(n)
    for call, _q in m.calls:
        if (
            isinstance(call.func, ast.Name)
            and call.func.id == "isinstance"
            and len(call.args) == 2
            and any(
                (m.qualname(t) or "").endswith(".DistributedDataParallel")
                for t in ast.walk(call.args[1])
                if isinstance(t, (ast.Name, ast.Attribute))
            )
            and (name := dotted(call.args[0]))
        ):
            out.add(name)
    return out


def _stored(nodes) -> set[str]:
    out = set()
    for st in nodes:
        for n in ast.walk(st):
            if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Store) and (d := dotted(n)):
                out.add(d)
    return out


def _in_no_sync(m, node: ast.AST) -> bool:
    """Inside some ``with`` that mentions no_sync in its function."""
    for a in m.ancestors(node):
        if isinstance(a, _FUNCS):
            return False
        if isinstance(a, (ast.With, ast.AsyncWith)) and any(
            _no_sync_owners(m, item.context_expr) for item in a.items
        ):
            return True
    return False


def _made_in_no_sync(m, last: ast.AST, assigns: list) -> bool:
    """The value ``last`` assigns was made inside a no_sync window, there or further back: the loss
    is scaled after a forward run in the window (`with ddp.no_sync(): out = ddp(x)`, then `loss =
    out[0]`, `loss = loss / k`); each name read is followed to its latest assignment before."""
    todo, seen = [last], set()
    while todo and len(seen) < 16:
        a = todo.pop()
        if id(a) in seen:
            continue
        seen.add(id(a))
        if _in_no_sync(m, a):
            return True
        value = a.value
        if value is None:
            continue
        for n in ast.walk(value):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                earlier = [b for b in assigns if b.lineno < a.lineno and n.id in _stored([b])]
                if earlier:
                    todo.append(max(earlier, key=lambda b: b.lineno))
    return False


def _loss_before(m, w: ast.AST, backward: ast.Call) -> int | None:
    """The line where the loss that ``backward`` runs on got its value before the ``with`` ``w``
    (an assignment earlier in the function, or the call that passed it in as a parameter); None
    when it may have been made inside ``w`` or inside another no_sync window."""
    inner_as = {}
    for n in ast.walk(w):
        if isinstance(n, ast.withitem) and isinstance(n.optional_vars, ast.Name):
            inner_as[n.optional_vars.id] = n.context_expr  # ``with amp.scale_loss(loss, opt) as scaled``
    names = set()
    for n in ast.walk(backward.func.value):
        if isinstance(n, ast.Name) and n.id in inner_as:
            names |= {d for a in ast.walk(inner_as[n.id]) if isinstance(a, ast.Name) and (d := a.id) != "self"}
        elif isinstance(n, ast.Name) and n.id != "self":
            names.add(n.id)
    names -= set(inner_as)
    holders = _ddp_holders(m)
    if any(isinstance(c, ast.Call) and dotted(c.func) in holders for c in ast.walk(backward.func.value)):
        return None  # `(model(batch).mean() / k).backward()`: the forward runs inside the window
    if not names or names & _stored(w.body):
        return None
    fn = m.enclosing_function(w)  # None: the script's own top level, a scope like any other
    params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)} if fn else set()
    assigns = [a for a in m.nodes(ast.Assign, ast.AnnAssign) if m.enclosing_function(a) is fn]
    lines = []
    for name in names:
        made = [a for a in assigns if a.lineno < w.lineno and name in _stored([a])]
        if made:
            last = max(made, key=lambda a: a.lineno)
            if _made_in_no_sync(m, last, assigns):
                return None
            lines.append(last.lineno)
        elif name in params:
            sites = [c for c in own_call_sites(m, fn) if m.enclosing_function(c) is not fn]
            if not sites or any(_in_no_sync(m, c) for c in sites):
                return None  # the caller may run the forward inside its own no_sync window
            lines.append(sites[0].lineno)
    return max(lines) if lines else None


def _late_no_sync(m):
    """``with model.no_sync():`` around the backward only, with the loss computed before it: DDP
    arms the all-reduce during the forward, so this backward all-reduces all the same."""
    holders = _ddp_holders(m)
    # a model handed in (`def train(model, ...)`) whose no_sync is DDP's: the file knows DDP, not FSDP
    handed_ddp = _imports_ddp_only(m)
    if not holders and not handed_ddp:
        return
    for w in m.nodes(ast.With, ast.AsyncWith):
        owners = [o for item in w.items for o in _no_sync_owners(m, item.context_expr)]
        if not any(dotted(o) in holders or (handed_ddp and _a_parameter(m, o)) for o in owners):
            continue
        if _in_no_sync(m, w):
            continue
        backwards = [
            c
            for st in w.body
            for c in ast.walk(st)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "backward"
        ]
        if not backwards:
            continue
        lines = [_loss_before(m, w, b) for b in backwards]
        if all(ln is not None for ln in lines):
            yield w, max(lines), dotted(owners[0])


def _imports_ddp_only(m) -> bool:
    """The file imports DistributedDataParallel and nothing of FSDP (whose no_sync is read by the
    backward, so a backward-only window is right for it)."""
    names = set(m.aliases.values())
    return any(n.endswith(".DistributedDataParallel") for n in names) and not any(
        "fsdp" in n.lower() or n.endswith("FullyShardedDataParallel") for n in names
    )


def _a_parameter(m, owner: ast.AST) -> bool:
    """``owner`` is a parameter of the function it is used in (the caller's model)."""
    fn = m.enclosing_function(owner)
    if fn is None or not isinstance(owner, ast.Name):
        return False
    return owner.id in {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}


def _ddp_names(m) -> set[str]:
    """Names the file binds to a DDP-wrapped model (``ddp = DistributedDataParallel(net)``)."""
    out: set[str] = set()
    for call in m.ddp_constructors:
        name = m.assigned_to(call)
        if name:
            out.add(name)
    return out


def _in_model_context(m, node: ast.AST, models: set[str]) -> bool:
    """The backward runs inside ``with helper(model, ...):`` where ``helper`` is not this file's
    own function: a context manager handed the DDP model may well be its ``no_sync()`` switch
    (``misc.ddp_sync(ddp, last_round)``), and from this file alone that is unknown."""
    own = {f.name for f in m.nodes(ast.FunctionDef, ast.AsyncFunctionDef)}
    cur = m.parents.get(node)
    while cur is not None and not isinstance(cur, _FUNCS):
        if isinstance(cur, (ast.With, ast.AsyncWith)):
            for item in cur.items:
                call = item.context_expr
                if not isinstance(call, ast.Call) or last_name(call.func) in own:
                    continue
                args = [*call.args, *(k.value for k in call.keywords)]
                if any(dotted(a) in models for a in args if isinstance(a, (ast.Name, ast.Attribute))):
                    return True
        cur = m.parents.get(cur)
    return False


def check(m):
    wrapped = _may_be_ddp(m)
    if not wrapped and not reduces_across_ranks(m):
        return
    for node, forward in _late_sync_toggle(m) if wrapped else ():
        yield m.finding(
            CODE,
            node,
            f"`require_backward_grad_sync` is set after the forward on line {forward.lineno}: DDP reads "
            "it during the forward, so each micro-step uses the previous one's setting (the last "
            "micro-step does not sync, the first one does) and the replicas drift apart",
            SEVERITY,
            hint="set the flag before the forward (or use `with model.no_sync():` around the forward)",
        )
    for node, loss_line, owner in _late_no_sync(m) if wrapped else ():
        yield m.finding(
            CODE,
            node,
            f"`{owner}.no_sync()` wraps only the backward: its loss was made before the window "
            f"(line {loss_line}), and DDP decides during the forward whether the next backward "
            "all-reduces, so every accumulation step here still all-reduces the gradients",
            SEVERITY,
            hint="run the forward and the backward of each accumulation step inside the "
            "`no_sync()` window",
            chain=[loss_line, node.lineno],
        )
    if _syncs_itself(m):
        return
    if m.one_process:  # init_process_group(world_size=1): no other rank to all-reduce with
        return
    helpers = _backward_helpers(m)
    models = _ddp_names(m)
    reported: set[int] = set()  # one finding per training loop's function (XE and RL phases are two)
    for step in _optimizer_steps(m):
        if id(m.enclosing_function(step)) in reported:
            continue
        for how in (_accum_range_loop, _guarded_step, _skipped_step, _else_arm_backward, _step_on_callers_flag):
            found = how(m, step, helpers)
            if found is None:
                continue
            cond, backward = found
            if _in_model_context(m, backward, models):
                continue
            if not wrapped and not handed_a_model(m, backward):
                continue  # a rank of a job whose model this file builds and does not wrap
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
            what = "the gradients are zeroed" if last_name(step.func) == "zero_grad" else "the optimizer steps"
            yield m.finding(
                CODE,
                backward,
                f"gradients are accumulated ({what} on line {step.lineno} once per "
                f"accumulation, see line {cond.lineno}) but every backward{via} all-reduces: use "
                "`model.no_sync()` on the accumulation steps",
                SEVERITY,
                hint="wrap non-final accumulation steps in `with model.no_sync():`",
            )
            reported.add(id(m.enclosing_function(step)))
            break
