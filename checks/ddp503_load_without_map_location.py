"""DDP503: torch.load without map_location in distributed code.

## What it does
Finds `torch.load(path)` with no `map_location` in a script that sets up torch.distributed or DDP.
Not in code only a non-distributed job runs, nor in a class of a trainer module that nothing in the
file ties to its distributed code (a sibling trainer that overrides the DDP one's loop).

## Why is this bad?
Tensors are restored onto the device they were saved from — usually `cuda:0`. Every rank then
allocates the whole checkpoint on GPU 0: memory spikes on one GPU, out-of-memory errors, and a
slow start while it all funnels through one device.

## Example
```python
ckpt = torch.load("ckpt.pt")
```

## Use instead
```python
ckpt = torch.load("ckpt.pt", map_location="cpu")   # or {"cuda:0": f"cuda:{local_rank}"}
```
"""

from __future__ import annotations

import ast
from bisect import bisect_left

from ddpdoctor.script.foreign import callee, foreign_events, guarded_on_the_way, reported_there
from ddpdoctor.script.names import dotted
from ddpdoctor.script.ranks import pins_one_gpu_per_process, single_process_only
from ddpdoctor.script.writers import other_ranks_arm, per_process_path

CODE = "DDP503"
TITLE = "torch.load without map_location"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def _in_dataset_class(m, call) -> bool:
    """The load is a method of a Dataset (a class named ``*Dataset`` by its base, or one with
    ``__getitem__``): it reads the data the class serves, files made by a preprocessing step, not a
    checkpoint saved from a training GPU. Which device their tensors were saved from is unknown, so
    the load is not called wrong."""
    for a in m.ancestors(call):
        if isinstance(a, ast.ClassDef):
            bases = [(dotted(b) or "").rsplit(".", 1)[-1] for b in a.bases]
            methods = {n.name for n in a.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            return any(b.endswith("Dataset") for b in bases) or "__getitem__" in methods
    return False


def _downloaded_here(m, call) -> bool:
    """The file was fetched from the web by the same function just before (``download_url_to_file(url,
    p)`` then ``torch.load(p)``): published weights, not a checkpoint this job saved from its GPUs.
    Which device their tensors were saved from is unknown, so the load is not called wrong."""
    target = call.args[0] if call.args else m.keyword(call, "f")
    if target is None:
        return False
    text = ast.unparse(target)
    scope = m.enclosing_function(call) or m.tree
    for n in ast.walk(scope):
        if isinstance(n, ast.Call) and n.lineno < call.lineno:
            name = (dotted(n.func) or "").rsplit(".", 1)[-1].lower()
            if ("download" in name or name == "urlretrieve") and any(
                ast.unparse(a) == text for a in (*n.args, *(k.value for k in n.keywords))
            ):
                return True
    return False


_SIGN_WORDS = ("distributed", "ddp", "rank", "world_size", "is_main", "is_master")


def _distributed_sign(m, node: ast.AST) -> bool:
    """The code of ``node`` (a def or class) names distributed state: ``torch.distributed`` (under
    any alias), a DDP wrapper, a rank, the world."""
    lines = m.__dict__.get("_ddp503_sign_lines")
    if lines is None:  # the lines of every such name, in one pass over the file
        found = set()
        for n in m.nodes(ast.Name):
            if _sign_word(n.id) or (m.qualname(n) or "").startswith("torch.distributed"):
                found.add(n.lineno)
        for n in m.nodes(ast.Attribute):
            if _sign_word(n.attr):
                found.add(n.lineno)
        lines = m.__dict__["_ddp503_sign_lines"] = sorted(found)
    k = bisect_left(lines, node.lineno)
    return k < len(lines) and lines[k] <= node.end_lineno


def _sign_word(word: str) -> bool:
    low = word.lower()
    return any(w in low for w in _SIGN_WORDS)


def _self_calls(m) -> dict[int, set[str]]:
    """id(def) -> the names it calls as ``self.name(...)``."""
    out = m.__dict__.get("_ddp503_self_calls")
    if out is None:
        out = m.__dict__["_ddp503_self_calls"] = {}
        for c, _q in m.calls:
            f = c.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                fn = m.enclosing_function(c)
                if fn is not None:
                    out.setdefault(id(fn), set()).add(f.attr)
    return out


def _class_apart_from_distributed(m, call) -> bool:
    """In a file whose distributed code sits in other classes (a trainer module: a DDP-aware
    ``Trainer`` and ``GANTrainer`` subclasses that override its training loop), a load in a class
    whose own code, and every method its method calls or is called from (through ``self``, over
    the file's base classes, construction aside), never names distributed state, and that no code of
    the file outside class statements uses: nothing shows that this class runs under DDP, so the
    load is not called a distributed one."""
    cls = next((a for a in m.ancestors(call) if isinstance(a, ast.ClassDef)), None)
    fn = m.enclosing_function(call)
    if cls is None or fn is None or m.parents.get(fn) is not cls or _distributed_sign(m, cls):
        return False
    names = m.__dict__.get("_ddp503_names")
    if names is None:  # name -> its Name nodes, in one pass over the file
        names = m.__dict__["_ddp503_names"] = {}
        for n in m.nodes(ast.Name):
            names.setdefault(n.id, []).append(n)
    if any(
        not _in_bases(m, n) and not cls.lineno <= n.lineno <= cls.end_lineno for n in names.get(cls.name, ())
    ):
        return False  # built or handed around by this file's own code: it runs where that runs
    classes = {c.name: c for c in m.nodes(ast.ClassDef)}
    if any(_distributed_sign(m, sub) for sub in _heirs(classes, cls, fn.name)):
        return False  # a subclass that runs under DDP inherits this method
    lineage, todo = [], [cls]
    while todo:  # the class and its bases defined in this file
        c = todo.pop()
        if c in lineage:
            continue
        lineage.append(c)
        todo += [classes[b.id] for b in c.bases if isinstance(b, ast.Name) and b.id in classes]
    methods: dict[str, ast.AST] = {}
    for c in reversed(lineage):  # the class's own override wins
        methods.update({d.name: d for d in c.body if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))})
    methods.pop("__init__", None)
    by_def = _self_calls(m)
    calls = {name: by_def.get(id(d), set()) for name, d in methods.items()}
    seen, todo = set(), [fn.name]
    while todo:  # callees and callers through self, both ways
        name = todo.pop()
        if name in seen or name not in methods:
            continue
        seen.add(name)
        if _distributed_sign(m, methods[name]):
            return False
        todo += list(calls[name]) + [other for other, called in calls.items() if name in called]
    return True


