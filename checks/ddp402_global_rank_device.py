"""DDP402: the global rank used as a CUDA device index.

## What it does
Finds `torch.cuda.set_device`, `torch.device("cuda", i)`, `torch.device(i)`, `f"cuda:{i}"`,
`.to(i)`, `.cuda(i)` and `device_ids=[i]` where `i` comes from `dist.get_rank()` or the `RANK`
environment variable.

## Why is this bad?
The global rank counts GPUs across all nodes; each node only has devices 0..7. On the second node
rank 8 asks for `cuda:8` and crashes ("invalid device ordinal"), or ranks of one node share a GPU. It
works on one node, so it is found only when the job scales out.

## Example
```python
rank = dist.get_rank()
torch.cuda.set_device(rank)
```

## Use instead
```python
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
```
"""

from __future__ import annotations

import ast
import itertools

from ddpdoctor.script.names import dotted, rebinds
from ddpdoctor.script.nodes import walk
from ddpdoctor.script.ranks import GLOBAL, LOCAL, rank_kind, single_process_arm
from ddpdoctor.script.writers import spawn_calls

CODE = "DDP402"
TITLE = "Global rank used as CUDA device index"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"
_GLOBAL_ENV = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
_SET_DEVICE = (
    "torch.cuda.set_device",
    "torch.cuda.device",
    "torch.accelerator.set_device_index",
    "torch.accelerator.set_device_idx",
)
# names that say "global rank" and nothing else: a field set in another module (a config class,
# a trainer base) is still the job-wide rank. Plain ``rank`` is not enough: many scripts keep the
# local rank in ``self.rank``.
_GLOBAL_NAMES = ("global_rank", "world_rank")


def _holders(m) -> tuple[set[int], set[int]]:
    """ids of the expressions of this file that hold a global rank source (``dist.get_rank()``,
    ``os.environ["RANK"]``), and of those that hold a ``%``: each such node and its ancestors. The
    rule asks this of every argument of every call; one pass over the few such nodes answers what a
    walk of each expression would."""
    found = m.__dict__.get("_ddp402_holders")
    if found is None:
        sources = m.dist_calls("get_rank", "get_global_rank") + _own_rank_getters(m)
        env = [c for c in m.nodes(ast.Constant) if c.value in _GLOBAL_ENV]
        if env:
            sources += [
                c for c in env if isinstance(m.parents.get(c), (ast.Subscript, ast.Call)) and not _fallback_of_local(m, c)
            ]
        mods = [b for b in m.nodes(ast.BinOp) if isinstance(b.op, ast.Mod)]
        found = m.__dict__["_ddp402_holders"] = (_with_ancestors(m, sources), _with_ancestors(m, mods))
    return found


def _own_rank_getters(m) -> list[ast.Call]:
    """Calls of this file's own functions that return the global rank (``def get_rank(): return
    dist.get_rank() if dist.is_initialized() else 0``; ``rank = get_rank()``), and of a project's
    imported ``get_rank()``."""
    found = m.__dict__.get("_ddp402_getters")
    if found is None:
        own = {f.name for f in m.functions}
        found = m.__dict__["_ddp402_getters"] = [
            c for c, q in m.calls
            if isinstance(c.func, ast.Name)
            and not c.args
            and (c.func.id in own or _imported_rank_getter(c.func.id, q))
            and rank_kind(m, c) == GLOBAL
        ]
    return found


def _imported_rank_getter(name: str, qualname: str | None) -> bool:
    """``from utils.distributed import get_rank``: a project's helper named as torch.distributed's
    own, which returns the process's rank in the whole job."""
    return bool(qualname) and qualname != name and name in ("get_rank", "get_global_rank")


def _fallback_of_local(m, node: ast.AST) -> bool:
    """``node`` sits in the default of a read of the local rank (``os.environ.get("LOCAL_RANK",
    os.environ.get("RANK", "0"))``): the value only when the launcher sets no LOCAL_RANK, which
    torchrun always does."""
    child = node
    for a in m.ancestors(node):
        if isinstance(a, ast.Call) and a.args and child in a.args[1:] and rank_kind(m, a) == LOCAL:
            return True
        if isinstance(a, ast.stmt):
            return False
        child = a
    return False


def _with_ancestors(m, nodes: list) -> set[int]:
    out: set[int] = set()
    for n in nodes:
        out.add(id(n))
        for a in m.ancestors(n):
            if id(a) in out:
                break  # the rest of the chain is in already
            out.add(id(a))
    return out


