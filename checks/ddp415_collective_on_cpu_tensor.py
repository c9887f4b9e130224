"""DDP415: a collective on a tensor that stays on the CPU.

## What it does
Finds a tensor collective (`all_reduce`, `broadcast`, `reduce`, `all_gather_into_tensor`,
`reduce_scatter_tensor`) whose tensor is made on the CPU in the same function (`torch.tensor(...)`,
`torch.zeros(n)`, `torch.from_numpy(...)`, no `device=`) and never moved before the call:
- where the code means to move it but drops the result (`summaries.cuda(rank)` as a statement of its
  own: a tensor's `.cuda()` and `.to()` return a copy, unlike a module's), in a file that may use
  NCCL, at that statement;
- where the process group is NCCL's alone (`init_process_group("nccl")`), at the collective.
A tensor moved by assignment (`t = t.cuda()`), made with a device, or a file that sets a default
device is left alone; so is a gloo or mixed backend, which takes CPU tensors.

## Why is this bad?
NCCL communicates GPU memory only: a CPU tensor fails the collective ("Tensors must be CUDA and
dense", or "No backend type associated with device type cpu") on every rank that reaches it, often
only on the path that runs rarely (an option, the end of an epoch). A dropped `.cuda()` looks like
a move in review, so the crash surprises.

## Example
```python
summaries = torch.tensor([train_loss, val_loss])
summaries.cuda(rank)
dist.reduce(summaries, 0)
```

## Use instead
```python
summaries = torch.tensor([train_loss, val_loss], device=f"cuda:{local_rank}")
dist.reduce(summaries, 0)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.backends import nccl_only
from ddpdoctor.script.names import dotted

CODE = "DDP415"
TITLE = "Collective on a tensor that stays on the CPU"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "medium"
# why it is not in the default selection (benchmarks/lint_rule_precision.py on the labelled sets)
OPT_IN_BECAUSE = (
    "too few labelled reports to show 0.95 precision: of its 4 reports on the labelled sets 3 are bugs, "
    "and the 4th sits on a YOLO broadcast a labeller marked correct for another question (every rank "
    "reaches it), while the same code in another set is marked a crash for this one"
)

# the collectives whose first argument is the tensor they send or fill
_TENSOR_FIRST = ("all_reduce", "broadcast", "reduce", "all_gather_into_tensor", "reduce_scatter_tensor")
_MAKERS = frozenset(
    (
        "tensor",
        "zeros",
        "ones",
        "empty",
        "full",
        "arange",
        "from_numpy",
        "as_tensor",
        "Tensor",
        "FloatTensor",
        "LongTensor",
        "IntTensor",
        "DoubleTensor",
        "BoolTensor",
    )
)
# methods that keep a tensor where it is
_IN_PLACE_DEVICE = frozenset(
    ("int", "float", "long", "double", "half", "bool", "clone", "detach", "contiguous", "view", "reshape", "flatten")
)
_MOVES = ("cuda", "to")


def _cpu_made(m, expr: ast.AST) -> bool:
    """``expr`` makes a tensor on the CPU: a torch factory without a device (also through dtype
    methods and both arms of an ``x if c else y``)."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _IN_PLACE_DEVICE:
        expr = expr.func.value
    if isinstance(expr, ast.IfExp):
        return _cpu_made(m, expr.body) and _cpu_made(m, expr.orelse)
    if not isinstance(expr, ast.Call):
        return False
    q = m.qualname(expr.func) or ""
    if not q.startswith("torch.") or q.rsplit(".", 1)[-1] not in _MAKERS or q.count(".") != 1:
        return False
    device = m.keyword(expr, "device")
    return device is None or (isinstance(device, ast.Constant) and device.value == "cpu")


def _scope_body(m, node: ast.AST) -> ast.AST:
    return m.enclosing_function(node) or m.tree


