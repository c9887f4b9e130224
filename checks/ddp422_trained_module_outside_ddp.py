"""DDP422: a module the optimizer trains that DDP does not wrap, beside one it does.

## What it does
In a file that wraps a model in DistributedDataParallel, finds another module whose parameters go
into an optimizer (`Adam(disc.parameters())`, also through a list or parameter groups:
`params = [p for p in disc.parameters() if p.requires_grad]`) but which is never wrapped itself: a
discriminator, a student beside a wrapped teacher, a trainable loss or projection head kept apart.
Left alone: a module inside the wrapped one (`ddp_model.module.decoder`), one handed to the DDP
constructor in a container (`DDP(nn.ModuleList([net, head]))`), one handed to any other call that
returns it (`disc = accelerator.prepare(disc)`, a project's wrapping helper), a local module that
leaves its function (returned, handed to a trainer, a parameter: it may be wrapped there), a model
class's own `self.parameters()`, and files that all-reduce gradients themselves.

## Why is this bad?
Only the wrapper's backward all-reduces gradients. The other module's gradients stay each rank's
own: every rank steps its own copy on its own shard, the copies drift apart from the first step,
and the run looks healthy (losses fall everywhere) while that part is N separate trainings. The
checkpoint rank 0 saves holds rank 0's copy only.

## Example
```python
generator = DDP(generator, device_ids=[local_rank])
disc = Discriminator().cuda()
opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4)     # never all-reduced
```

## Use instead
```python
disc = DDP(Discriminator().cuda(), device_ids=[local_rank])
opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import SAME_MODULE, dotted
from ddpdoctor.script.sync_calls import grads_reduced_by_hand

CODE = "DDP422"
TITLE = "Trained module outside DDP"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

_PARAMS = frozenset(("parameters", "named_parameters"))


def _optimizer_call(m, call: ast.Call) -> bool:
    """A call that builds an optimizer (`torch.optim.AdamW(...)`, `BertAdam(...)`,
    `build_optimizer(...)`, `optim.SGD(...)`)."""
    q = (m.qualname(call.func) or dotted(call.func) or "").lower()
    last = q.rsplit(".", 1)[-1]
    return q.startswith("torch.optim.") or any(w in last for w in _OPTIMIZER_WORDS)


_OPTIMIZER_WORDS = ("optim", "adam", "sgd", "lamb", "lars", "rmsprop", "adagrad", "lion", "adafactor")


def _optimized_sources(m) -> list[tuple[ast.Call, str]]:
    """(the `X.parameters()` call, X) for each module whose parameters reach an optimizer's
    constructor, directly or through up to three names (`params`, `param_groups`)."""
    carried: dict[str, ast.Call] = {}  # a name holding parameters -> the parameters() call
    sources = []
    for call in m.nodes(ast.Call):
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr in _PARAMS and not call.args and dotted(f.value):
            sources.append(call)
    optimizers = [c for c, _q in m.calls if _optimizer_call(m, c)]
    found = []
    for src in sources:
        owner = dotted(src.func.value)
        cur = src
        for _hop in range(4):
            if any(_within(m, cur, o) for o in optimizers):
                found.append((src, owner))
                break
            stmt = next((a for a in m.ancestors(cur) if isinstance(a, ast.stmt)), None)
            target = None
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = dotted(stmt.targets[0])
            elif isinstance(stmt, ast.AnnAssign):
                target = dotted(stmt.target)
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                # `params.extend(disc.parameters())`, `groups.append({"params": ...})`
                f = stmt.value.func
                target = dotted(f.value) if isinstance(f, ast.Attribute) else None
            if target is None:
                break
            carried.setdefault(target, src)
            fn = m.enclosing_function(stmt)
            nxt = next(
                (
                    n
                    for n in m.nodes(ast.Name, ast.Attribute)
                    if isinstance(n.ctx, ast.Load)
                    and dotted(n) == target
                    and n.lineno > stmt.lineno
                    and m.enclosing_function(n) is fn
                    and any(_within(m, n, o) for o in optimizers)
                ),
                None,
            ) or next(
                (
                    n
                    for n in m.nodes(ast.Name, ast.Attribute)
                    if isinstance(n.ctx, ast.Load)
                    and dotted(n) == target
                    and n.lineno > stmt.lineno
                    and m.enclosing_function(n) is fn
                ),
                None,
            )
            if nxt is None:
                break
            cur = nxt
    return found


def _within(m, node: ast.AST, outer: ast.AST) -> bool:
    return node is outer or any(a is outer for a in m.ancestors(node))


def _wrapped(m) -> tuple[set[str], list[ast.Call]]:
    """The names the DDP constructors are given or assigned to (and the members of a container a
    loop wraps one by one: `for module in module_list: DDP(module)`), and the constructors."""
    ctors = [*m.ddp_constructors, *m.ddp_wrapper_calls]
    names = set()
    for c in ctors:
        if (t := m.assigned_to(c)) is not None:
            names.add(t)
        for a in c.args[:1]:
            for n in ast.walk(a):
                # (whole names only: `self.s_model`, not the `self` it is read through)
                if isinstance(n, (ast.Name, ast.Attribute)) and (d := dotted(n)) and not _inner(m, n):
                    names.add(d)
            loop = m.enclosing_loop(c)
            if (
                isinstance(loop, (ast.For, ast.AsyncFor))
                and isinstance(loop.target, ast.Name)
                and isinstance(a, ast.Name)
                and a.id == loop.target.id
                and (container := dotted(loop.iter))
            ):
                names |= {container, *(name for name, _node in _members(m, container))}
    return names, ctors


def _inner(m, n: ast.AST) -> bool:
    parent = m.parents.get(n)
    return isinstance(parent, ast.Attribute) and parent.value is n


_CONTAINERS = frozenset(("ModuleList", "ModuleDict", "Sequential"))


def _members(m, container: str) -> list[tuple[str, ast.AST]]:
    """(name, where it is put in) for the modules of an ``nn.ModuleList`` the file fills
    (`mods = nn.ModuleList([a]); mods.append(b)`), else []."""
    out: list[tuple[str, ast.AST]] = []
    made = False
    for a in m.nodes(ast.Assign):
        if any(dotted(t) == container for t in a.targets) and isinstance(a.value, ast.Call):
            if (dotted(a.value.func) or "").rsplit(".", 1)[-1] not in _CONTAINERS:
                continue
            made = True
            for arg in a.value.args[:1]:
                for e in getattr(arg, "elts", ()):
                    if (d := dotted(e)) is not None:
                        out.append((d, e))
    if not made:
        return []
    for call in m.method_calls("append"):
        if dotted(call.func.value) == container and call.args and (d := dotted(call.args[0])) is not None:
            out.append((d, call))
    return out


def _part_of(name: str, wrapped: set[str]) -> bool:
    return name in wrapped or any(name.startswith(w + ".") for w in wrapped)


def _handed_back(m, owner: str) -> bool:
    """``owner`` is assigned from a call that takes it (`disc = accelerator.prepare(disc)`,
    `d = wrap(d)`), or taken from a wrapped model's module: whatever the call does, not known."""
    for a in m.nodes(ast.Assign):
        targets = [dotted(t) for t in a.targets for t in (t.elts if isinstance(t, ast.Tuple) else [t])]
        if owner not in targets:
            continue
        v = a.value
        while isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in SAME_MODULE:
            v = v.func.value
        if isinstance(v, ast.Call) and any(
            w in (dotted(v.func) or "").rsplit(".", 1)[-1].lower() for w in _WRAPS
        ):
            return True  # `critic = accelerator.prepare(build())`, `d = ddp_wrap(make())`
        if (
            isinstance(v, ast.Call)
            and (dotted(v.func) or "").rsplit(".", 1)[-1] != "DataParallel"  # one process's wrapper
            and any(
                dotted(n) == owner for arg in (*v.args, *(k.value for k in v.keywords)) for n in ast.walk(arg)
            )
        ):
            return True
    return False


