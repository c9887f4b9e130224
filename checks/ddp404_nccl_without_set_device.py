"""DDP404: NCCL without torch.cuda.set_device.

## What it does
Finds `init_process_group` with the NCCL backend in a script that never calls
`torch.cuda.set_device` (and passes no `device_id=`), and a script that starts a process group and
puts its model on the GPU with an unindexed `.cuda()` / `"cuda"` while picking no device anywhere
(no `set_device`, no `device_ids=`, no `cuda:<i>`, no `CUDA_VISIBLE_DEVICES`): every rank then
lands on GPU 0. A device such as `torch.device("cuda" if ok else "cpu")` counts as unindexed wherever
it goes (names, attributes, a trainer's arguments). Also a worker that puts some work on a GPU by a
per-rank index (`.cuda(rank)`, `device_ids=[rank]`, `f"cuda:{rank}"`) and other work on the current
GPU (`batch.cuda()`) without ever calling `set_device`: the finding points at the first such move
that every rank runs (a move under `if rank == 0:` is right, GPU 0 is rank 0's own).

An NCCL process group with no `set_device` is reported where something then works on the current
GPU (an unindexed `.cuda()`, an object collective, `torch.cuda.current_device()`).

## Why is this bad?
PyTorch puts the current CUDA device's work there: an unindexed `.cuda()`, object collectives
(`all_gather_object`, `broadcast_object_list`), `torch.cuda.current_device()`. Without
`set_device`, every rank's current device is GPU 0: ranks create contexts on GPU 0, their object
collectives meet there, and GPU 0 runs out of memory.

## Example
```python
dist.init_process_group("nccl")
model = DDP(model.to(f"cuda:{local_rank}"), device_ids=[local_rank])
```

## Use instead
```python
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.backends import nccl_only
from ddpdoctor.script.flow import Flow
from ddpdoctor.script.names import dotted
from ddpdoctor.script.ranks import single_process_arm

CODE = "DDP404"
TITLE = "NCCL without set_device"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


_PICKS = ("set_device", "CUDA_VISIBLE_DEVICES", "torch.cuda.device(", "set_device_index", "device_ids")


def _bare_device(m, e: ast.AST | None) -> bool:
    """``e`` names the current GPU with no index: ``"cuda"``, ``torch.device("cuda")``, and
    ``"cuda" if cuda_ok else "cpu"`` (a CPU fallback picks no GPU either)."""
    if isinstance(e, ast.Constant):
        return e.value == "cuda"
    if isinstance(e, ast.IfExp):
        arms = (e.body, e.orelse)
        return any(_bare_device(m, a) for a in arms) and all(
            _bare_device(m, a) or (isinstance(a, ast.Constant) and a.value == "cpu") for a in arms
        )
    if isinstance(e, ast.Call) and m.qualname(e.func) == "torch.device":
        return len(e.args) == 1 and not e.keywords and _bare_device(m, e.args[0])
    return False


def _bare_devices(m) -> Flow:
    """Where a device with no index goes: ``device = torch.device("cuda")``, ``self.device = device``."""
    return Flow(m, [c for c, _q in m.calls if _bare_device(m, c)])


def _placements(m, bare: Flow):
    """(call, indexed) for each ``.cuda(...)``, ``.to(...)`` and ``torch.device(...)`` that puts work on
    a GPU: indexed when it names one (``.cuda(rank)``, ``.to(device)`` with a device from elsewhere),
    not when it means the current one (``.cuda()``, ``.to("cuda")``, ``.to(device)`` with a device
    that has no index)."""
    for call, q in m.calls:
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr == "cuda":
            first = call.args[0] if call.args else m.keyword(call, "device")
            if first is None:
                yield call, False
            elif not isinstance(first, ast.Constant):
                yield call, not (bare.carries(first) or _bare_device(m, first))
        elif _bare_device(m, call):
            yield call, False
        elif isinstance(f, ast.Attribute) and f.attr == "to" and call.args:
            first = call.args[0]
            if bare.carries(first) or _bare_device(m, first):
                yield call, False
            elif not isinstance(first, ast.Constant):
                yield call, True
        elif q == "torch.device" and len(call.args) > 1:
            yield call, True
        elif (dev := m.keyword(call, "device")) is not None and (bare.carries(dev) or _bare_device(m, dev)):
            # `torch.zeros(n, device="cuda")`, `Model(..., device="cuda")`: made on the current GPU
            yield call, False


def _per_rank_sites(m, bare: Flow) -> list[ast.AST]:
    """Work sent to a GPU named by a per-process index: ``device_ids=[rank]``, ``.cuda(rank)``,
    ``torch.device("cuda", rank)``, ``f"cuda:{rank}"``, ``.to(local_rank)``. A device handed in from
    elsewhere (``.to(device)``) does not count: whoever made it may have called set_device."""
    out: list[ast.AST] = []
    for call, q in m.calls:
        ids = m.keyword(call, "device_ids")
        if isinstance(ids, (ast.List, ast.Tuple)) and any(not isinstance(e, ast.Constant) for e in ids.elts):
            out.append(call)
            continue
        f = call.func
        first = call.args[0] if call.args else None
        if isinstance(f, ast.Attribute) and f.attr == "cuda" and first is not None:
            if not isinstance(first, ast.Constant) and not bare.carries(first) and not _bare_device(m, first):
                out.append(call)
                continue
        if q == "torch.device" and len(call.args) > 1 and not isinstance(call.args[1], ast.Constant):
            out.append(call)
        elif isinstance(f, ast.Attribute) and f.attr == "to" and first is not None and m.rank_kind(first):
            out.append(call)
    for s in m.nodes(ast.JoinedStr):
        head = s.values[0] if s.values else None
        if isinstance(head, ast.Constant) and str(head.value).endswith("cuda:") and len(s.values) > 1:
            out.append(s)
    return out


def _statement(m, node: ast.AST) -> ast.AST | None:
    return next((a for a in (node, *m.ancestors(node)) if isinstance(a, ast.stmt)), None)


def _alternatives(m, a: ast.AST, b: ast.AST) -> bool:
    """``a`` and ``b`` give the same variable its value on different arms of one ``if`` (``device =
    torch.device("cuda")`` when GPUs are scarce, else ``device = torch.device(f"cuda:{rank}")``):
    a run takes one of them, so the two never hold work at the same time."""
    sa, sb = _statement(m, a), _statement(m, b)
    if not (isinstance(sa, ast.Assign) and isinstance(sb, ast.Assign)) or sa is sb:
        return False
    if [dotted(t) for t in sa.targets] != [dotted(t) for t in sb.targets]:
        return False
    above_b = {id(x): x for x in m.ancestors(sb)}
    child = sa
    for up in m.ancestors(sa):
        if id(up) in above_b:
            if not isinstance(up, ast.If):
                return False
            b_child = next(x for x in (sb, *m.ancestors(sb)) if m.parents.get(x) is up)
            return (child in up.body) != (b_child in up.body)
        child = up
    return False


def _picks_somewhere(m) -> bool:
    """Any sign of a per-rank device: an index given to .cuda()/.to()/torch.device, a "cuda:" string,
    a device variable handed in from elsewhere."""
    if m.mentions(*_PICKS, "cuda:", "device_id", "LOCAL_RANK", "local_rank", "accelerator"):
        return True
    # .to(device): a device chosen somewhere we cannot see, unless it is a bare "cuda"
    return any(indexed for _call, indexed in _placements(m, _bare_devices(m)))


def _rank0_only(m, node) -> bool:
    """Code one process runs on its own GPU: under a rank-0 test, or in the single-process arm
    (``else`` of ``if args.distributed:``) where there is no other rank."""
    if m.guarded_by_rank(node) or single_process_arm(m, node):
        return True
    fn = m.enclosing_function(node)
    return fn is not None and m.callers_all_guarded(fn)


def _first_current(m, bare: Flow) -> ast.AST | None:
    """Where work first goes to the current GPU on every rank: a device made without an index
    (the line to change) before the first bare move. Code only rank 0 runs does not count: its
    current GPU is its own."""
    current = [c for c, indexed in _placements(m, bare) if not indexed and not _rank0_only(m, c)]
    made = [c for c in current if _bare_device(m, c)]
    return (made or current or [None])[0]


_SELECTS = ("set_device", "set_device_index")


def _selects(m, node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _last_name(node.func) in _SELECTS


def _last_name(e: ast.AST) -> str | None:
    name = dotted(e)
    return name.rsplit(".", 1)[-1] if name else None


def _arm_without_device(m, bare: Flow):
    """(bare move, its ``if``) where ``set_device`` is called in one arm of an ``if`` only and the
    other arm wraps a DDP model after moving work to the current GPU (``if args.gpu is not None:
    set_device(args.gpu) ... else: model.cuda(); DDP(model)``): on that path every rank is on GPU 0.
    Nothing when any ``set_device`` runs unconditionally."""
    selects = [c for c, _q in m.calls if _selects(m, c)]
    if not selects or any(not any(isinstance(a, ast.If) for a in m.ancestors(c)) for c in selects):
        return None
    ddp = {id(c) for c in m.ddp_constructors}
    moves = {id(c): c for c, indexed in _placements(m, bare) if not indexed}
    for node in m.nodes(ast.If):
        if not node.orelse or not any(_selects(m, n) for st in node.body for n in ast.walk(st)):
            continue
        other = [n for st in node.orelse for n in ast.walk(st)]
        if any(_selects(m, n) for n in other) or not any(id(n) in ddp for n in other):
            continue
        move = next((n for n in other if id(n) in moves), None)
        if move is not None:
            return move, node
    return None


# collectives that work on the current CUDA device rather than on the device of a tensor given
_ON_CURRENT_DEVICE = ("broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list")


def _uses_current_device(m) -> bool:
    """Something in the file works on the current GPU: an object collective or
    ``torch.cuda.current_device()``. A script that places every tensor and its DDP model by index
    and calls none of these is not hurt by GPU 0 being every rank's current one."""
    # (a `barrier()` with no `device_ids` is not counted: NCCL then uses the device this group
    # already worked on, else rank % GPUs, as torch 2.13's barrier() documents)
    return bool(m.dist_calls(*_ON_CURRENT_DEVICE) or m.calls_named("torch.cuda.current_device"))


