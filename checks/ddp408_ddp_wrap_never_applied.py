"""DDP408: a DistributedDataParallel wrapper that is made or chosen but never applied.

## What it does
Finds a DDP wrapper that the code never gets to use on the path that made it:
- the class put in a name (`Parallel = DistributedDataParallel`) in one arm of an `if`, while every
  call of that name sits in the other arm (a wrapping loop indented one level too deep, under the
  `else:` of the DataParallel choice), reported at that call, the line to move;
- a model wrapped into a local name (`ddp_model = DDP(model, ...)`) that is never read after that
  line, so the training goes on with the unwrapped model;
- a wrapper built and dropped (`DistributedDataParallel(model, ...)` as a statement of its own) in
  code that then trains (a backward after it); a constructor test that trains nothing is left alone;
- a name holding the wrapper given something else before anything reads the wrapper: its own
  module back (`model = DDP(model); model = model.module`) or a value made without it
  (`self.model = torch.compile(model)` of the bare model), in a file that trains or on an attribute
  of the object (`self.model`, which its methods and subclasses train with); reported at that
  assignment (script/unwrapping.py; another wrapper put there, as constructor tests do, is left alone).
It stays quiet when the choice or the wrap sits in a loop (a later round may use it), when the name
is declared `global`/`nonlocal`, when the name is read anywhere after it, or when the wrapper's
module is taken back under a test of its own (`if archi == "vqgan": model = model.module`: a choice
for that case, the other paths keep the wrapper).

## Why is this bad?
Gradients are all-reduced only by the forward and backward of the DDP module. A model that is
never called through it trains on each process alone: every rank steps its own copy, the replicas
drift apart, and the run looks healthy (losses fall on every rank) while it is N separate
trainings.

## Example
```python
if args.distributed:
    Parallel, kwargs = DistributedDataParallel, {"device_ids": [local_rank]}
else:
    Parallel, kwargs = DataParallel, {}
    for key in models:
        models[key] = Parallel(models[key], **kwargs)
```

## Use instead
```python
if args.distributed:
    Parallel, kwargs = DistributedDataParallel, {"device_ids": [local_rank]}
else:
    Parallel, kwargs = DataParallel, {}
for key in models:
    models[key] = Parallel(models[key], **kwargs)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.branches import arms, in_loop
from ddpdoctor.script.names import declares_shared, dotted, is_torch_name, names_evaluation
from ddpdoctor.script.nodes import walk
from ddpdoctor.script.sync_calls import grads_reduced_by_hand
from ddpdoctor.script.unwrapping import replacements

CODE = "DDP408"
TITLE = "DDP wrapper made but never applied"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Module)


def _scope(m, node: ast.AST) -> ast.AST:
    return next((a for a in m.ancestors(node) if isinstance(a, _SCOPES)), m.tree)


def _reads(scope: ast.AST, name: str) -> list[ast.Name]:
    """Reads of ``name`` in ``scope`` and the functions nested in it (closures read it too)."""
    return [n for n in walk(scope) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]


def _class_targets(m, assign: ast.Assign) -> list[str]:
    """The names an assignment gives torch's DistributedDataParallel class (``P = DDP``, also one
    position of ``P, kw = DDP, {...}``)."""
    out = []
    for t in assign.targets:
        pairs = (
            zip(t.elts, assign.value.elts)
            if isinstance(t, ast.Tuple) and isinstance(assign.value, ast.Tuple) and len(t.elts) == len(assign.value.elts)
            else [(t, assign.value)]
        )
        for target, value in pairs:
            if (
                isinstance(target, ast.Name)
                and isinstance(value, (ast.Name, ast.Attribute))
                and is_torch_name(m.qualname(value), "DistributedDataParallel")
            ):
                out.append(target.id)
    return out


def _chosen_never_called(m):
    """(assignment, name, the reads that are all in another arm) for the DDP class put in a name."""
    for assign in m.nodes(ast.Assign):
        for name in _class_targets(m, assign):
            scope = _scope(m, assign)
            if declares_shared(scope, name) or in_loop(m, assign, scope):
                continue
            reads = _reads(scope, name)
            if not reads:
                continue  # an unused name: dead code, nothing to say about a path
            here = arms(m, assign, scope)
            if not here:
                continue  # chosen on every path: a read anywhere after it may be its use
            if all(any(arms(m, r, scope).get(i, arm) != arm for i, arm in here.items()) for r in reads):
                yield assign, name, reads


# what a wrapper is read for without running its forward: unwrapping, saving, moving, modes
_NOT_APPLIED = frozenset(
    (
        "module",
        "state_dict",
        "load_state_dict",
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "train",
        "eval",
        "to",
        "cuda",
        "zero_grad",
        "requires_grad_",
    )
)
_TRAIN_WORDS = ("train", "fit")


def _evaluates_or_prints(func: ast.AST) -> bool:
    callee = (dotted(func) or "").rsplit(".", 1)[-1]
    return callee == "print" or names_evaluation(callee)


def _says(func: ast.AST, words: tuple[str, ...]) -> bool:
    """The called name (its last part) holds one of ``words``."""
    callee = (dotted(func) or "").rsplit(".", 1)[-1].lower()
    return any(w in callee for w in words)


def _only_unwrapped(m, scope: ast.AST, wrap: ast.AST, name: str, after: int) -> ast.AST | None:
    """``name`` is read after line ``after`` only as ``name.module`` (and to save, move, switch
    modes or evaluate), never called or handed to training, while ``name.module`` (or a name given
    it) goes to a call that says it trains (``train_one_epoch(model_without_ddp, ...)``): that call,
    else None. (A backward of a loss from ``name.module`` in this file is DDP409's: it follows the
    loss.)"""
    here = arms(m, wrap, scope)
    reads = [
        r
        for r in _reads(scope, name)
        if r.lineno > after and all(arms(m, r, scope).get(i, arm) == arm for i, arm in here.items())
    ]  # (not those in the other arm of an `if` that holds the wrap: that path has no wrapper)
    if not reads:
        return None
    unwrapped: set[str] = set()
    for r in reads:
        attr = m.parents.get(r)
        if _scope(m, r) is not scope:
            return None
        if isinstance(attr, ast.Call) and r in attr.args and _evaluates_or_prints(attr.func):
            continue  # `evaluate(loader, model)`: a forward without a backward syncs no gradient
        if not isinstance(attr, ast.Attribute) or attr.attr not in _NOT_APPLIED:
            return None
        owner = m.parents.get(attr)
        if isinstance(owner, ast.Call) and owner.func is attr:
            continue  # `model.state_dict()`, `model.train()`
        if attr.attr != "module":
            return None
        if isinstance(owner, ast.Assign) and len(owner.targets) == 1 and isinstance(owner.targets[0], ast.Name):
            unwrapped.add(owner.targets[0].id)
    for node in ast.walk(scope):
        if not isinstance(node, ast.Call) or node.lineno <= after:
            continue
        if _says(node.func, _TRAIN_WORDS) and any(
            (isinstance(a, ast.Name) and a.id in unwrapped)
            or (isinstance(a, ast.Attribute) and a.attr == "module" and dotted(a.value) == name)
            for a in (*node.args, *(k.value for k in node.keywords))
        ):
            return node
    return None


def _bare_trains(m, scope: ast.AST, ddp: ast.Call, name: str, after: int) -> ast.AST | None:
    """``ddp_net = DDP(net)`` and then ``net(x)`` in a loop that runs a backward, while ``ddp_net`` is
    never called nor handed to a call that trains: the bare module trains, the wrapper does not.
    Returns that forward, else None."""
    bare = ddp.args[0] if ddp.args else None
    if not isinstance(bare, ast.Name) or bare.id == name or grads_reduced_by_hand(m):
        return None
    for r in _reads(scope, name):
        parent = m.parents.get(r)
        if isinstance(parent, ast.Call) and (parent.func is r or _says(parent.func, _TRAIN_WORDS)):
            return None  # `ddp_net(x)`, `train(ddp_net, ...)`: the wrapper is applied
        if isinstance(parent, ast.Attribute) and parent.attr == "forward":
            return None
    for node in ast.walk(scope):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == bare.id):
            continue
        if node.lineno <= after:
            continue
        loop = next((a for a in m.ancestors(node) if isinstance(a, (ast.For, ast.AsyncFor, ast.While))), None)
        if loop is not None and _scope(m, loop) is scope and any(
            isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "backward"
            for c in ast.walk(loop)
        ):
            return node
    return None


def _wrapped_never_read(m):
    """(DDP call, name, None) for ``name = DistributedDataParallel(...)`` never read after that line;
    (DDP call, name, the training call or backward) for one read after it only to be unwrapped."""
    for call in m.ddp_constructors:
        assign = m.parents.get(call)
        if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Name)):
            continue
        name = assign.targets[0].id
        scope = _scope(m, assign)
        if declares_shared(scope, name) or in_loop(m, assign, scope):
            continue
        if isinstance(scope, ast.ClassDef):
            continue  # a class attribute: read through the class elsewhere
        if isinstance(scope, ast.Module):
            # a module's name may be read by its functions, or imported by another file
            if any(n.id == name for n in _reads(scope, name)) or m.mentions("__all__", "import *"):
                continue
        elif any(r.lineno > assign.lineno or _scope(m, r) is not scope for r in _reads(scope, name)):
            trains = _only_unwrapped(m, scope, assign, name, assign.end_lineno or assign.lineno) or _bare_trains(
                m, scope, call, name, assign.end_lineno or assign.lineno
            )
            if trains is not None and not m.mentions("locals()", "vars()") and not grads_reduced_by_hand(m):
                yield call, name, trains
            continue
        if m.mentions("locals()", "vars()"):
            continue
        yield call, name, None


def _trains(m) -> bool:
    """The file trains: a backward pass, an optimizer step or a call named for training."""
    return bool(m.method_calls("backward")) or any(
        _says(c.func, ("train", "optimize", "fit")) for c, _q in m.calls
    )


def check(m):
    for assign, name, reads in _chosen_never_called(m):
        # reported at the wrapping itself, the line to move (a loop indented one level too deep)
        first = min(reads, key=lambda r: (r.lineno, r.col_offset))
        yield m.finding(
            CODE,
            first,
            f"`{name}(...)` wraps the models only in this branch, but `{name}` is set to "
            f"DistributedDataParallel on line {assign.lineno}, in another one: on that path no model is "
            "ever wrapped, so each process trains its own copy and no gradient is all-reduced",
            SEVERITY,
            hint=f"apply `{name}(...)` on both paths (a wrapping loop indented under one branch is the "
            "usual cause: move it out)",
            chain=[assign.lineno, *sorted({r.lineno for r in reads})],
        )
    trains = _trains(m)
    for call in m.ddp_constructors:
        parent = m.parents.get(call)
        fn = m.enclosing_function(call)
        end = fn.end_lineno if fn is not None else len(m.lines)
        if isinstance(parent, ast.Expr) and any(call.lineno < b.lineno <= end for b in m.method_calls("backward")):
            # `DistributedDataParallel(model, ...)` alone, in a function that then trains (a backward
            # after it, there or in a function defined in it): a constructor test trains nothing
            kept = "the call's result is not kept"
        elif trains and isinstance(parent, ast.Attribute) and parent.attr == "module":
            # `self.model = DistributedDataParallel(self.model, ...).module`: the wrapper and the
            # reducer its gradient hooks feed are dropped on the spot
            kept = "only its `.module` is kept"
        else:
            continue
        model = ast.unparse(call.args[0]) if call.args else "the model"
        yield m.finding(
            CODE,
            call,
            f"the DDP wrapper made here is thrown away ({kept}): training goes on with `{model}` "
            "itself, so no gradient is all-reduced and each process trains its own copy",
            SEVERITY,
            hint=f"keep it: `{model} = DistributedDataParallel({model}, ...)`, train with it, and use "
            "`.module` only to save or evaluate",
        )
    replaced = set()
    trains = _trains(m)
    for st, call in replacements(m):
        if not trains and not isinstance(st.targets[0], ast.Attribute):
            continue  # a local name in a file that trains nothing: a constructor test
        # (`self.model = self.model.module` gives up the object's wrapper for every method that
        # trains with it, in this file or a subclass's)
        replaced.add(id(call))
        key = dotted(st.targets[0])
        yield m.finding(
            CODE,
            st,
            f"`{key}` holds the DDP wrapper from line {call.lineno}, but this line replaces it with "
            f"`{ast.unparse(st.value)}` before anything uses it: training goes on with the bare "
            "model, so no gradient is all-reduced and each process trains its own copy",
            SEVERITY,
            hint=f"keep the wrapper in `{key}` and train with it (compile the wrapped model, or keep the "
            "unwrapped one under another name for saving)",
            chain=[call.lineno, st.lineno],
        )
    for call, name, trains in _wrapped_never_read(m):
        if id(call) in replaced:
            continue
        if trains is not None:
            yield m.finding(
                CODE,
                trains,
                f"`{name}` is wrapped in DDP on line {call.lineno}, but the training here runs "
                + (
                    f"the bare `{trains.func.id}` it wraps"
                    if isinstance(trains, ast.Call) and isinstance(trains.func, ast.Name) and call.args
                    and isinstance(call.args[0], ast.Name) and trains.func.id == call.args[0].id
                    else f"its unwrapped `{name}.module`"
                )
                + ": DDP's forward never arms its gradient all-reduce, so each process trains its own copy",
                SEVERITY,
                hint=f"train with `{name}` itself (its forward and backward); keep `{name}.module` for "
                "saving and the optimizer",
                chain=m.chain_text([call.lineno], trains.lineno),
            )
            continue
        yield m.finding(
            CODE,
            call,
            f"the DDP model put in `{name}` is never used after this line: training goes on with the "
            "unwrapped model, so no gradient is all-reduced and each process trains its own copy",
            SEVERITY,
            hint=f"train with `{name}` (its forward and backward), or assign the wrapper back to the "
            "name the loop uses",
        )