def _has_mod(m, expr: ast.AST) -> bool:
    """``expr`` holds a ``%`` (``rank % gpus_per_node`` is a local index)."""
    return id(expr) in _holders(m)[1]


def _is_global_source(m, expr: ast.AST) -> bool:
    sources, mods = _holders(m)
    return id(expr) in sources and id(expr) not in mods  # rank % gpus_per_node is a local index


def _scope(m, node) -> int:
    fn = m.enclosing_function(node)
    return id(fn) if fn is not None else 0


def _global_names(m) -> set:
    return _global_assignments(m)[0]


def _global_assignments(m) -> tuple[set, dict[str, list[ast.Assign]]]:
    """The names given a global rank (a plain name keyed by its scope), and for an attribute
    (``args.local_rank``) the assignments that give it one; found once per file."""
    found = m.__dict__.get("_ddp402_globals")
    if found is not None:
        return found
    # only assignments that span a line with a rank source are worth a closer look
    lines = {c.lineno for c in m.dist_calls("get_rank", "get_global_rank") + _own_rank_getters(m)}
    lines |= {c.lineno for c in m.nodes(ast.Constant) if c.value in _GLOBAL_ENV}
    out: set = set()
    attr_defs: dict[str, list[ast.Assign]] = {}
    for node in m.nodes(ast.Assign):
        if not any(ln in lines for ln in range(node.lineno, (node.end_lineno or node.lineno) + 1)):
            continue
        if _is_global_source(m, node.value):
            for t in node.targets:
                name = dotted(t)
                if name and "." in name:
                    out.add(name)
                    attr_defs.setdefault(name, []).append(node)
                elif name:
                    out.add((_scope(m, node), name))
    found = m.__dict__["_ddp402_globals"] = (out, attr_defs)
    return found


def _before_global_def(m, use: ast.AST, name: str) -> bool:
    """``torch.cuda.set_device(args.local_rank)`` and only later, in the same function,
    ``args.local_rank = dist.get_rank()``: the use still sees the value from before (the launcher's
    local rank); uses after it, or in other functions, see the global one."""
    defs = _global_assignments(m)[1].get(name)
    if not defs:
        return False
    fn = m.enclosing_function(use)
    return all(m.enclosing_function(d) is fn and use.lineno < d.lineno for d in defs)


def _uses_global(m, expr: ast.AST, names: set, depth: int = 0) -> bool:
    call = expr if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) else None
    if call is not None and call.func.id in ("str", "int") and len(call.args) == 1:
        return _uses_global(m, call.args[0], names, depth)  # "cuda:" + str(rank)
    if _is_global_source(m, expr):
        return True
    if _has_mod(m, expr):
        return False
    if call is not None:
        return _returns_global(m, call, names, depth)
    name = dotted(expr)
    if not name:
        return False
    if "." not in name:
        reaching = _reaching_assignment(m, expr, name)
        if reaching is not None:  # the value this use sees: global only if that one is
            value = _value_of(m, reaching, name)
            return value is not None and (_is_global_source(m, value) or _uses_global(m, value, names, depth))
        if _parameter_is_global(m, expr, name, names, depth) or _rank_beside_local(m, expr, name):
            return True
        if (0, name) in names and _module_name_here(m, expr, name):
            return True
    if name in names and "." in name and _before_global_def(m, expr, name):
        return _global_option(m, name)
    if _constructor_attribute_is_global(m, expr, name, names, depth):
        return True
    return name in names or (_scope(m, expr), name) in names or _global_option(m, name)


def _module_name_here(m, use: ast.AST, name: str) -> bool:
    """``RANK = int(os.environ["RANK"])`` at module level, used in a function that neither takes nor
    assigns a ``RANK`` of its own (Python's scoping: then the name is the module's)."""
    fn = m.enclosing_function(use)
    while fn is not None:
        params = fn.args
        if any(a.arg == name for a in (*params.posonlyargs, *params.args, *params.kwonlyargs)):
            return False
        for n in ast.walk(fn):
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store):
                return False
        fn = m.enclosing_function(fn)
    return True


_MAX_CALL_DEPTH = 4  # callers (or callees) followed this far for a value


