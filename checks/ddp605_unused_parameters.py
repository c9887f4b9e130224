"""DDP605: parameters the forward never uses, without find_unused_parameters.

## What it does
Finds `DistributedDataParallel(model)` without `find_unused_parameters=True` (or
`static_graph=True`) where `model` is built from a class of the same file whose `__init__`
registers a submodule or parameter (`self.head = nn.Linear(...)`, `nn.Parameter`, a
`ModuleList`/`ModuleDict`/`Sequential` of layers, `register_parameter`, `add_module`) that its
`forward` — and the methods and properties it calls — never uses, uses only under a random draw
(`if random.random() < p:`), or uses only behind a flag argument of `forward`
(`def forward(self, x, with_aux=False): if with_aux: ...`) that no call of the wrapped model in
its function sets. `if self.training:` is true on every training step and counts as a use.
It stays quiet when it cannot tell: a model class from another file or with another base, a
forward that hands `self` away, reads inherited attributes (`self.modules()`, `self._modules`),
uses `getattr` or `**kwargs` or is replaced (`self.forward = ...`), parameters frozen anywhere
in the file (`requires_grad_(False)`, `requires_grad = False`), an attribute set again or read
outside the class (`model.module.head`), a model that leaves its function before its flag is
known. On by default: no false
report on the labelled corpora (docs/lint-measurements.md).

## Why is this bad?
DDP expects a gradient for every parameter that requires one before it starts the next iteration.
A parameter that took no part in the forward never gets one, its bucket is never all-reduced, and
the second iteration fails on every rank with "Expected to have finished reduction in the prior
iteration before starting a new one ... making sure all `forward` function outputs participate in
calculating loss". Leaving the parameter out of the optimizer does not help: DDP registers every
parameter that `requires_grad` when it is built.

## Example
```python
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(32, 32)
        self.aux_head = nn.Linear(32, 10)   # only used by an older loss

    def forward(self, x):
        return self.body(x)

model = DDP(Net().to(device), device_ids=[local_rank])
```

## Use instead
```python
model = DDP(Net().to(device), device_ids=[local_rank], find_unused_parameters=True)
# or delete aux_head, or freeze it (aux_head.requires_grad_(False)) before wrapping
```
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass

from ddpdoctor.script.names import dotted

CODE = "DDP605"
TITLE = "Unused parameters without find_unused_parameters"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

# torch.nn layers that own parameters, and the keyword that turns them off (None: none does)
_PARAMETRIC = {
    "Linear": None,
    "Bilinear": None,
    "LazyLinear": None,
    "Embedding": None,
    "EmbeddingBag": None,
    "Conv1d": None,
    "Conv2d": None,
    "Conv3d": None,
    "ConvTranspose1d": None,
    "ConvTranspose2d": None,
    "ConvTranspose3d": None,
    "LSTM": None,
    "GRU": None,
    "RNN": None,
    "LSTMCell": None,
    "GRUCell": None,
    "RNNCell": None,
    "MultiheadAttention": None,
    "Transformer": None,
    "TransformerEncoder": None,
    "TransformerDecoder": None,
    "TransformerEncoderLayer": None,
    "TransformerDecoderLayer": None,
    "PReLU": None,
    "LayerNorm": "elementwise_affine",
    "GroupNorm": "affine",
    "RMSNorm": "elementwise_affine",
    "BatchNorm1d": "affine",
    "BatchNorm2d": "affine",
    "BatchNorm3d": "affine",
    "SyncBatchNorm": "affine",
}
_MODEL_ZOOS = ("torchvision.models.", "timm.create_model")
_CONTAINERS = ("Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict")
# moves and conversions that return the same model: `Net().to(device)`, `model = model.cuda()`
_SAME_MODEL = ("to", "cuda", "cpu", "float", "half", "double", "bfloat16", "train", "to_empty")
_RANDOM = ("random.", "torch.rand", "torch.bernoulli", "torch.multinomial", "numpy.random.", "np.random.")
_DYNAMIC = ("getattr", "setattr", "vars", "eval", "exec", "locals", "globals")
_UNKNOWN = object()
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}
_INIT_WORDS = ("init", "reset", "load", "repr")


def _is_nn(m, func: ast.AST, names) -> str | None:
    """The torch.nn name of ``nn.Linear``/``torch.nn.Linear``/``Linear`` when it is one of ``names``."""
    q = m.qualname(func) or ""
    last = q.rsplit(".", 1)[-1]
    if last in names and (q.startswith("torch.nn.") or q == f"nn.{last}"):
        return last
    return None


def _keyword_false(call: ast.Call, name: str) -> bool:
    return any(
        k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is False for k in call.keywords
    )


def _has_params(m, expr: ast.AST, classes: dict, depth: int = 0) -> bool:
    """The expression builds something that surely owns a trainable parameter."""
    if depth > 4 or not isinstance(expr, ast.Call):
        return False
    if _is_nn(m, expr.func, ("Parameter",)):
        return not _keyword_false(expr, "requires_grad") and not (
            len(expr.args) > 1 and isinstance(expr.args[1], ast.Constant) and expr.args[1].value is False
        )
    q = m.qualname(expr.func) or ""
    if q.startswith(_MODEL_ZOOS):
        # a torchvision or timm network, not a weights enum or a listing
        last = q.rsplit(".", 1)[-1]
        return "Weights" not in q and not last.startswith(("get_weight", "get_model_weights", "list_"))
    layer = _is_nn(m, expr.func, _PARAMETRIC)
    if layer is not None:
        off = _PARAMETRIC[layer]
        return off is None or not _keyword_false(expr, off)
    if _is_nn(m, expr.func, _CONTAINERS):
        parts: list[ast.AST] = []
        for a in expr.args:
            if isinstance(a, (ast.List, ast.Tuple)):
                parts.extend(a.elts)
            elif isinstance(a, (ast.ListComp, ast.GeneratorExp)):
                parts.append(a.elt)
            elif isinstance(a, ast.Dict):
                parts.extend(a.values)
            elif isinstance(a, ast.Call) and dotted(a.func) == "dict":  # ModuleDict(dict(wte=...))
                parts.extend(k.value for k in a.keywords)
            else:
                parts.append(a)
        return any(_has_params(m, p, classes, depth + 1) for p in parts)
    if isinstance(expr.func, ast.Name) and expr.func.id in classes:
        registered = _registered(m, classes[expr.func.id], classes, depth + 1)
        return bool(registered)
    return False


def _self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _registered(m, cls: ast.ClassDef, classes: dict, depth: int = 0) -> dict[str, ast.AST]:
    """Attribute -> the statement of ``__init__`` that registers a trainable parameter under it,
    from the statements of ``__init__``'s own body (a registration under an ``if`` may not exist)."""
    init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is None:
        return {}
    out: dict[str, ast.AST] = {}
    for stmt in init.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if (
                len(targets) == 1
                and (name := _self_attr(targets[0]))
                and _has_params(m, stmt.value, classes, depth)
            ):
                out[name] = stmt
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            c = stmt.value
            if (
                _self_attr(c.func) in ("register_parameter", "add_module", "register_module")
                and len(c.args) == 2
                and isinstance(c.args[0], ast.Constant)
                and isinstance(c.args[0].value, str)
                and _has_params(m, c.args[1], classes, depth)
            ):
                out[c.args[0].value] = stmt
    # set again or deleted anywhere in the class (``self.head = None``, ``del self.head``): unknown
    changes: dict[str, int] = {}
    for n in ast.walk(cls):
        if (
            isinstance(n, ast.Attribute)
            and isinstance(n.ctx, (ast.Store, ast.Del))
            and (name := _self_attr(n))
        ):
            changes[name] = changes.get(name, 0) + 1
    return {
        k: v
        for k, v in out.items()
        if changes.get(k, 0) <= (1 if isinstance(v, (ast.Assign, ast.AnnAssign)) else 0)
    }


