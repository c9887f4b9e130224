"""DDP416: the model put on GPU 0 by every rank, then wrapped with a per-rank `device_ids`.

## What it does
Finds a model moved to a fixed first GPU (`model.to(device)` with `device = torch.device("cuda:0")`,
`"cuda:0"`, `.cuda(0)`, also a device kept in a name or an attribute such as `args.device`) before
it is wrapped as `DistributedDataParallel(model, device_ids=[gpu])` with a device index that is
not a constant (the rank's own GPU), in the same function. Quiet where the file sets
`CUDA_VISIBLE_DEVICES` (each process may then see its GPU as `cuda:0`) or where the model is
moved again to the per-rank device before the wrap.

## Why is this bad?
Every rank puts its replica on GPU 0 while DDP is told it lives on the rank's own GPU: DDP's
constructor fails on every rank but the first ("module is on cuda:0 but device_ids is cuda:1"), or,
where it is accepted, all replicas share GPU 0 and the other GPUs stay idle. It works with one GPU
per node, so it surfaces when the job scales up.

## Example
```python
args.device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
...
model = model.to(args.device)
model = DDP(model, device_ids=[gpu])
```

## Use instead
```python
torch.cuda.set_device(gpu)
model = model.to(torch.device("cuda", gpu))
model = DDP(model, device_ids=[gpu])
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dotted
from ddpdoctor.script.ranks import assignments

CODE = "DDP416"
TITLE = "Model on GPU 0 on every rank, wrapped with a per-rank device_ids"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def _first_gpu(m, expr: ast.AST | None, depth: int = 0) -> bool:
    """``expr`` is GPU 0 whenever it is a GPU: ``"cuda:0"``, ``torch.device("cuda:0")``,
    ``torch.device("cuda", 0)``, ``"cuda:0" if ok else "cpu"``, or a name every assignment of
    which is one of those."""
    if expr is None or depth > 3:
        return False
    if isinstance(expr, ast.Constant):
        return expr.value == "cuda:0"
    if isinstance(expr, ast.IfExp):
        arms = (expr.body, expr.orelse)
        cpu = [a for a in arms if isinstance(a, ast.Constant) and a.value == "cpu"]
        return any(_first_gpu(m, a, depth + 1) for a in arms) and all(
            _first_gpu(m, a, depth + 1) or a in cpu for a in arms
        )
    if isinstance(expr, ast.Call) and (m.qualname(expr.func) or "") == "torch.device" and expr.args:
        if len(expr.args) == 2:
            first, index = expr.args
            return isinstance(first, ast.Constant) and first.value == "cuda" and isinstance(index, ast.Constant) and index.value == 0
        return _first_gpu(m, expr.args[0], depth + 1)
    key = dotted(expr)
    if key is None:
        return False
    values = [v for v, _node in assignments(m, key)]
    return bool(values) and all(_first_gpu(m, v, depth + 1) for v in values)


def _moves_to_first_gpu(m, call: ast.Call) -> bool:
    f = call.func
    if not isinstance(f, ast.Attribute):
        return False
    if f.attr == "cuda":
        return bool(call.args) and isinstance(call.args[0], ast.Constant) and call.args[0].value == 0
    if f.attr == "to" and call.args:
        return _first_gpu(m, call.args[0])
    return False


def _receiver(call: ast.Call) -> ast.AST:
    """``model`` of ``model.to(d)``; of a chain such as ``Net().cuda().to(d)``, its root."""
    node = call.func.value
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
    return node


def check(m):
    if m.mentions("CUDA_VISIBLE_DEVICES"):
        return
    for ddp in m.ddp_constructors:
        ids = m.keyword(ddp, "device_ids")
        if not (isinstance(ids, (ast.List, ast.Tuple)) and len(ids.elts) == 1) or not ddp.args:
            continue
        index = ids.elts[0]
        if isinstance(index, ast.Constant):
            continue  # a fixed index: no per-rank device to contradict
        model = dotted(ddp.args[0])
        fn = m.enclosing_function(ddp)
        if model is None or fn is None:
            continue
        moves = []
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)) or node.lineno >= ddp.lineno:
                continue
            if node.func.attr in ("to", "cuda") and dotted(_receiver(node)) == model:
                moves.append(node)
            elif node.func.attr in ("to", "cuda"):
                parent = m.parents.get(node)
                if isinstance(parent, ast.Assign) and any(dotted(t) == model for t in parent.targets):
                    moves.append(node)  # `model = Net().to(device)`
        if not moves:
            continue
        last = max(moves, key=lambda c: (c.lineno, c.col_offset))
        if not _moves_to_first_gpu(m, last):
            continue
        yield m.finding(
            CODE,
            last,
            f"every rank puts `{model}` on GPU 0 here (`{ast.unparse(last.args[0]) if last.args else '0'}`), "
            f"then wraps it with `device_ids=[{ast.unparse(index)}]` (line {ddp.lineno}): DDP fails on "
            "every rank whose GPU is not 0, or all replicas crowd GPU 0",
            SEVERITY,
            hint=f"move the model to the rank's own GPU: `{model}.to(torch.device('cuda', {ast.unparse(index)}))`",
            chain=m.chain_text([last.lineno], ddp.lineno),
        )