def _returns_global(m, call: ast.Call, names: set, depth: int) -> bool:
    """``get_gpu()`` where this file's only ``def get_gpu`` returns the global rank on every
    ``return`` (``return int(os.environ["RANK"])``)."""
    defs = [f for f in m.functions if f.name == call.func.id and not isinstance(f, ast.Lambda)]
    if len(defs) != 1 or depth >= _MAX_CALL_DEPTH:
        return False  # not ours, or two defs of one name: cannot tell which
    returns = [
        r.value for r in walk(defs[0]) if isinstance(r, ast.Return) and m.enclosing_function(r) is defs[0]
    ]
    return bool(returns) and all(v is not None and _uses_global(m, v, names, depth + 1) for v in returns)


def _rank_beside_local(m, use: ast.AST, name: str) -> bool:
    """``def train(..., local_rank=None, rank=None)``: a function that takes both tells them apart,
    so its ``rank`` (never rebound there) is the global one."""
    fn = m.enclosing_function(use)
    if fn is None or isinstance(fn, ast.Lambda) or name not in ("rank", "global_rank"):
        return False
    a = fn.args
    params = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    if name not in params or "local_rank" not in params:
        return False
    return not rebinds(fn, name)


def _beside_local_anywhere(m) -> bool:
    """A function of the file takes both a ``local_rank`` and a ``rank`` parameter."""
    for fn in m.functions:
        a = fn.args
        params = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
        if "local_rank" in params and ("rank" in params or "global_rank" in params):
            return True
    return False


def _parameter_is_global(m, use: ast.AST, name: str, names: set, depth: int) -> bool:
    """``def demo(rank): model.to(rank)`` called as ``demo(int(os.environ["RANK"]))``: a parameter
    holds the global rank when every call of its function in this file passes one (but those on a
    single-process arm, which pass a device of their own). A function that
    ``mp.spawn`` starts, or one this file never calls, gets its value from elsewhere: unknown, so no."""
    fn = m.enclosing_function(use)
    if fn is None or depth >= _MAX_CALL_DEPTH or isinstance(fn, ast.Lambda):
        return False
    params = [*fn.args.posonlyargs, *fn.args.args]
    index = next((i for i, a in enumerate(params) if a.arg == name), None)
    if index is None and not any(a.arg == name for a in fn.args.kwonlyargs):
        return False
    if any(c.args and (dotted(c.args[0]) or "").rsplit(".", 1)[-1] == fn.name for c in spawn_calls(m)):
        return False  # the spawned process index is the local rank by construction
    method = m.is_method(fn)
    if method and index is not None and params and params[0].arg in ("self", "cls"):
        index -= 1
    # a call on the arm a job takes only when it is not distributed (`else: train(rank=device)` of
    # `if args.parallel:`) passes what one process uses: the distributed calls decide
    sites = [c for c in m.call_sites(fn) if m.enclosing_function(c) is not fn and not single_process_arm(m, c)]
    if not sites:
        return False
    # ``Trainer(model, rank)`` runs ``Trainer.__init__``: the class's name is called, not a method
    constructor = method and fn.name == "__init__"
    for site in sites:
        if not constructor and isinstance(site.func, ast.Attribute) != method:
            return False  # a def of the same name elsewhere may be the one called: cannot tell
        arg = m.keyword(site, name)
        if arg is None and index is not None and 0 <= index < len(site.args):
            arg = site.args[index]
        if arg is None or isinstance(arg, ast.Starred):
            return False
        if not _uses_global(m, arg, names, depth + 1):
            return False
    m.__dict__.setdefault("_ddp402_passed", {})[(id(fn), name)] = sites[0].lineno
    return True


def _constructor_attribute_is_global(m, use: ast.AST, name: str, names: set, depth: int) -> bool:
    """``self.rank`` in a method, where the class's only assignment of it is ``self.rank = rank`` in
    ``__init__`` and every construction passes that parameter the global rank (``Trainer(model,
    dist.get_rank())``)."""
    head, _, attr = name.partition(".")
    if head != "self" or "." in attr or depth >= _MAX_CALL_DEPTH:
        return False
    fn = m.enclosing_function(use)
    cls = m.parents.get(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef):
        return False
    stores = [
        n for n in walk(cls)
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and n.attr == attr and dotted(n) == name
    ]
    if len(stores) != 1:
        return False  # set in two places (or never here): cannot tell which value a use sees
    assign = m.parents.get(stores[0])
    init = m.enclosing_function(stores[0])
    if (
        not isinstance(assign, ast.Assign)
        or assign.targets != [stores[0]]
        or not isinstance(assign.value, ast.Name)
        or init is None
        or getattr(init, "name", None) != "__init__"
        or m.parents.get(init) is not cls
        or rebinds(init, assign.value.id)
    ):
        return False
    if not _parameter_is_global(m, assign.value, assign.value.id, names, depth + 1):
        return False
    passed = m.__dict__.setdefault("_ddp402_passed", {})
    passed.setdefault((id(fn), name), passed.get((id(init), assign.value.id)))
    return True


