"""DDP409: the training step calls the DDP model's `.module`, so gradients are never all-reduced.

## What it does
Finds a `loss.backward()` whose loss comes from a call through the wrapped model's `.module`
(`model.module.encode(...)`, `self.model.module.loss_function(batch)`, `model.module(x)`, also a
method of the inner model put on the wrapper, `model.log_prob = model.module.log_prob`) of a
`DistributedDataParallel` model, in the function of the backward or in this file's functions it
calls, when that step never calls the DDP model itself (`model(x)`). The loss is followed through
names, dict entries, arithmetic, calls and the file's own return values. It stays quiet when the
step also calls the DDP model, under `torch.no_grad()`/`inference_mode` (evaluation, generation),
and in a file that all-reduces gradients by hand (`dist.all_reduce(p.grad)`).

## Why is this bad?
DistributedDataParallel all-reduces gradients from hooks that its own `forward` arms: it marks the
parameters the step will produce gradients for and starts the bucketed all-reduce as the backward
fills them. A forward through `.module` never runs the wrapper, so the backward computes local
gradients only: every rank steps its optimizer with its own gradients and the replicas drift
apart, silently — training looks normal, but each rank trains its own model on its own shard.

## Example
```python
model = DDP(Seq2Seq().to(device), device_ids=[local_rank])
for batch in loader:
    memory = model.module.encode(batch.src)
    out = model.module.decode(memory, batch.tgt)
    loss_fn(out, batch.label).backward()
```

## Use instead
```python
class Seq2Seq(nn.Module):
    def forward(self, src, tgt):            # one forward that runs every part the loss needs
        return self.decode(self.encode(src), tgt)

for batch in loader:
    loss_fn(model(batch.src, batch.tgt), batch.label).backward()   # through the DDP wrapper
```
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddpdoctor.script.flow import Flow
from ddpdoctor.script.names import dotted
from ddpdoctor.script.sync_calls import grads_reduced_by_hand
from ddpdoctor.script.unwrapping import replacements

CODE = "DDP409"
TITLE = "Training step bypasses the DDP wrapper through .module"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

_DEPTH = 4  # calls followed from the function of the backward


def check(m):
    ddp = m.ddp_constructors
    if not ddp:
        return
    models = Flow(m, ddp)
    getters = _unwrap_getters(m, models)
    by_name: dict[str, list] = {}
    for fn in m.functions:
        by_name.setdefault(fn.name, []).append(fn)
    unwrapped = _unwrapped_names(m, models)
    handed = _handed_module(m, models, by_name)
    for fn_id, name in handed:
        unwrapped.setdefault(fn_id, set()).add(name)
    methods = _method_aliases(m, models)
    bypasses = [
        c
        for c, _q in m.calls
        if (_through_module(c, models, getters) or _through_alias(m, c, unwrapped) or _aliased_method(c, methods))
        and not m.without_grad(c)
    ]
    if not bypasses or grads_reduced_by_hand(m):
        return
    # (`model_unwrapped = model.module if ... else model` holds the model for Flow too: its call is
    # a bypass, not the wrapper's forward)
    bypass_ids = {id(c) for c in bypasses}
    reported: set[int] = set()
    for bw in m.method_calls("backward"):
        step = m.enclosing_function(bw)
        if step is None:
            continue  # module level: a script body, left to the per-rank rules
        reach = _reachable(m, step, by_name)
        if any(
            _ddp_forward(c, models) and id(c) not in bypass_ids and not m.without_grad(c)
            for fn in reach
            for c in _calls(fn)
        ):
            continue  # the step runs the wrapper's forward with gradients on: the reducer is armed
        mine = [c for c in bypasses if m.enclosing_function(c) in reach]
        if not mine:
            continue
        feeding = [c for c in mine if _Taint(m, reach, [c]).reaches(bw)]
        if not feeding:
            continue
        # the step's own call first: one in a helper may feed the loss only through the data
        first = min(feeding, key=lambda c: (m.enclosing_function(c) is not step, c.lineno, c.col_offset))
        if id(first) in reported:
            continue
        reported.add(id(first))
        # through a name given the inner model (`net = ddp_net.module`): that line is the one to change
        alias = _alias_binding(m, first, unwrapped)
        method = _aliased_method(first, methods)
        fn_first = m.enclosing_function(first)
        given = handed.get((id(fn_first), _called_name(first) or "")) if fn_first is not None else None
        if given is not None and method is None:
            alias = given
            what = (
                f"`{ast.unparse(given)}` is handed to `{fn_first.name}` here, whose "
                f"`{ast.unparse(first.func)}(...)` on line {first.lineno} runs the model inside the DDP wrapper, "
                f"and the backward on line {bw.lineno} starts from its output"
            )
        elif method is not None:
            alias = method
            what = (
                f"`{ast.unparse(method.targets[0])}` is set to the method of the model inside the DDP wrapper "
                f"here, `{ast.unparse(first.func)}(...)` runs it on line {first.lineno}, and the backward on "
                f"line {bw.lineno} starts from its output"
            )
        elif alias is not None:
            what = (
                f"`{_called_name(first)}` is given the model inside the DDP wrapper here, "
                f"`{ast.unparse(first.func)}(...)` runs it on line {first.lineno}, and the backward on line "
                f"{bw.lineno} starts from its output"
            )
        else:
            what = (
                f"`{ast.unparse(first.func)}` calls the model inside the DDP wrapper{_via_getter(first, getters)}, "
                f"and the backward on line {bw.lineno} starts from its output"
            )
        yield m.finding(
            CODE,
            alias if alias is not None else first,
            f"{what} with no call of the DDP model in that step: DistributedDataParallel never sees the "
            "forward, so the gradients are not all-reduced and every rank trains its own copy of the model",
            SEVERITY,
            hint="call the DDP model itself (`model(...)`) in the training step: give the inner model a "
            "`forward` that runs what the loss needs, and keep `.module` for saving and evaluation",
            chain=(f"{alias.lineno} -> " if alias is not None else "") + f"{first.lineno} -> {bw.lineno}",
        )


def _unwrap_getters(m, models: Flow) -> set[str]:
    """The file's functions that hand out the model inside the wrapper (``def _get_model(self):
    return self.model.module``, often beside ``return self.model`` when it is not wrapped)."""
    return {
        fn.name
        for r in m.nodes(ast.Return)
        if isinstance(r.value, ast.Attribute)
        and r.value.attr == "module"
        and (fn := m.enclosing_function(r)) is not None
        and models.held(r.value.value)
    }


def _unwrapped_names(m, models: Flow) -> dict[int, set[str]]:
    """id of a function -> its local names given the model inside the wrapper (``sam_model =
    self.model.module``, often on the multi-GPU arm beside ``sam_model = self.model``)."""
    out: dict[int, set[str]] = {}
    given_up = {id(st) for st, _call in replacements(m)}
    for a in m.nodes(ast.Assign):
        if id(a) in given_up:
            continue  # `model = model.module` before the wrapper is used at all: DDP408 reports it
        v = a.value
        if isinstance(v, ast.IfExp):
            # `model.module if isinstance(model, DistributedDataParallel) else model`: under DDP,
            # the model inside the wrapper
            v = v.body
        if isinstance(v, ast.Attribute) and v.attr == "module" and models.held(v.value):
            fn = m.enclosing_function(a)
            for t in a.targets:
                if isinstance(t, ast.Name) and fn is not None:
                    out.setdefault(id(fn), set()).add(t.id)
    return out


def _handed_module(m, models: Flow, by_name: dict[str, list]) -> dict[tuple[int, str], ast.AST]:
    """(id of a function of this file, its parameter) -> the first argument that hands it the model
    inside the wrapper (``model_inference(model.module, images, texts)``): in that function the
    parameter is an unwrapped name, as ``net = model.module`` would make it."""
    out: dict[tuple[int, str], ast.AST] = {}
    for call, _q in m.calls:
        handed = [
            (i, a) for i, a in enumerate(call.args)
            if isinstance(a, ast.Attribute) and a.attr == "module" and models.held(a.value)
        ]
        handed_kw = [
            (k.arg, k.value) for k in call.keywords
            if k.arg and isinstance(k.value, ast.Attribute) and k.value.attr == "module" and models.held(k.value.value)
        ]
        if not (handed or handed_kw):
            continue
        targets = by_name.get(_callee(call) or "", ())
        if len(targets) != 1:
            continue  # no def here, or several of that name: which one runs is not known
        fn = targets[0]
        params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
        if m.is_method(fn) and isinstance(call.func, ast.Attribute):
            params = params[1:]  # `self.step(model.module, x)`: `self` is bound already
        for i, a in handed:
            if i < len(params):
                out.setdefault((id(fn), params[i]), a)
        for name, a in handed_kw:
            if name in params or name in (k.arg for k in fn.args.kwonlyargs):
                out.setdefault((id(fn), name), a)
    return out


def _through_alias(m, call: ast.Call, unwrapped: dict[int, set[str]]) -> bool:
    """``sam_model(x)`` or ``sam_model.image_encoder(x)`` with ``sam_model`` such a name: a forward
    (it takes inputs) of the model inside the wrapper."""
    if not unwrapped or not (call.args or call.keywords):
        return False
    base = _called_name(call)
    if base is None:
        return False
    fn = m.enclosing_function(call)
    return fn is not None and base in unwrapped.get(id(fn), ())


def _method_aliases(m, models: Flow) -> dict[tuple[str, str], ast.Assign]:
    """(wrapper name, attribute) -> the assignment that puts a method of the model inside the wrapper
    on the wrapper itself (``model.log_prob = model.module.log_prob``, to call it "directly")."""
    out: dict[tuple[str, str], ast.Assign] = {}
    for a in m.nodes(ast.Assign):
        v = a.value
        if not (
            isinstance(v, ast.Attribute)
            and isinstance(v.value, ast.Attribute)
            and v.value.attr == "module"
            and models.held(v.value.value)
        ):
            continue
        for t in a.targets:
            if isinstance(t, ast.Attribute) and models.held(t.value) and (base := dotted(t.value)):
                out[(base, t.attr)] = a
    return out


def _aliased_method(call: ast.Call, methods: dict[tuple[str, str], ast.Assign]) -> ast.Assign | None:
    """``model.log_prob(x)`` after ``model.log_prob = model.module.log_prob``: that assignment."""
    f = call.func
    if not methods or not isinstance(f, ast.Attribute) or not (call.args or call.keywords):
        return None
    return methods.get((dotted(f.value) or "", f.attr))


def _called_name(call: ast.Call) -> str | None:
    """``net`` of ``net(x)`` and of ``net.encoder(x)``."""
    f = call.func
    base = f.value if isinstance(f, ast.Attribute) else f
    return base.id if isinstance(base, ast.Name) else None


def _alias_binding(m, call: ast.Call, unwrapped: dict[int, set[str]]) -> ast.AST | None:
    """The assignment before ``call`` that gave its name the model inside the wrapper, when the call
    goes through such a name and one assignment in the function binds it."""
    if not _through_alias(m, call, unwrapped):
        return None
    name = _called_name(call)
    fn = m.enclosing_function(call)
    binds = [
        a for a in ast.walk(fn)
        if isinstance(a, ast.Assign) and a.lineno < call.lineno
        and any(isinstance(t, ast.Name) and t.id == name for t in a.targets)
    ]
    return binds[0].value if len(binds) == 1 else None


def _via_getter(call: ast.Call, getters: set[str]) -> str:
    inner = call.func.value if isinstance(call.func, ast.Attribute) else call.func
    if isinstance(inner, ast.Call) and _callee(inner) in getters:
        return f" (`{_callee(inner)}()` returns its `.module`)"
    return ""


def _through_module(call: ast.Call, models: Flow, getters: set[str] = frozenset()) -> bool:
    """``model.module(...)``, ``model.module.fn(...)`` with ``model`` a DDP model, and the same
    through a getter of the file (``self._get_model().compute_loss(batch)``)."""
    f = call.func
    inner = f.value if isinstance(f, ast.Attribute) else f
    if isinstance(inner, ast.Call) and not inner.args and _callee(inner) in getters:
        return bool(call.args or call.keywords)  # a forward takes inputs; `.parameters()` does not
    if isinstance(f, ast.Attribute) and f.attr == "module":
        return models.held(f.value)
    return (
        isinstance(f, ast.Attribute)
        and isinstance(f.value, ast.Attribute)
        and f.value.attr == "module"
        and models.held(f.value.value)
        and f.attr not in _MODULE_METHODS
        and bool(call.args or call.keywords)  # a forward takes inputs; `.state_dict()` does not
    )


# torch.nn.Module's own methods: bookkeeping on the inner model, never a forward
_MODULE_METHODS = frozenset((
    "state_dict", "load_state_dict", "parameters", "named_parameters", "buffers", "named_buffers",
    "modules", "named_modules", "children", "named_children", "to", "cuda", "cpu", "half", "float",
    "train", "eval", "requires_grad_", "zero_grad", "apply", "register_buffer", "register_parameter",
    "get_submodule", "get_parameter", "add_module", "register_forward_hook", "register_forward_pre_hook",
))


def _ddp_forward(call: ast.Call, models: Flow) -> bool:
    f = call.func
    if isinstance(f, (ast.Name, ast.Attribute)) and models.held(f):
        return True
    return isinstance(f, ast.Attribute) and f.attr == "forward" and models.held(f.value)


def _backward_inputs(call: ast.Call) -> list[ast.AST]:
    """``loss.backward()``: the loss; ``accelerator.backward(loss)``: its arguments."""
    f = call.func
    out = [*call.args, *(k.value for k in call.keywords)]
    if isinstance(f, ast.Attribute) and not out:
        out.append(f.value)
    elif isinstance(f, ast.Attribute) and isinstance(f.value, (ast.Call, ast.Subscript, ast.BinOp)):
        out.append(f.value)  # scaler.scale(loss).backward(retain_graph=True)
    return out


def _calls(fn: ast.AST) -> Iterator[ast.Call]:
    for n in ast.walk(fn):
        if isinstance(n, ast.Call):
            yield n


def _callee(call: ast.Call) -> str | None:
    """The file's function a call may run: ``f()``, ``self.f()``."""
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("self", "cls"):
        return f.attr
    return None