def check(m):
    if m.one_process:  # init_process_group(world_size=1): one process, its GPU 0 is its own
        return
    if m.mentions("CUDA_VISIBLE_DEVICES", "torch.cuda.device("):
        return
    if m.mentions("set_device"):  # also set_device_index
        found = _arm_without_device(m, _bare_devices(m))
        if found is not None:
            move, branch = found
            yield m.finding(
                CODE,
                move,
                f"on this path no GPU is ever selected (`set_device` is called only when the test on "
                f"line {branch.lineno} holds), so this goes to GPU 0 on every rank and the DDP model "
                "of every rank lives there",
                SEVERITY,
                hint="select the device on every distributed path: `torch.cuda.set_device(local_rank)`"
                " with local_rank from LOCAL_RANK",
            )
        return
    inits = m.dist_calls("init_process_group")
    if not inits or any(m.keyword(c, "device_id") is not None for c in inits):
        return
    bare = _bare_devices(m)
    where = _first_current(m, bare)
    if where is not None and not _picks_somewhere(m):
        yield m.finding(
            CODE,
            where,
            f"every rank puts its work on the current GPU here and none ever picks its own (process "
            f"group at line {inits[0].lineno}): all ranks share GPU 0 while the others idle",
            SEVERITY,
            hint="`torch.cuda.set_device(int(os.environ['LOCAL_RANK']))` before init_process_group",
        )
        return
    for call in inits:
        if nccl_only(m, call) and (where is not None or _uses_current_device(m)):
            # a group started by a helper: reported at the first place every rank puts work on
            # the current GPU, in the code that calls the helper (the helper's line is not where
            # the user looks, and other callers of it may select a device first)
            moved = where is not None and m.enclosing_function(where) is not m.enclosing_function(call)
            yield m.finding(
                CODE,
                where if moved else call,
                f"NCCL process group (line {call.lineno}), but the script never calls "
                "`torch.cuda.set_device`: every rank's current device is GPU 0"
                + (
                    ", and this puts its work there"
                    if moved
                    else f", where line {where.lineno} puts work on every rank"
                    if where is not None and where.lineno != call.lineno
                    else ""
                ),
                SEVERITY,
                hint="call `torch.cuda.set_device(local_rank)` before init_process_group",
            )
            return
    sites = _per_rank_sites(m, bare) if where is not None else []
    if sites and not all(_alternatives(m, where, site) for site in sites):
        yield m.finding(
            CODE,
            where,
            "this goes to the current GPU, which is GPU 0 on every rank: the script gives other work "
            "a per-rank GPU index but never calls `torch.cuda.set_device`, so on every rank but the "
            "first the two live on different GPUs",
            SEVERITY,
            hint="call `torch.cuda.set_device(local_rank)` before init_process_group (or give this "
            "call the same index)",
        )