def _model_class(m, expr: ast.AST, classes: dict) -> ast.ClassDef | None:
    """The same-file class of ``Net(...)`` / ``Net(...).to(device)``."""
    while (
        isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _SAME_MODEL
    ):
        expr = expr.func.value
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        return classes.get(expr.func.id)
    return None


def _passes_through(expr: ast.AST, name: str) -> bool:
    """``model.to(device)``, ``SyncBatchNorm.convert_sync_batchnorm(model)``, ``torch.compile(model)``
    (it calls the model's own forward), or another wrapper of it (``nn.DataParallel(model)`` on an
    other arm of an ``if``): the same model's forward."""
    while (
        isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _SAME_MODEL
    ):
        expr = expr.func.value
    if dotted(expr) == name:
        return True
    return (
        isinstance(expr, ast.Call)
        and (dotted(expr.func) or "").rsplit(".", 1)[-1]
        in ("convert_sync_batchnorm", "compile", "DataParallel", "DistributedDataParallel")
        and len(expr.args) == 1
        and dotted(expr.args[0]) == name
    )


def _scope(m, call: ast.Call, name: str) -> ast.AST | None:
    """Where ``name`` lives: the class for ``self.model``, else the function (None: the module)."""
    if name.startswith("self."):
        return next((a for a in m.ancestors(call) if isinstance(a, ast.ClassDef)), None)
    return m.enclosing_function(call)


