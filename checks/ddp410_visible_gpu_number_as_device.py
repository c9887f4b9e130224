"""DDP410: a GPU number read from CUDA_VISIBLE_DEVICES used as a device index.

## What it does
Finds an entry of the `CUDA_VISIBLE_DEVICES` list picked by a rank (`visible[local_rank]`) that is
then used as a CUDA device index in the same function — `torch.cuda.set_device`, `torch.device`,
`.cuda(i)`, `.to(i)`, `device_ids=[i]`, `f"cuda:{i}"` — or stored as the run's device index
(`args.device_id = ...`, `self.gpu = ...`). Quiet when the number goes back into the environment
(`os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)`, pinning a child process), which is its right use.

## Why is this bad?
`CUDA_VISIBLE_DEVICES` lists physical GPU numbers; inside the process CUDA renumbers the visible
GPUs from 0. With `CUDA_VISIBLE_DEVICES=2,3`, local rank 0 asks for device 2, which does not exist
in the process ("invalid device ordinal"), or, with more GPUs visible, picks the wrong one.

## Example
```python
visible = [int(i) for i in os.environ["CUDA_VISIBLE_DEVICES"].split(",")]
torch.cuda.set_device(visible[local_rank])
```

## Use instead
```python
torch.cuda.set_device(local_rank)   # the ordinal among the visible GPUs
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dotted
from ddpdoctor.script.nodes import child_nodes, may_show

CODE = "DDP410"
TITLE = "GPU number from CUDA_VISIBLE_DEVICES used as a device index"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

_DEVICE_ATTRS = frozenset(("device_id", "gpu", "gpu_id", "cuda_device", "device_index"))
_SET_DEVICE = frozenset(("torch.cuda.set_device", "torch.device", "torch.cuda.device"))


def check(m):
    if not m.mentions("CUDA_VISIBLE_DEVICES"):
        return
    for fn in [*m.functions, m.tree]:
        scope = _own_nodes(fn)
        visible = {
            dotted(t)
            for a in scope
            if isinstance(a, ast.Assign)
            and may_show(a.value, "CUDA_VISIBLE_DEVICES")  # (most values: no text to build)
            and "CUDA_VISIBLE_DEVICES" in ast.unparse(a.value)
            and _is_list(a.value)
            for t in a.targets
        }
        visible.discard(None)
        if not visible:
            continue
        picks = [
            s
            for s in scope
            if isinstance(s, ast.Subscript)
            and dotted(s.value) in visible
            and not isinstance(s.slice, ast.Slice)
            and any(
                isinstance(n, (ast.Name, ast.Attribute)) and m.rank_kind(n) is not None
                for n in ast.walk(s.slice)
            )
        ]
        for pick in picks:
            use = _device_use(m, scope, pick)
            if use is None:
                continue
            yield m.finding(
                CODE,
                pick,
                f"`{ast.unparse(pick)}` is a physical GPU number from CUDA_VISIBLE_DEVICES, used as a "
                f"device index (line {use.lineno}): inside the process CUDA numbers the visible GPUs "
                "from 0, so this asks for a device that does not exist or picks the wrong one",
                SEVERITY,
                hint=f"use the local rank itself (`{ast.unparse(pick.slice)}`) as the device index",
            )
            break


def _own_nodes(fn) -> list[ast.AST]:
    """The nodes of ``fn``'s own body, not of the functions defined inside it."""
    out = []
    todo = child_nodes(fn)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        out.append(n)
        todo.extend(child_nodes(n))
    return out


def _is_list(e: ast.AST) -> bool:
    if isinstance(e, (ast.ListComp, ast.List)):
        return True
    if isinstance(e, ast.Call):
        f = e.func
        if isinstance(f, ast.Attribute) and f.attr == "split":
            return True
        return dotted(f) in ("list", "map") and bool(e.args) and _mentions_split(e.args[-1])
    return False


def _mentions_split(e: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "split" for n in ast.walk(e))


def _device_use(m, scope, pick: ast.Subscript) -> ast.AST | None:
    """Where the picked number is used as a device index (itself, or a name assigned from it)."""
    names = {
        dotted(t)
        for a in scope
        if isinstance(a, ast.Assign)
        and (a.value is pick or (isinstance(a.value, ast.Call) and dotted(a.value.func) == "int" and a.value.args[:1] == [pick]))
        for t in a.targets
        if isinstance(t, ast.Name)
    }
    names.discard(None)

    def holds(e: ast.AST | None) -> bool:
        if isinstance(e, ast.Call) and dotted(e.func) == "int" and len(e.args) == 1:
            e = e.args[0]  # int(visible[local_rank]): the same number
        return e is not None and (e is pick or (isinstance(e, ast.Name) and e.id in names))

    found = None
    for n in scope:
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Subscript) and "environ" in ast.unparse(t.value) and _carries(n.value, holds):
                    return None  # pins a child process to that GPU: the right use of the number
                if (
                    found is None
                    and isinstance(t, ast.Attribute)
                    and t.attr in _DEVICE_ATTRS
                    and holds(n.value)
                ):
                    found = n
        elif isinstance(n, ast.Call) and found is None:
            q = m.qualname(n.func) or ""
            args = [*n.args, *(k.value for k in n.keywords if k.arg in ("device", "index"))]
            if (q in _SET_DEVICE or (isinstance(n.func, ast.Attribute) and n.func.attr in ("cuda", "to"))) and any(
                holds(a) for a in args
            ):
                found = n
            for k in n.keywords:
                if k.arg == "device_ids" and isinstance(k.value, (ast.List, ast.Tuple)) and any(
                    holds(e) for e in k.value.elts
                ):
                    found = n
        elif isinstance(n, ast.JoinedStr) and found is None:
            text = "".join(str(v.value) for v in n.values if isinstance(v, ast.Constant))
            if "cuda:" in text and any(isinstance(v, ast.FormattedValue) and holds(v.value) for v in n.values):
                found = n
    return found


def _carries(e: ast.AST, holds) -> bool:
    return any(holds(n) for n in ast.walk(e))