def _passed_at(m, where: ast.AST, expr: ast.AST) -> int | None:
    """The line of the call that passed ``expr`` (a parameter) its global rank, if that is how."""
    fn = m.enclosing_function(where)
    if isinstance(expr, ast.Call) and expr.args:  # str(rank)
        expr = expr.args[0]
    name = dotted(expr)
    if fn is None or name is None:
        return None
    return m.__dict__.get("_ddp402_passed", {}).get((id(fn), name))


def _arms(m, node, fn) -> list[tuple[int, str]]:
    """(id of an if, "body"/"orelse") for each if between ``node`` and its function."""
    out = []
    child = node
    for a in m.ancestors(node):
        if a is fn:
            break
        if isinstance(a, ast.If) and child is not a.test:
            out.append((id(a), "body" if any(child is s for s in a.body) else "orelse"))
        elif isinstance(a, ast.ExceptHandler):
            # a fallback after a failure (``except: rank = 0``) is not what a working job sees
            out.append((id(a), "except"))
        child = a
    return out


def _value_of(m, assign: ast.Assign, name: str) -> ast.AST | None:
    """What ``assign`` gives ``name``: its value, or for ``rank, world = setup()`` the matching item
    of a tuple value, or of the tuple every ``return`` of this file's ``setup`` gives."""
    for t in assign.targets:
        if isinstance(t, ast.Name) and t.id == name:
            return assign.value
        if not isinstance(t, ast.Tuple):
            continue
        i = next((k for k, e in enumerate(t.elts) if isinstance(e, ast.Name) and e.id == name), None)
        if i is None or any(isinstance(e, ast.Starred) for e in t.elts):
            continue
        v = assign.value
        if isinstance(v, ast.Tuple) and len(v.elts) == len(t.elts):
            return v.elts[i]
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name):
            defs = [f for f in m.functions if f.name == v.func.id and not isinstance(f, ast.Lambda)]
            if len(defs) != 1:
                return None
            rets = [
                r.value for r in walk(defs[0]) if isinstance(r, ast.Return) and m.enclosing_function(r) is defs[0]
            ]
            items = [r.elts[i] for r in rets if isinstance(r, ast.Tuple) and len(r.elts) == len(t.elts)]
            if rets and len(items) == len(rets) and all(ast.dump(x) == ast.dump(items[0]) for x in items):
                return items[0]
            return None
    return None


def _reaching_assignment(m, use: ast.AST, name: str):
    """The last plain assignment to ``name`` before ``use`` in its function that every path to
    ``use`` passes (not one in another arm of an ``if``: ``if hvd: local_rank = hvd.local_rank()
    elif ...: local_rank = dist.get_rank()``); None when there is none to go by."""
    fn = m.enclosing_function(use)
    if fn is None:
        return None
    index = m.__dict__.get("_ddp402_assigns")
    if index is None:  # (function, name) -> its plain assignments, in one pass over the file
        index = m.__dict__["_ddp402_assigns"] = {}
        for a in m.nodes(ast.Assign):
            names = [t.id for t in a.targets if isinstance(t, ast.Name)]
            names += [e.id for t in a.targets if isinstance(t, ast.Tuple) for e in t.elts if isinstance(e, ast.Name)]
            if names:
                owner = id(m.enclosing_function(a))
                for n in names:
                    index.setdefault((owner, n), []).append(a)
    found = index.get((id(fn), name), ())
    if not found:
        return None
    use_arms = set(_arms(m, use, fn))
    best = None
    for a in found:
        if a.lineno >= use.lineno:
            continue
        if set(_arms(m, a, fn)) <= use_arms and (best is None or a.lineno > best.lineno):
            best = a
    return best