def _wrapped_class(m, call: ast.Call, classes: dict) -> ast.ClassDef | None:
    """The same-file class whose instance the DDP call wraps, when every assignment says so."""
    arg = call.args[0] if call.args else m.keyword(call, "module")
    if arg is None:
        return None
    direct = _model_class(m, arg, classes)
    if direct is not None or isinstance(arg, ast.Call):
        return direct
    name = dotted(arg)
    if name is None:
        return None
    scope = _scope(m, call, name)
    if (
        scope is not None
        and not name.startswith("self.")
        and name in {a.arg for a in (*scope.args.posonlyargs, *scope.args.args, *scope.args.kwonlyargs)}
    ):
        return None  # handed in: its class is the caller's business
    found: set[int] = set()
    cls_found = None
    for node in ast.walk(scope if scope is not None else m.tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension, ast.NamedExpr, ast.withitem)):
            target = node.optional_vars if isinstance(node, ast.withitem) else node.target
            if target is not None and any(dotted(t) == name for t in ast.walk(target)):
                return None  # bound by a loop, a with or a walrus: unknown
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            if dotted(t) == name:
                if node.value is call or (
                    isinstance(node.value, ast.Call) and node.value in m.ddp_constructors
                ):
                    continue
                cls = _model_class(m, node.value, classes)
                if cls is None:
                    if _passes_through(node.value, name):
                        continue
                    return None
                found.add(id(cls))
                cls_found = cls
            elif isinstance(t, (ast.Tuple, ast.List)) and any(dotted(e) == name for e in ast.walk(t)):
                return None  # unpacked from a tuple: unknown
    return cls_found if len(found) == 1 else None


def _plain_module(m, cls: ast.ClassDef) -> bool:
    return (
        bool(cls.bases)
        and all((m.qualname(b) or "") in ("torch.nn.Module", "nn.Module", "Module") for b in cls.bases)
        and not cls.keywords
    )


def _random_test(m, test: ast.AST) -> bool:
    return any(
        isinstance(c, ast.Call) and (m.qualname(c.func) or "").startswith(_RANDOM) for c in ast.walk(test)
    )


@dataclass(frozen=True)
class Uses:
    """What the forward does with the registered attributes."""

    always: set[str]  # used on every call
    randomly: set[str]  # used only under a random draw
    # used only under tests of forward's own flag arguments: per attribute, one tuple of
    # (test, polarity) conditions per reference (the reference runs when all of them hold)
    flagged: dict[str, list[tuple[tuple[ast.expr, bool], ...]]]
    reached: set[str]  # the methods the forward reaches