# what a call that wraps a model for the job is named for
_WRAPS = ("prepare", "wrap", "ddp", "distributed", "shard", "fsdp")


def _module_of_wrapped(m, owner: str, wrapped: set[str]) -> bool:
    """``decoder = ddp_model.module.decoder``: a part of a wrapped model under another name."""
    for a in m.nodes(ast.Assign):
        if any(dotted(t) == owner for t in a.targets):
            v = a.value
            while isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute):
                v = v.func.value
            if (d := dotted(v)) and _part_of(d, wrapped):
                return True
    return False


def check(m):
    if not m.distributed_context or m.one_process:
        return
    wrapped, ctors = _wrapped(m)
    if not ctors or grads_reduced_by_hand(m):
        return
    reported = set()
    for src, container in _optimized_sources(m):
        members = _members(m, container) or [(container, None)]
        for owner, put in members:
            if owner in reported or _part_of(owner, wrapped):
                continue
            if "ema" in owner.rsplit(".", 1)[-1].lower():
                continue  # an average of the weights, not a trained module
            if _handed_back(m, owner) or _module_of_wrapped(m, owner, wrapped) or _leaves_here(m, owner, src):
                continue
            if not _built_beside_a_wrap(m, owner, src, ctors, wrapped):
                continue
            reported.add(owner)
            yield _finding(m, put or _made_at(m, owner, src) or src, owner, ctors[0])