def _named_global(m, expr: ast.AST) -> bool:
    """``self.global_rank`` / ``cfg.world_rank``: named the global rank, and no assignment in this
    file says it holds something else (rank_kind reads the assignments before the name)."""
    name = dotted(expr)
    if name is None or name.rsplit(".", 1)[-1] not in _GLOBAL_NAMES:
        return False
    return rank_kind(m, expr) == GLOBAL


def _global_option(m, name: str) -> bool:
    """``args.rank`` where the argparse option is the global rank (``--rank``, no --local_rank)."""
    head, _, last = name.rpartition(".")
    if not head or head == "self":
        return False
    dest = m.argparse_dests().get(last)
    return dest is not None and dest.kind == "global"


def _device_exprs(m) -> list[tuple[ast.AST, ast.AST]]:
    """(where, the device index expression), found once per file: the rule goes over them three times."""
    found = m.__dict__.get("_ddp402_devices")
    if found is None:
        found = m.__dict__["_ddp402_devices"] = list(_find_device_exprs(m))
    return found


def _find_device_exprs(m):
    for call, q in m.calls:
        f = call.func
        # torch.accelerator.set_device_index: the device-generic set_device of torch >= 2.6
        if q in _SET_DEVICE and call.args:
            yield call, call.args[0]
        elif isinstance(f, ast.Attribute) and f.attr == "set_device" and len(call.args) == 1:
            # the device facades of other stacks: get_accelerator().set_device (DeepSpeed),
            # torch.xpu/npu.set_device: the same device index
            yield call, call.args[0]
        elif q == "torch.device" and len(call.args) == 2:
            yield call, call.args[1]
        elif q == "torch.device" and len(call.args) == 1 and not isinstance(call.args[0], ast.Constant):
            yield call, call.args[0]  # torch.device(i) with an int is cuda:i
        elif isinstance(f, ast.Attribute) and f.attr in ("cuda", "to") and len(call.args) == 1:
            yield call, call.args[0]
        # a keyword is reported at its own value: in a call written over several lines
        # (``DDP(model,\n device_ids=[rank],\n output_device=rank)``) that is the line to change
        for k in call.keywords:
            if (
                k.arg in ("device_ids",)
                and isinstance(k.value, (ast.List, ast.Tuple))
                and len(k.value.elts) == 1
            ):
                yield k.value, k.value.elts[0]
            elif k.arg in ("output_device", "device_id"):
                yield k.value, k.value
    # the whole string is the device (f"cuda:{rank}"), not a message that names one
    # (f"running on cuda:{rank}")
    for node in m.nodes(ast.JoinedStr):
        if (
            node.values
            and isinstance(node.values[0], ast.Constant)
            and str(node.values[0].value) == "cuda:"
            and len(node.values) == 2
        ):
            yield node, node.values[1].value
    # "cuda:%d" % rank, "cuda:{}".format(rank), "cuda:" + str(rank)
    if not m.mentions("cuda:"):
        return
    for node in m.nodes(ast.BinOp):
        left = node.left
        if isinstance(left, ast.Constant) and isinstance(left.value, str) and left.value == "cuda:":
            if isinstance(node.op, (ast.Mod, ast.Add)):
                yield node, node.right
        elif isinstance(left, ast.Constant) and isinstance(left.value, str) and left.value == "cuda:%d":
            yield node, node.right
    for call, _q in m.calls:
        f = call.func
        if (
            isinstance(f, ast.Attribute)
            and f.attr == "format"
            and isinstance(f.value, ast.Constant)
            and str(f.value.value) in ("cuda:{}", "cuda:{0}")
            and len(call.args) == 1
        ):
            yield call, call.args[0]


def _device_names(m, names: set) -> set:
    """Names assigned straight from a global rank name (``device = rank``), one step further."""
    out = set(names)
    if not names:
        return out
    for node in m.nodes(ast.Assign):
        if isinstance(node.value, (ast.Name, ast.Attribute)):
            src = dotted(node.value)
            if src and "." not in src:
                reaching = _reaching_assignment(m, node.value, src)
                if reaching is not None and not _is_global_source(m, reaching.value):
                    continue  # `args.local_rank = local_rank` after `local_rank = hvd.local_rank()`
            if src and (src in names or (_scope(m, node), src) in names):
                for t in node.targets:
                    name = dotted(t)
                    if name:
                        out.add(name if "." in name else (_scope(m, node), name))
    return out