def _forward_uses(m, cls: ast.ClassDef, attrs: set[str]) -> Uses | None:
    """None when the forward escapes the analysis."""
    methods = {f.name: f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if "forward" not in methods or _forward_replaced(m, cls):
        return None
    assigned = {
        a
        for f in methods.values()
        for n in ast.walk(f)
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and (a := _self_attr(n))
    }
    known = attrs | assigned | set(methods) | {"training"}
    flags = _flag_arguments(methods["forward"])
    always: set[str] = set()
    randomly: set[str] = set()
    flagged: dict[str, list] = {}
    seen: set[str] = set()
    todo = ["forward"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        fn = methods[name]
        if fn.args.kwarg is not None:
            return None  # **kwargs dispatch
        parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(fn):
            for child in ast.iter_child_nodes(node):
                parents[child] = node
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and node.id == "self":
                attr = _self_attr(parents.get(node))
                if attr is None or attr not in known:
                    return None  # self handed away, or an inherited attribute (self.modules())
                if attr in methods and attr != name:
                    todo.append(attr)
                if attr not in attrs:
                    continue
                random_draw, conditions = _conditions(
                    m, node, parents, fn, flags if name == "forward" else {}
                )
                if random_draw:
                    randomly.add(attr)
                elif conditions:
                    flagged.setdefault(attr, []).append(conditions)
                else:
                    always.add(attr)
            elif isinstance(node, ast.Name) and node.id in _DYNAMIC:
                return None
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super":
                return None
    return Uses(
        always,
        randomly - always,
        {a: c for a, c in flagged.items() if a not in always and a not in randomly},
        seen,
    )


def _forward_replaced(m, cls: ast.ClassDef) -> bool:
    """``self.forward = self.forward_train``, ``forward = other`` in the class body, or
    ``Net.forward = ...`` anywhere: the forward that runs is not the ``def forward`` read here."""
    if any(
        isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "forward" for t in st.targets)
        for st in cls.body
    ):
        return True
    return any(n.attr == "forward" and isinstance(n.ctx, ast.Store) for n in m.nodes(ast.Attribute))


def _flag_arguments(fn: ast.FunctionDef) -> dict[str, tuple[int | None, object]]:
    """forward's arguments with a constant default: name -> (position in a call, default)."""
    out: dict[str, tuple[int | None, object]] = {}
    positional = [*fn.args.posonlyargs, *fn.args.args]
    for i, (a, d) in enumerate(
        zip(positional[-len(fn.args.defaults) :] if fn.args.defaults else [], fn.args.defaults)
    ):
        if isinstance(d, ast.Constant):
            out[a.arg] = (len(positional) - len(fn.args.defaults) + i - 1, d.value)  # -1: self
    for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults):
        if isinstance(d, ast.Constant):
            out[a.arg] = (None, d.value)
    return out


def _flag_test(test: ast.AST, flags: dict) -> bool:
    """A test of flag arguments and constants only (``if return_aux:``, ``if mode == "train":``)."""
    allowed = (
        ast.Name,
        ast.Constant,
        ast.BoolOp,
        ast.UnaryOp,
        ast.Compare,
        ast.Load,
        ast.boolop,
        ast.unaryop,
        ast.cmpop,
    )
    return any(isinstance(n, ast.Name) for n in ast.walk(test)) and all(
        isinstance(n, allowed) and (not isinstance(n, ast.Name) or n.id in flags) for n in ast.walk(test)
    )


def _conditions(m, node: ast.AST, parents: dict, fn: ast.AST, flags: dict):
    """(under a random draw, the flag tests with the branch taken) of the ifs around a reference."""
    out: list[tuple[ast.expr, bool]] = []
    child, p = node, parents.get(node)
    while p is not None and p is not fn:
        if isinstance(p, (ast.If, ast.IfExp)) and child is not p.test:
            if _random_test(m, p.test):
                return True, ()
            if _flag_test(p.test, flags):
                body = p.body if isinstance(p, ast.If) else [p.body]
                out.append((p.test, child in body))
        child, p = p, parents.get(p)
    return False, tuple(out)