def _heirs(classes: dict, cls: ast.ClassDef, method: str) -> list[ast.ClassDef]:
    """The file's subclasses of ``cls``, transitively, that inherit ``method`` (do not override it)."""
    out, todo = [], [cls]
    while todo:
        base = todo.pop()
        for c in classes.values():
            if c not in out and any(isinstance(b, ast.Name) and b.id == base.name for b in c.bases):
                if not any(isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)) and d.name == method
                           for d in c.body):
                    out.append(c)
                    todo.append(c)
    return out


def _in_bases(m, node: ast.AST) -> bool:
    parent = m.parents.get(node)
    return isinstance(parent, ast.ClassDef) and node in parent.bases


def _unmapped(m, call) -> bool:
    return (
        len(call.args) < 2
        and m.keyword(call, "map_location") is None
        and not any(k.arg is None for k in call.keywords)
        # a file of this rank's own (`queue{rank}.pth`) was saved from this rank's device:
        # it comes back there, not onto cuda:0
        and not per_process_path(call.args[0] if call.args else m.keyword(call, "f"), m)
        # the arm a job takes only when it is not distributed (the `else` of `if args.distributed:`):
        # one process, nothing crowds onto another rank's GPU
        and not single_process_only(m, call)
        and not _in_dataset_class(m, call)
        and not _downloaded_here(m, call)
        and not _class_apart_from_distributed(m, call)
        and not _moved_at_once(m, call)
    )


def _moved_at_once(m, call) -> bool:
    """``torch.load("mean.pt").cuda()``: one tensor, moved by the code that loads it (a checkpoint is a
    dict and has no ``.cuda()``); what crowds a GPU is a checkpoint, not a small saved tensor."""
    parent = m.parents.get(call)
    return (
        isinstance(parent, ast.Attribute)
        and parent.attr in ("cuda", "to")
        and isinstance(m.parents.get(parent), ast.Call)
    )


def check(m):
    if m.one_process:  # init_process_group(world_size=1): no other rank to collide with
        return
    if not m.distributed_context:
        return
    if pins_one_gpu_per_process(m):
        return  # each process sees its own GPU alone, as cuda:0: nothing crowds onto another's
    yield from _loads_in_other_files(m)
    for call in m.calls_named("torch.load"):
        # one rank loading crowds nothing; the `else` of `if rank == 0` is every other rank
        if (m.rank_guard(call) is None or other_ranks_arm(m, call) is not None) and _unmapped(m, call):
            yield m.finding(
                CODE,
                call,
                "`torch.load` without `map_location` in a distributed script: every rank "
                "loads the tensors onto the GPU they were saved from (usually cuda:0)",
                SEVERITY,
                hint="pass map_location='cpu' or the rank's own device",
            )


def _loads_in_other_files(m):
    """Project mode: ``torch.load`` without ``map_location`` in another file (a checkpoint helper with
    no distributed code of its own) that several ranks reach through a call here. One finding per
    call here, naming every such load it leads to."""
    by_anchor: dict[int, list] = {}
    for fe in foreign_events(m, "load"):
        load, other = fe.event.node, fe.other
        if not isinstance(load, ast.Call) or not _unmapped(other, load) or guarded_on_the_way(m, fe):
            continue
        if not any(len(ranks) > 1 for _run, ranks in fe.reach):
            continue
        if reported_there(check, other, load):
            continue
        by_anchor.setdefault(id(fe.anchor), []).append(fe)
    for found in by_anchor.values():
        first = found[0]
        name = callee(first)
        places = sorted({(fe.other.path.rsplit("/", 1)[-1], fe.event.node.lineno) for fe in found})
        wheres = [f"{file}:{line}" for file, line in places]
        loads = f"its `torch.load` at {wheres[0]} has" if len(wheres) == 1 else (
            f"its `torch.load` calls at {', '.join(wheres)} have"
        )
        yield m.finding(
            CODE,
            first.anchor,
            f"every rank calls `{name}` here, and {loads} no `map_location`: every rank loads the "
            f"tensors onto the GPU they were saved from, usually cuda:0 ({m.event_chain(first.event)})",
            SEVERITY,
            hint="pass map_location='cpu' or the rank's own device there",
            cause=" ".join(sorted({f"{fe.other.path}:{fe.event.node.lineno}" for fe in found})),
        )