def check(m):
    if m.one_process:  # init_process_group(world_size=1): no other rank to collide with
        return
    if m.single_node:  # every rank on this host: the global rank is the local one
        return
    yield from _named_global_devices(m)
    if not m.uses_distributed:
        return
    if (
        not m.dist_calls("get_rank", "get_global_rank")
        and not _own_rank_getters(m)
        and not any(c.value in _GLOBAL_ENV for c in m.nodes(ast.Constant))
        and not any(d.kind == "global" for d in m.argparse_dests().values())
        and not _beside_local_anywhere(m)
    ):
        return  # no global rank in this file: nothing can be used as a device index
    names = _device_names(m, _global_names(m))
    # one finding per value: `local_rank = dist.get_rank()` used for set_device, a device string and
    # a barrier's device_ids is one thing to change, reported at its first use with the others listed
    groups: dict[object, list[tuple[ast.AST, ast.AST]]] = {}
    seen = {where.lineno for where, expr in _device_exprs(m) if _named_global(m, expr)}
    for where, expr in _device_exprs(m):
        if _uses_global(m, expr, names) and where.lineno not in seen:
            seen.add(where.lineno)
            groups.setdefault(_value_key(m, expr), []).append((where, expr))
    for uses in groups.values():
        # at the use that picks the device for the rest: set_device, else the DDP wrap's
        # device_ids, else the first placement
        where, expr = min(uses, key=lambda u: (_choice_rank(m, u[0]), u[0].lineno, u[0].col_offset))
        passed = _passed_at(m, where, expr)
        via = f" (passed in by the call at line {passed})" if passed is not None else ""
        # the line of the rank itself: `device_ids=[rank]` inside a call that spans several lines
        more = sorted({e.lineno for _w, e in uses} - {where.lineno, expr.lineno})
        also = f"; the same value is used as a device at line{'s' if len(more) > 1 else ''} " + ", ".join(
            map(str, more)
        ) if more else ""
        chain = ([passed] if passed is not None else []) + [where.lineno] + more
        yield m.finding(
            CODE,
            where,
            f"`{ast.unparse(expr)}` is the global rank{via}, used as a CUDA device index: "
            f"on a second node it names a GPU that does not exist{also}",
            SEVERITY,
            hint="use the local rank (LOCAL_RANK from torchrun) for devices",
            **({"chain": chain} if len(chain) > 1 else {}),
        )
    yield from _global_into_other_files(m, names)


def _choice_rank(m, where: ast.AST) -> int:
    name = (dotted(where.func) or "") if isinstance(where, ast.Call) else ""
    if "set_device" in name:
        return 0
    if name.rsplit(".", 1)[-1] == "device" or isinstance(where, (ast.JoinedStr, ast.BinOp, ast.Constant)):
        return 1  # `device = torch.device(f"cuda:{rank}")`, a device string: used from there on
    parent = m.parents.get(where)
    return 2 if isinstance(parent, ast.keyword) and parent.arg == "device_ids" else 3


def _value_key(m, expr: ast.AST) -> object:
    """What a device expression's rank value is: the assignment that gives the name its value, the
    module's name, or the expression itself; one argument-free getter call (``get_rank()``) in one
    scope is one value however often it is called."""
    name = _bare_name(expr)
    if name is None:
        # `device = torch.device(f"cuda:{rank}")`: the assignment, which the later uses of
        # `device` reach too (one value, one finding)
        held = m.parents.get(expr)
        if isinstance(held, ast.Call) and expr in held.args:
            held = m.parents.get(held)  # (the string inside `torch.device(...)`)
        while isinstance(held, ast.IfExp):
            held = m.parents.get(held)  # (`torch.device(...) if torch.cuda.is_available() else ...`)
        if (
            isinstance(expr, (ast.JoinedStr, ast.BinOp, ast.Call))
            and isinstance(held, ast.Assign)
            and len(held.targets) == 1
            and isinstance(held.targets[0], ast.Name)
        ):
            return _assign_key(m, held)
        return _getter_text(m, expr) or dotted(expr) or id(expr)
    reaching = _reaching_assignment(m, expr, name) or _only_assignment_before(m, expr, name)
    if reaching is not None:
        return _assign_key(m, reaching)
    top = [a for a in m.tree.body if isinstance(a, ast.Assign) and any(dotted(t) == name for t in a.targets)]
    if len(top) == 1 and (getter := _getter_text(m, top[0].value)) is not None:
        return getter  # a module-level `device = torch.device(f"cuda:{get_rank()}")`
    if _module_name_here(m, expr, name):
        return ("module", name)
    return (_scope(m, expr), name)