def _truth(test: ast.expr, values: dict) -> object:
    """The value of a flag test with the flags' values (no eval of the file's code); _UNKNOWN when
    it cannot be told."""
    if isinstance(test, ast.Constant):
        return test.value
    if isinstance(test, ast.Name):
        return values.get(test.id, _UNKNOWN)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        v = _truth(test.operand, values)
        return _UNKNOWN if v is _UNKNOWN else not v
    if isinstance(test, ast.BoolOp):
        vs = [_truth(v, values) for v in test.values]
        if any(v is _UNKNOWN for v in vs):
            return _UNKNOWN
        return all(vs) if isinstance(test.op, ast.And) else any(vs)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = _truth(test.left, values), _truth(test.comparators[0], values)
        compare = _COMPARE.get(type(test.ops[0]))
        if compare is None or _UNKNOWN in (left, right):
            return _UNKNOWN
        return compare(left, right)
    return _UNKNOWN


def _model_calls(m, call: ast.Call) -> list[ast.Call] | None:
    """The calls of the DDP-wrapped local name (``net(x)``, ``net.module(x)``, ``net.forward(x)``)
    in its function; None when the name leaves the function's sight: handed to a call, returned,
    stored or put in a container, or its ``.module`` taken as a value."""
    wrapped = m.assigned_to(call)
    scope = m.enclosing_function(call)
    if wrapped is None or "." in wrapped or scope is None:
        return None  # self.model: other methods and other objects may call it
    parents = m.parents
    out: list[ast.Call] = []
    for node in ast.walk(scope):
        if not (isinstance(node, ast.Name) and node.id == wrapped and isinstance(node.ctx, ast.Load)):
            continue
        if (node.lineno, node.col_offset) <= (call.end_lineno, call.end_col_offset):
            continue  # the model before it is wrapped
        p = parents.get(node)
        while isinstance(p, ast.Attribute) and p.attr in ("module", "forward"):
            p = parents.get(p)  # net.module(x), net.module.forward(x)
        if (
            isinstance(p, ast.Call)
            and p.func is not None
            and any(
                p.func is x for x in (node, *(a for a in ast.walk(p.func) if isinstance(a, ast.Attribute)))
            )
            and dotted(p.func)
            in (wrapped, f"{wrapped}.module", f"{wrapped}.forward", f"{wrapped}.module.forward")
        ):
            out.append(p)
        elif isinstance(parents.get(node), ast.Attribute) and parents[node].attr not in ("module", "forward"):
            continue  # net.parameters(), net.train(), net.no_sync()
        else:
            return None
    return out


def _never_used(m, call: ast.Call, flags: dict, uses: list) -> bool:
    """No call of the wrapped model in its own function takes a branch that uses the attribute;
    quiet when the model leaves the function or a call's flag values are not constants."""
    calls = _model_calls(m, call)
    if not calls:
        return False
    for c in calls:
        if any(isinstance(a, ast.Starred) for a in c.args) or any(k.arg is None for k in c.keywords):
            return False
        values = {}
        for flag, (pos, default) in flags.items():
            given = m.keyword(c, flag)
            if given is None and pos is not None and pos < len(c.args):
                given = c.args[pos]
            if given is None:
                values[flag] = default
            elif isinstance(given, ast.Constant):
                values[flag] = given.value
            else:
                return False
        for conditions in uses:
            truths = [_truth(t, values) for t, _ in conditions]
            if any(v is _UNKNOWN for v in truths):
                return False
            if all(bool(v) == want for v, (_, want) in zip(truths, conditions)):
                return False  # this call uses it
    return True


