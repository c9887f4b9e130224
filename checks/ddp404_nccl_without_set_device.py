"""DDP404: NCCL without torch.cuda.set_device.

## What it does
Finds `init_process_group` with the NCCL backend in a script that never calls
`torch.cuda.set_device` (and passes no `device_id=`), and a script that starts a process group and
puts its model on the GPU with an unindexed `.cuda()` / `"cuda"` while picking no device anywhere
(no `set_device`, no `device_ids=`, no `cuda:<i>`, no `CUDA_VISIBLE_DEVICES`): every rank then
lands on GPU 0. Also a script that puts its model on the rank's GPU by index (`.cuda(rank)`,
`device_ids=[rank]`) but moves batches in its loop with an unindexed `.cuda()`, with no `set_device`.

## Why is this bad?
NCCL and PyTorch use the *current* CUDA device for communicators, `barrier()` and object
collectives. Without `set_device`, every rank's current device is GPU 0: ranks create contexts on
GPU 0, `barrier()` may hang or use the wrong GPU, and GPU 0 runs out of memory.

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

CODE = "DDP404"
TITLE = "NCCL without set_device"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def _nccl(m, call: ast.Call) -> bool:
    expr = m.keyword(call, "backend") or (call.args[0] if call.args else None)
    if expr is None:
        return False
    texts = [n.value for n in ast.walk(expr) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    if isinstance(expr, ast.Name):  # backend = "nccl" assigned somewhere in the file
        for node in m.nodes(ast.Assign):
            if any(isinstance(t, ast.Name) and t.id == expr.id for t in node.targets):
                texts += [
                    n.value
                    for n in ast.walk(node.value)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                ]
    return any("nccl" in t.lower() for t in texts) and not any("gloo" in t.lower() for t in texts)


_PICKS = ("set_device", "CUDA_VISIBLE_DEVICES", "torch.cuda.device(", "set_device_index", "device_ids")


def _unindexed_cuda(m) -> ast.AST | None:
    """The first ``.cuda()`` or ``.to("cuda")`` / ``torch.device("cuda")``: the current device."""
    for call, q in m.calls:
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr == "cuda" and not call.args and not call.keywords:
            return call
        to_cuda = q == "torch.device" or (isinstance(f, ast.Attribute) and f.attr == "to")
        if (
            to_cuda
            and len(call.args) == 1
            and isinstance(call.args[0], ast.Constant)
            and call.args[0].value == "cuda"
        ):
            return call
    return None


def _picks_somewhere(m) -> bool:
    """Any sign of a per-rank device: an index given to .cuda()/.to()/torch.device, a "cuda:" string,
    a device variable handed in from elsewhere."""
    if m.mentions(*_PICKS, "cuda:", "device_id", "LOCAL_RANK", "local_rank", "accelerator"):
        return True
    for call, q in m.calls:
        f = call.func
        moved = isinstance(f, ast.Attribute) and f.attr in ("cuda", "to") and call.args
        if moved and not isinstance(call.args[0], ast.Constant):
            return True  # .to(device): a device chosen somewhere we cannot see
        if q == "torch.device" and len(call.args) > 1:
            return True
    return False


def _indexed_placement(m) -> ast.AST | None:
    """The first placement on a GPU picked per process: ``.cuda(rank)``, ``.to(local_rank)``,
    ``device_ids=[rank]`` with a rank (not a constant, not a device object)."""
    for call, _q in m.calls:
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr in ("cuda", "to") and len(call.args) == 1:
            if m.rank_kind(call.args[0]) is not None:
                return call
        ids = m.keyword(call, "device_ids")
        if isinstance(ids, (ast.List, ast.Tuple)) and len(ids.elts) == 1 and m.rank_kind(ids.elts[0]):
            return call
    return None


def _in_loop(m, node) -> bool:
    for a in m.ancestors(node):
        if isinstance(a, (ast.For, ast.AsyncFor, ast.While)):
            return True
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return False
    return False


def _unindexed_in_loop(m) -> ast.Call | None:
    """The first ``x.cuda()`` in a loop (a batch moved each step): it goes to the current device."""
    for call, _q in m.calls:
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr == "cuda" and not call.args and not call.keywords:
            if _in_loop(m, call):
                return call
    return None


def _mixed_placement(m):
    """The model goes to the rank's GPU by index, the batches by `.cuda()` to the current device,
    which no set_device ever changes: GPU 0 on every rank, next to a model on another GPU."""
    if not (m.dist_calls("init_process_group") or m.ddp_constructors):
        return
    placed, moved = _indexed_placement(m), _unindexed_in_loop(m)
    if placed is not None and moved is not None:
        yield m.finding(
            CODE,
            moved,
            f"`{ast.unparse(moved)}` moves data to the current GPU, which is GPU 0 on every rank: "
            f"nothing calls `torch.cuda.set_device`, while line {placed.lineno} puts the model on "
            "the rank's own GPU",
            SEVERITY,
            hint="call `torch.cuda.set_device(local_rank)` first, or move data with "
            "`.cuda(local_rank)` / `.to(device)`",
            chain=[placed.lineno, moved.lineno],
        )


def check(m):
    if m.mentions(*_PICKS[:4]):
        return
    inits = m.dist_calls("init_process_group")
    if inits and m.keyword(inits[0], "device_id") is None and not _picks_somewhere(m):
        where = _unindexed_cuda(m)
        if where is not None:
            yield m.finding(
                CODE,
                inits[0],
                f"every rank puts its work on the current GPU (line {where.lineno}) and none ever picks "
                "its own: all ranks share GPU 0 while the others idle",
                SEVERITY,
                hint="`torch.cuda.set_device(int(os.environ['LOCAL_RANK']))` before init_process_group",
            )
            return
    nccl = [c for c in inits if _nccl(m, c) and m.keyword(c, "device_id") is None]
    if not nccl:  # one finding per cause: the NCCL group's already says set_device is missing
        yield from _mixed_placement(m)
    for call in nccl:
        yield m.finding(
            CODE,
            call,
            "NCCL process group, but the script never calls `torch.cuda.set_device`: every "
            "rank's current device is GPU 0",
            SEVERITY,
            hint="call `torch.cuda.set_device(local_rank)` before init_process_group",
        )
