"""DDP503: torch.load without map_location in distributed code.

## What it does
Finds `torch.load(path)` with no `map_location` in a script that sets up torch.distributed or DDP.
Not in code only a non-distributed job runs, nor where the load restores a learning-rate scheduler
(`scheduler.load_state_dict(torch.load(path))`: plain numbers, no tensors), nor in a class of a
trainer module that nothing in the file ties to its distributed code (a sibling trainer that
overrides the DDP one's loop).

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

from ddpdoctor.script.apart import class_apart_from_distributed
from ddpdoctor.script.foreign import callee, foreign_events, guarded_on_the_way, reported_there
from ddpdoctor.script.names import dotted
from ddpdoctor.script.ranks import pins_one_gpu_per_process, single_process_only
from ddpdoctor.script.writers import other_ranks_arm, parent_only, per_process_path

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
    cls = next((a for a in m.ancestors(call) if isinstance(a, ast.ClassDef)), None)
    return cls is not None and _serves_items(cls)


def _serves_items(cls: ast.ClassDef) -> bool:
    """A Dataset: a class derived from one (``*Dataset``) or with ``__getitem__``."""
    bases = [(dotted(b) or "").rsplit(".", 1)[-1] for b in cls.bases]
    methods = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return any(b.endswith("Dataset") for b in bases) or "__getitem__" in methods


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
        and not class_apart_from_distributed(m, call)
        and not _moved_at_once(m, call)
        and not _feeds_a_dataset(m, call)
        and not _restores_a_scheduler(m, call)
    )


def _restores_a_scheduler(m, call) -> bool:
    """``scheduler.load_state_dict(torch.load(path))``: a learning-rate scheduler's state is plain
    numbers (epoch counts, rates), no tensors to land on any GPU."""
    parent = m.parents.get(call)
    if not (
        isinstance(parent, ast.Call)
        and call in parent.args
        and isinstance(parent.func, ast.Attribute)
        and parent.func.attr == "load_state_dict"
    ):
        return False
    owner = (dotted(parent.func.value) or "").rsplit(".", 1)[-1].lower()
    return "sched" in owner


def _feeds_a_dataset(m, call) -> bool:
    """What is loaded is handed to a Dataset (``enc = torch.load("encodings.pt")`` then
    ``QADataset(enc)``): data a preprocessing step saved, not a checkpoint from a training GPU, as
    for a load inside a Dataset class."""
    name = m.assigned_to(call)
    if name is None:
        return False
    classes = m.nodes(ast.ClassDef)
    for other, _q in m.calls:
        callee = (dotted(other.func) or "").rsplit(".", 1)[-1]
        if not (callee.endswith("Dataset") or any(c.name == callee and _serves_items(c) for c in classes)):
            continue
        if any(dotted(_root(a)) == name for a in (*other.args, *(k.value for k in other.keywords))):
            return True
    return False


def _root(arg: ast.AST) -> ast.AST:
    """What an argument is cut from: ``*data["train"]`` and ``data["train"]`` are parts of ``data``."""
    while isinstance(arg, (ast.Starred, ast.Subscript)):
        arg = arg.value
    return arg


def _moved_at_once(m, call) -> bool:
    """``torch.load("mean.pt").cuda()``: one tensor, moved by the code that loads it (a checkpoint is a
    dict and has no ``.cuda()``); what crowds a GPU is a checkpoint, not a small saved tensor."""
    parent = m.parents.get(call)
    return (
        isinstance(parent, ast.Attribute)
        and parent.attr in ("cuda", "to")
        and isinstance(m.parents.get(parent), ast.Call)
    )


# words without which a trainer puts nothing on a GPU and names none
_GPU_WORDS = ("cuda", "CUDA", "device", "Device", "gpu", "GPU", "nccl")


def check(m):
    if m.one_process:  # init_process_group(world_size=1): no other rank to collide with
        return
    if not m.distributed_context:
        return
    if pins_one_gpu_per_process(m):
        return  # each process sees its own GPU alone, as cuda:0: nothing crowds onto another's
    if (m.ddp_constructors or m.dist_calls("init_process_group")) and not m.mentions(*_GPU_WORDS):
        return  # a trainer that puts nothing on a GPU (gloo, CPU): what it saves comes back on the CPU
    yield from _loads_in_other_files(m)
    for call in m.calls_named("torch.load"):
        # one rank loading crowds nothing; the `else` of `if rank == 0` is every other rank
        if parent_only(m, call):
            continue  # the spawning parent, one process, before the workers start or after they end
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