def _made_and_dropped(m, call: ast.Call, name: str) -> tuple[ast.AST, ast.Expr | None] | None:
    """(the assignment that made ``name`` on the CPU, a dropped move of it or None), when the last
    assignment of ``name`` before ``call`` in its function makes a CPU tensor and nothing between
    rebinds it; None otherwise."""
    scope = _scope_body(m, call)
    last = None
    for node in ast.walk(scope):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.lineno < call.lineno:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                if last is None or node.lineno > last.lineno:
                    last = node
        elif isinstance(node, (ast.AugAssign, ast.For, ast.With)) and node.lineno < call.lineno:
            target = node.target if isinstance(node, (ast.AugAssign, ast.For)) else None
            if isinstance(target, ast.Name) and target.id == name:
                return None  # rebound some other way: not followed
    if last is None or _scope_body(m, last) is not scope or last.value is None or not _cpu_made(m, last.value):
        return None
    if not _runs_before(m, last, call):
        return None  # made in one arm of an `if` (`cuda.FloatTensor` in the other): not every path
    dropped = None
    for node in ast.walk(scope):
        if (
            isinstance(node, ast.Expr)
            and last.lineno < node.lineno < call.lineno
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr in _MOVES
            and isinstance(node.value.func.value, ast.Name)
            and node.value.func.value.id == name
            and _moves_to_gpu(node.value)
        ):
            dropped = node if dropped is None or node.lineno < dropped.lineno else dropped
    return last, dropped


def _runs_before(m, stmt: ast.stmt, node: ast.AST) -> bool:
    """``node`` sits in a statement that follows ``stmt`` in the same block: every path to it ran
    ``stmt`` (structured code; an early exit in between only makes fewer paths)."""
    parent = m.parents.get(stmt)
    for field in ("body", "orelse", "finalbody", "handlers"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and any(s is stmt for s in block):
            after = block[[id(s) for s in block].index(id(stmt)) + 1 :]
            return any(node is n for s in after for n in ast.walk(s))
    return False


def _moves_to_gpu(call: ast.Call) -> bool:
    """``t.cuda(...)``, or ``t.to(x)`` where x is not a dtype or the CPU."""
    if call.func.attr == "cuda":
        return True
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device"), None)
    if arg is None:
        return False
    text = ast.unparse(arg)
    return "cpu" not in text and not text.startswith(("torch.float", "torch.int", "torch.long", "torch.bool"))


def check(m):
    if m.mentions("set_default_device", "set_default_tensor_type", "set_default_dtype(torch.cuda"):
        return
    nccl = any(nccl_only(m, c) for c in m.dist_calls("init_process_group"))
    for call in m.dist_calls(*_TENSOR_FIRST):
        arg = call.args[0] if call.args else m.keyword(call, "tensor")
        op = (dotted(call.func) or "").rsplit(".", 1)[-1]
        if arg is not None and nccl and _cpu_made(m, arg):
            yield _report(m, call, call, f"the tensor given to `{op}` is made on the CPU here")
            continue
        if not isinstance(arg, ast.Name):
            continue
        found = _made_and_dropped(m, call, arg.id)
        if found is None:
            continue
        made, dropped = found
        if dropped is not None and m.mentions("nccl"):
            move = ast.unparse(dropped.value)
            yield _report(
                m,
                dropped,
                call,
                f"`{move}` returns a moved copy and drops it (a tensor is not moved in place, unlike a "
                f"module): `{arg.id}`, made on the CPU on line {made.lineno}, goes to `{op}` on line "
                f"{call.lineno} as it was",
                hint=f"keep the copy: `{arg.id} = {move}` (or make it on the GPU: `device=...`)",
            )
        elif nccl:
            yield _report(m, call, call, f"`{arg.id}` is made on the CPU on line {made.lineno} and never moved")


def _report(m, node: ast.AST, call: ast.Call, what: str, hint: str | None = None):
    op = (dotted(call.func) or "").rsplit(".", 1)[-1]
    return m.finding(
        CODE,
        node,
        f"{what}: NCCL communicates GPU memory only, so `{op}` fails with a CPU tensor on every rank "
        "that reaches it",
        SEVERITY,
        hint=hint or "make the tensor on this rank's GPU (`device=...`) or move it (`t = t.cuda()`) first",
        **({"chain": m.chain_text([node.lineno], call.lineno)} if node is not call else {}),
    )