def _reachable(m, step, by_name) -> set:
    seen = {step}
    todo = [(step, 0)]
    while todo:
        fn, depth = todo.pop()
        if depth >= _DEPTH:
            continue
        for c in _calls(fn):
            if m.without_grad(c):
                continue  # evaluation inside the step: no gradient comes from there
            for target in by_name.get(_callee(c) or "", ()):
                if target not in seen:
                    seen.add(target)
                    todo.append((target, depth + 1))
    return seen


class _Taint:
    """What the ``.module`` calls' outputs reach inside the step's functions: names assigned from an
    expression that holds one (any arithmetic or call on it), the functions that return one."""

    def __init__(self, m, functions: set, seeds: list[ast.Call]):
        self.seeds = {id(s) for s in seeds}
        self.names: dict[int, set[str]] = {id(fn): set() for fn in functions}
        self.returning: set[str] = set()
        self.m = m
        self._run(functions)

    def _hot(self, e: ast.AST | None, fn) -> bool:
        if e is None:
            return False
        names = self.names.get(id(fn), set())
        for n in ast.walk(e):
            if id(n) in self.seeds:
                return True
            if isinstance(n, (ast.Name, ast.Attribute)) and dotted(n) in names:
                return True
            if isinstance(n, ast.Call) and (_callee(n) or "") in self.returning:
                return True
        return False

    def reaches(self, backward: ast.Call) -> bool:
        fn = self.m.enclosing_function(backward)
        return any(self._hot(e, fn) for e in _backward_inputs(backward))

    def _run(self, functions: set) -> None:
        for _ in range(4):
            changed = False
            for fn in functions:
                names = self.names[id(fn)]
                for n in ast.walk(fn):
                    if isinstance(n, ast.Assign):
                        targets, value = n.targets, n.value
                    elif isinstance(n, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
                        targets, value = [n.target], n.value
                    elif isinstance(n, (ast.For, ast.AsyncFor)):
                        targets, value = [n.target], n.iter
                    elif isinstance(n, ast.Return):
                        if fn.name not in self.returning and self._hot(n.value, fn):
                            self.returning.add(fn.name)
                            changed = True
                        continue
                    else:
                        continue
                    if not self._hot(value, fn):
                        continue
                    for t in targets:
                        for leaf in _leaves(t):
                            if leaf not in names:
                                names.add(leaf)
                                changed = True
            if not changed:
                break


def _leaves(t: ast.AST) -> Iterator[str]:
    """The names an assignment target binds: ``a``, ``self.a``, ``d`` of ``d["k"]``, tuple items."""
    if isinstance(t, (ast.Tuple, ast.List)):
        for e in t.elts:
            yield from _leaves(e)
        return
    if isinstance(t, ast.Starred):
        yield from _leaves(t.value)
        return
    while isinstance(t, ast.Subscript):
        t = t.value
    name = dotted(t) if isinstance(t, (ast.Name, ast.Attribute)) else None
    if name is not None:
        yield name
