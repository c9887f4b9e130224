"""DDP429: all_gather into a list whose length is not the world size.

## What it does
Finds `dist.all_gather(tensor_list, t)` and `dist.all_gather_object(object_list, obj)` on the whole
job (no `group=`) whose output list is made with a length that is not the job's size: a number
written out (`[torch.zeros_like(t) for _ in range(4)]`, `[None] * 8`) in a script that never pins its
world to that number, or this machine's GPU count (`torch.cuda.device_count()`) in a script a
launcher starts. A list sized by `dist.get_world_size()`, `WORLD_SIZE` or a name the file binds to
either is left alone, and so is a script that fixes its own world (`init_process_group(world_size=4)`,
`mp.spawn(..., nprocs=4)`, `world_size = 4`).

## Why is this bad?
`all_gather` fills one entry per rank of the group and checks the list's length first: with any
other number of processes it raises ("tensor list size must equal the group size") on every rank, or,
for the GPU count, on more than one node or with fewer processes than GPUs. The run works only on the
machine and launch it was written on.

## Example
```python
out = [torch.zeros_like(x) for _ in range(4)]
dist.all_gather(out, x)
```

## Use instead
```python
out = [torch.zeros_like(x) for _ in range(dist.get_world_size())]
dist.all_gather(out, x)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script import ranks
from ddpdoctor.script.names import dotted

CODE = "DDP429"
TITLE = "all_gather into a list whose length is not the world size"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

_GATHERS = {"all_gather": "tensor_list", "all_gather_object": "object_list"}


def _length(e: ast.AST | None) -> ast.AST | None:
    """The length a list is made with: ``range(n)`` of a comprehension, ``[x] * n``, or a literal."""
    if isinstance(e, ast.ListComp) and len(e.generators) == 1:
        it = e.generators[0].iter
        if isinstance(it, ast.Call) and dotted(it.func) == "range" and len(it.args) == 1:
            return it.args[0]
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
        for lst, n in ((e.left, e.right), (e.right, e.left)):
            if isinstance(lst, ast.List) and len(lst.elts) == 1:
                return n
    if isinstance(e, ast.List) and e.elts and not any(isinstance(x, ast.Starred) for x in e.elts):
        return ast.Constant(len(e.elts))
    return None


def _made_with(m, out: ast.AST, call: ast.Call) -> ast.AST | None:
    """The length of the output list handed to ``call``: made inline, filled by a loop just before
    (``for _ in range(n): lists[k].append(...)``), or the last binding of its name in the same
    function before the call."""
    filled = _filled_by_loop(m, out, call)
    if filled is not None:
        return filled
    if not isinstance(out, ast.Name):
        return _length(out)
    fn = m.enclosing_function(call)
    made = [
        a
        for a in m.nodes(ast.Assign)
        if a.lineno < call.lineno
        and m.enclosing_function(a) is fn
        and len(a.targets) == 1
        and isinstance(a.targets[0], ast.Name)
        and a.targets[0].id == out.id
    ]
    return _length(max(made, key=lambda a: a.lineno).value) if made else None


def _filled_by_loop(m, out: ast.AST, call: ast.Call) -> ast.AST | None:
    """``n`` of the last ``for _ in range(n):`` before ``call`` in its function whose body appends to
    the very list ``call`` gathers into."""
    text = ast.unparse(out)
    fn = m.enclosing_function(call)
    found = None
    for loop in m.nodes(ast.For):
        if loop.lineno >= call.lineno or m.enclosing_function(loop) is not fn:
            continue
        it = loop.iter
        if not (isinstance(it, ast.Call) and dotted(it.func) == "range" and len(it.args) == 1):
            continue
        if any(
            isinstance(c, ast.Call)
            and isinstance(c.func, ast.Attribute)
            and c.func.attr == "append"
            and ast.unparse(c.func.value) == text
            for st in loop.body
            for c in ast.walk(st)
        ):
            found = it.args[0]
    return found


def _pinned_sizes(m) -> set[int]:
    """World sizes the script fixes itself: those the per-rank walk uses (``world_size=4``,
    ``nprocs=4``, ``world_size = 4``), and also ``mp.spawn(fn, args, 4)``, ``args.world_size = "4"``,
    ``os.environ["WORLD_SIZE"] = "4"``."""
    out: set[int] = set(m.hard_coded_world_sizes)

    def number(v: ast.AST | None) -> None:
        if isinstance(v, ast.Constant) and isinstance(v.value, (int, str)) and str(v.value).isdigit():
            out.add(int(v.value))

    for call in m.dist_calls("init_process_group"):
        number(m.keyword(call, "world_size"))  # (also written as a string)
    for call in ranks.spawn_calls(m):
        number(m.keyword(call, "nprocs") or (call.args[2] if len(call.args) > 2 else None))
    for a in m.nodes(ast.Assign):
        for t in a.targets:
            if (dotted(t) or "").rsplit(".", 1)[-1].lower() in ("world_size", "nprocs", "num_processes"):
                number(a.value)
    for key, value, _node, _how in m.env_writes:
        if key == "WORLD_SIZE":
            number(value)
    return out


def check(m):
    if not m.mentions("all_gather") or m.one_process:
        return
    pinned = None
    for call, q in m.calls:
        op = (q or "").rsplit(".", 1)[-1]
        if op not in _GATHERS or not (q or "").startswith("torch.distributed"):
            continue
        if m.keyword(call, "group") is not None or len(call.args) > 2:
            continue  # a group of its own may have that many members
        out = call.args[0] if call.args else m.keyword(call, _GATHERS[op])
        n = _made_with(m, out, call) if out is not None else None
        if n is None:
            continue
        if isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool):
            if n.value < 2:
                continue
            if pinned is None:
                pinned = _pinned_sizes(m)
            if n.value in pinned:
                continue
            what = f"{n.value} entries, a number written out"
        elif ranks.always_per_node_count(m, n) and not m.single_node and not ranks.spawn_calls(m):
            what = f"one entry per GPU of this machine (`{ast.unparse(n)[:40]}`)"
        else:
            continue
        yield m.finding(
            CODE,
            n if getattr(n, "lineno", None) else call,  # where the length is written: the line to change
            f"`{op}` fills one entry per rank, but its output list is made with {what}: with any other "
            "number of processes (another launch, more than one node) it raises on every rank",
            SEVERITY,
            hint="make the list with `dist.get_world_size()` entries",
        )