# calls a module may be handed to that do not wrap it: printing, counting, checkpoint files
_HARMLESS = frozenset(
    (
        "print",
        "len",
        "sum",
        "str",
        "repr",
        "info",
        "debug",
        "warning",
        "log",
        "isinstance",
        "getattr",
        "hasattr",
        "deepcopy",
        "count_parameters",
        "load_checkpoint",
        "save_checkpoint",
        "load_state_dict",
        "DataParallel",
        "append",
        "extend",
        "add_module",
    )
)


def _leaves_here(m, owner: str, src: ast.AST) -> bool:
    """A local module that goes elsewhere, where it may be wrapped: returned, handed to a call
    (`Trainer(model, optimizer)`), or a parameter of the function (the caller's module); also
    `self`, a model class building its own optimizer. The file's own attributes (`self.disc`) stay."""
    if owner == "self" or "." in owner:
        return owner == "self"
    fn = m.enclosing_function(src)
    if fn is None:
        return False
    if any(a.arg == owner for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)):
        return True
    for n in ast.walk(fn):
        if isinstance(n, ast.Return) and n.value is not None:
            if any(isinstance(x, ast.Name) and x.id == owner for x in ast.walk(n.value)):
                return True
        if isinstance(n, ast.Call) and not _optimizer_call(m, n):
            last = (dotted(n.func) or "").rsplit(".", 1)[-1]
            if last in _HARMLESS:
                continue
            if any(
                isinstance(a, ast.Name) and a.id == owner for a in (*n.args, *(k.value for k in n.keywords))
            ):
                return True
    return False


def _built_beside_a_wrap(m, owner: str, src: ast.AST, ctors: list, wrapped: set[str]) -> bool:
    """The evidence that the file means to wrap what it trains and left this one out: the function
    that hands its parameters to the optimizer builds it there (`disc = build_disc()`, not a name
    taken from elsewhere, a loop's module or a getattr) and wraps another module itself; and no
    name made from it is wrapped (`model_train = model.train()`, then `DDP(model_train)`)."""
    fn = m.enclosing_function(src)
    if not any(m.enclosing_function(c) is fn for c in ctors):
        return False
    built = False
    for a in m.nodes(ast.Assign):
        targets = [dotted(t) for t in a.targets for t in (t.elts if isinstance(t, ast.Tuple) else [t])]
        reads = {dotted(n) for n in ast.walk(a.value) if isinstance(n, (ast.Name, ast.Attribute))}
        if owner in reads and any(t in wrapped for t in targets if t):
            return False
        if owner in targets and m.enclosing_function(a) is fn:
            v = a.value
            while (
                isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in SAME_MODULE
            ):
                v = v.func.value
            if not isinstance(v, ast.Call) or (dotted(v.func) or "").rsplit(".", 1)[-1] in (
                "getattr",
                "getattr_recursive",
            ):
                return False
            if _sharded(v):
                return False  # `PartialFC(rank=rank, world_size=world)`: each rank's own shard, by design
            built = True
    for loop in m.nodes(ast.For, ast.AsyncFor):
        if any(dotted(t) == owner for t in ast.walk(loop.target) if isinstance(t, (ast.Name, ast.Attribute))):
            return False
    return built


def _sharded(build: ast.Call) -> bool:
    """The module is built for this rank's place in the job (handed the rank or the world size): a
    model-parallel part each rank holds its own share of, not a replica."""
    for a in (*build.args, *(k.value for k in build.keywords)):
        for n in ast.walk(a):
            if isinstance(n, (ast.Name, ast.Attribute)):
                name = (dotted(n) or "").rsplit(".", 1)[-1].lower()
                if "rank" in name or "world_size" in name:
                    return True
    return any((k.arg or "").lower() in ("rank", "world_size", "local_rank") for k in build.keywords)


def _made_at(m, owner: str, src: ast.AST) -> ast.AST | None:
    """The last statement of ``src``'s function that sets ``owner`` before it: where it is built."""
    fn = m.enclosing_function(src)
    found = None
    for a in m.nodes(ast.Assign):
        if (
            a.lineno < src.lineno
            and m.enclosing_function(a) is fn
            and any(
                dotted(t) == owner for t in a.targets for t in (t.elts if isinstance(t, ast.Tuple) else [t])
            )
        ):
            if found is None or a.lineno > found.lineno:
                found = a
    return found


def _finding(m, anchor: ast.AST, owner: str, ctor: ast.Call):
    return m.finding(
        CODE,
        anchor,
        f"`{owner}` is trained (its parameters are in an optimizer) but never wrapped in DDP (the file "
        f"wraps another model, line {ctor.lineno}): its gradients are never all-reduced, so each rank "
        "trains its own copy and the copies drift apart",
        SEVERITY,
        hint=f"wrap it too (`{owner} = DDP({owner}, device_ids=[local_rank])`), or put it inside the "
        "wrapped model",
    )