def _frozen_names(m) -> set[str] | None:
    """Names around every ``requires_grad`` change of the file; None when one names nothing specific
    (``for p in model.parameters(): p.requires_grad = False``: could be any of them)."""
    out: set[str] = set()
    nodes = [n for n in m.nodes(ast.Attribute) if n.attr in ("requires_grad", "requires_grad_")]
    for n in nodes:
        if n.attr == "requires_grad" and not isinstance(n.ctx, ast.Store):
            continue
        names = {x.attr for x in ast.walk(n.value) if isinstance(x, ast.Attribute)}
        loop = next((a for a in m.ancestors(n) if isinstance(a, (ast.For, ast.comprehension))), None)
        if loop is not None:
            names |= {x.attr for x in ast.walk(loop.iter) if isinstance(x, ast.Attribute)}
            names |= {
                x.value
                for x in ast.walk(loop.iter)
                if isinstance(x, ast.Constant) and isinstance(x.value, str)
            }
        names -= {"parameters", "named_parameters", "module", "model", "weight", "bias", "data"}
        if not names:
            return None
        out |= names
    return out


def _read_outside(m, cls: ast.ClassDef, attr: str, reached: set[str]) -> bool:
    """The attribute is read outside the class (``model.module.head``) or in a method of the class
    that the forward does not reach and that is not an initialiser: another path may train it."""
    for n in m.nodes(ast.Attribute):
        if n.attr != attr:
            continue
        if not (cls.lineno <= n.lineno <= (cls.end_lineno or cls.lineno)):
            return True
        fn = m.enclosing_function(n)
        if fn is not None and fn.name not in reached and fn.name != "__init__":
            if not any(w in fn.name.lower() for w in _INIT_WORDS):
                return True
    return False


def _tolerates_unused(m, call: ast.Call) -> bool:
    if len(call.args) > 7 or any(k.arg is None for k in call.keywords):
        return True  # find_unused_parameters passed positionally or through **kwargs
    for key in ("find_unused_parameters", "static_graph"):
        v = m.keyword(call, key)
        if v is not None and not (isinstance(v, ast.Constant) and v.value is False):
            return True
    return bool(m.method_calls("_set_static_graph"))


def _how(attr: str, uses: Uses) -> str:
    if attr in uses.randomly:
        return "is used only under a random draw, not on every step"
    if attr in uses.flagged:
        tests = sorted({ast.unparse(t) for conds in uses.flagged[attr] for t, _ in conds})
        return f"is used only when `{'`, `'.join(tests)}` allows, which no call of the model here does"
    return "is never used by forward"


def check(m):
    if not m.ddp_constructors:
        return
    classes: dict[str, ast.ClassDef] = {}
    for c in m.nodes(ast.ClassDef):
        if c.name in classes:
            classes[c.name] = None  # two classes of one name: which one is unknown
        else:
            classes[c.name] = c
    classes = {k: v for k, v in classes.items() if v is not None}
    if not classes:
        return
    frozen = None
    for call in m.ddp_constructors:
        if _tolerates_unused(m, call):
            continue
        cls = _wrapped_class(m, call, classes)
        if cls is None or not _plain_module(m, cls):
            continue
        registered = _registered(m, cls, classes)
        if not registered:
            continue
        uses = _forward_uses(m, cls, set(registered))
        if uses is None:
            continue
        if frozen is None:
            frozen = _frozen_names(m)
            if frozen is None:
                return
        flags = _flag_arguments(next(f for f in cls.body if getattr(f, "name", None) == "forward"))
        unused = [
            a
            for a in registered
            if a not in uses.always
            and a not in frozen
            and (a not in uses.flagged or _never_used(m, call, flags, uses.flagged[a]))
            and not _read_outside(m, cls, a, uses.reached)
        ]
        if not unused:
            continue
        parts = [f"`{cls.name}.{a}` (line {registered[a].lineno}) {_how(a, uses)}" for a in unused]
        yield m.finding(
            CODE,
            call,
            f"{'; '.join(parts)}, so its parameters get no gradient and DDP fails on the second "
            'iteration with "Expected to have finished reduction in the prior iteration"',
            SEVERITY,
            hint="pass find_unused_parameters=True to DDP, or remove or freeze the unused "
            "parameters (requires_grad_(False)) before wrapping",
            unused=[f"{cls.name}.{a}" for a in unused],
        )