def _assign_key(m, assign: ast.Assign) -> object:
    return _getter_text(m, assign.value) or id(assign)


def _getter_text(m, expr: ast.AST) -> tuple[str, str] | None:
    """The one argument-free call of a global-rank getter in ``expr`` (``get_rank()`` in
    ``set_device(get_rank())`` and in ``device = torch.device(f"cuda:{get_rank()}" if ... else
    "cpu")``), by its text and scope: the devices made from it there are one value, one finding."""
    found = {
        ast.unparse(n)
        for n in walk(expr)
        if isinstance(n, ast.Call) and not n.args and not n.keywords and _is_global_source(m, n)
    }
    return ("getter", _scope(m, expr), found.pop()) if len(found) == 1 else None


def _only_assignment_before(m, use: ast.AST, name: str):
    """The one assignment to ``name`` in ``use``'s function, when it comes before ``use``: one value
    even when the two sit under separate ``if config['DDP']:`` tests (one finding per value)."""
    fn = m.enclosing_function(use)
    if fn is None:
        return None
    _reaching_assignment(m, use, name)  # builds the index
    found = m.__dict__["_ddp402_assigns"].get((id(fn), name), ())
    return found[0] if len(found) == 1 and found[0].lineno < use.lineno else None


def _bare_name(expr: ast.AST) -> str | None:
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("str", "int"):
        expr = expr.args[0] if len(expr.args) == 1 else expr
    return expr.id if isinstance(expr, ast.Name) else None


def _global_into_other_files(m, names: set):
    """Project mode: the global rank handed to a function of another file that uses that parameter as
    a device index (``with zero_first(RANK):`` where ``zero_first(local_rank)`` calls
    ``dist.barrier(device_ids=[local_rank])``). Reported at the call here: the argument is what to
    change."""
    if m.project is None:
        return
    imported = m.project_imports
    for call, _q in m.calls:
        name = dotted(call.func)
        if not name or name.partition(".")[0] not in imported:
            continue  # not a name imported here: resolve() would find nothing
        # the arguments before the callee: most calls pass no global rank, and resolving one reads
        # and parses the other file
        bindable = [*itertools.takewhile(lambda a: not isinstance(a, ast.Starred), call.args)]
        bindable += [k.value for k in call.keywords if k.arg]
        global_args = {id(a) for a in bindable if _uses_global(m, a, names)}
        if not global_args:
            continue
        found = m.resolve(name)
        if found is None:
            continue
        other, fn = found
        if isinstance(fn, ast.Lambda) or other.is_method(fn):
            continue  # a method's first parameter is bound elsewhere: positions would not line up
        params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
        bound: dict[str, ast.AST] = {}
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred) or i >= len(params):
                break
            bound[params[i]] = arg
        bound.update({k.arg: k.value for k in call.keywords if k.arg})
        rank_params = {p: a for p, a in bound.items() if id(a) in global_args}
        if not rank_params:
            continue
        for where, expr in _device_exprs(other):
            param = _bare_name(expr)
            if param not in rank_params or other.enclosing_function(where) is not fn:
                continue
            if _reaching_assignment(other, expr, param) is not None:
                continue  # the helper gives the name another value before it uses it
            there = f"{other.path.rsplit('/', 1)[-1]}:{where.lineno}"
            yield m.finding(
                CODE,
                call,
                f"`{ast.unparse(rank_params[param])}` is the global rank, passed to `{name}` as "
                f"`{param}`, which uses it as a CUDA device index at {there}: on a second node it "
                "names a GPU that does not exist",
                SEVERITY,
                hint="pass the local rank (LOCAL_RANK from torchrun)",
            )
            break


def _named_global_devices(m):
    """A device index named the global rank: the name is the evidence, so no rank source needs to be
    in this file (the field is filled by a config or base class elsewhere)."""
    seen = set()
    for where, expr in _device_exprs(m):
        if where.lineno not in seen and _named_global(m, expr):
            seen.add(where.lineno)
            yield m.finding(
                CODE,
                where,
                f"`{ast.unparse(expr)}` is the global rank, used as a CUDA device index: on a second "
                "node it names a GPU that does not exist",
                SEVERITY,
                hint="use the local rank (LOCAL_RANK from torchrun) for devices",
            )
