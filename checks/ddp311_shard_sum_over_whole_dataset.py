"""DDP311: a sum over this rank's shard divided by the whole dataset's size.

## What it does
Finds a figure summed in a loop over a loader given a `DistributedSampler` (`score += ...`,
`running_loss += loss.item() * n`) and then divided, with no collective in between, by the size of
the whole dataset: `len(loader.dataset)`, `len(dataset)` of the dataset the sampler shards, or a size
the file takes from it (`dataset_sizes = {x: len(image_datasets[x]) ...}`, `n = len(dataset)`).
A division by the shard's own size (`len(loader.sampler)`, `len(loader)`, a count summed in the
loop) is left alone, and so is a sum reduced over the ranks first.

## Why is this bad?
Each rank iterates 1/world_size of the data, so its sum covers that part only; divided by the whole
set's size, the accuracy or loss comes out about world_size times too small on every rank, and it
changes with the number of GPUs. Nothing fails: the logged numbers are simply wrong.

## Example
```python
for x, y in eval_loader:                    # DistributedSampler: this rank's shard
    score += (model(x).argmax(1) == y).sum().item()
score = score / len(eval_loader.dataset)   # the whole set's size
```

## Use instead
```python
t = torch.tensor([score], device=device)
dist.all_reduce(t)                          # the whole set's sum
score = t.item() / len(eval_loader.dataset)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.loaders import loop_root, sampler_calls, sharded_passes
from ddpdoctor.script.names import dotted
from ddpdoctor.script.ranks import assignments

CODE = "DDP311"
TITLE = "Shard sum divided by the whole dataset's size"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "medium"
# why it is not in the default selection (benchmarks/lint_rule_precision.py on the labelled sets)
OPT_IN_BECAUSE = (
    "new and barely measured: 4 labelled bugs found and no false report; a shard sum divided by the "
    "whole size is right when the quotients are summed over the ranks afterwards (often in the caller, out of its sight)"
)

_COMBINING = ("reduce", "gather", "sync", "broadcast", "distributed", "across")


def _root_name(e: ast.AST) -> str | None:
    while isinstance(e, (ast.Subscript, ast.Attribute, ast.Call)):
        e = e.value if not isinstance(e, ast.Call) else e.func
    return e.id if isinstance(e, ast.Name) else None


def _sharded_datasets(m) -> set[str]:
    """Root names of the datasets the file's DistributedSamplers shard (``image_datasets`` of
    ``DistributedSampler(image_datasets['train'])``)."""
    out = set()
    for call in sampler_calls(m):
        first = call.args[0] if call.args else m.keyword(call, "dataset")
        name = _root_name(first) if first is not None else None
        if name:
            out.add(name)
    return out


def _whole_size(m, den: ast.AST, loader: str | None, datasets: set[str], depth: int = 0) -> str | None:
    """The text of ``den`` when it is the whole dataset's size, else None."""
    if depth > 2:
        return None
    if isinstance(den, ast.Call) and isinstance(den.func, ast.Name) and den.func.id == "len" and den.args:
        arg = den.args[0]
        if isinstance(arg, ast.Attribute) and arg.attr == "dataset" and loader and ast.unparse(arg.value) == loader:
            return ast.unparse(den)
        if not isinstance(arg, ast.Attribute) and _root_name(arg) in datasets:
            return ast.unparse(den)
        return None
    key = dotted(den.value) if isinstance(den, ast.Subscript) else dotted(den)
    if key is None:
        return None
    values = [v for v, _n in assignments(m, key)]
    if not values:
        return None
    ok = True
    for v in values:
        if isinstance(v, ast.DictComp) and isinstance(den, ast.Subscript):
            ok &= _whole_size(m, v.value, loader, datasets, depth + 1) is not None
        elif not isinstance(den, ast.Subscript):
            ok &= _whole_size(m, v, loader, datasets, depth + 1) is not None
        else:
            ok = False
    return ast.unparse(den) if ok else None


def _numerator(e: ast.AST) -> str | None:
    """``score`` of ``score``, ``running_corrects.double()``, ``total.item()``, ``float(correct)``."""
    while isinstance(e, ast.Call):
        if isinstance(e.func, ast.Attribute) and not e.args:
            e = e.func.value
        elif isinstance(e.func, ast.Name) and e.func.id in ("float", "int") and len(e.args) == 1:
            e = e.args[0]  # `float(correct)`
        else:
            break
    return e.id if isinstance(e, ast.Name) else None


def _combined(m, fn: ast.AST, name: str, after: int, before: int) -> bool:
    """A call between the loop and the division hands ``name`` to a collective or a helper named
    for combining over the ranks."""
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and after < n.lineno <= before:
            callee = (dotted(n.func) or "").rsplit(".", 1)[-1].lower()
            if any(w in callee for w in _COMBINING) and any(
                isinstance(a, ast.Name) and a.id == name for x in n.args for a in ast.walk(x)
            ):
                return True
    return False


def _scaled_back(m, div: ast.BinOp) -> bool:
    """``loss / len(loader.dataset) * dist.get_world_size()``: the shard's share scaled back up, or a
    quotient the same function then hands to a collective (each rank's share, summed over the ranks)."""
    parent = m.parents.get(div)
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Mult):
        other = parent.right if parent.left is div else parent.left
        if "world" in ast.unparse(other).lower():
            return True
    target = m.parents.get(div)
    if isinstance(target, ast.Assign) and len(target.targets) == 1 and isinstance(target.targets[0], ast.Name):
        fn = m.enclosing_function(div) or m.tree
        return _combined(m, fn, target.targets[0].id, div.lineno, 1 << 30)
    return False


def check(m):
    sharded = sharded_passes(m)
    if not sharded:
        return
    datasets = _sharded_datasets(m)
    for loop in m.nodes(ast.For, ast.AsyncFor):
        if id(loop) not in sharded:
            continue
        fn = m.enclosing_function(loop) or m.tree
        loader = ast.unparse(loop_root(loop.iter))
        summed = {
            n.target.id
            for n in ast.walk(loop)
            if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and isinstance(n.target, ast.Name)
        }
        if not summed or any(
            isinstance(n, ast.Call) and any(w in (dotted(n.func) or "").rsplit(".", 1)[-1].lower() for w in _COMBINING)
            for n in ast.walk(loop)
        ):
            continue  # (a figure reduced batch by batch inside the loop is the whole set's)
        end = loop.end_lineno or loop.lineno
        for div in ast.walk(fn):
            if not (isinstance(div, (ast.BinOp, ast.AugAssign)) and isinstance(div.op, ast.Div) and div.lineno > end):
                continue
            # `correct / size`, or `correct /= size` in place
            name = _numerator(div.left if isinstance(div, ast.BinOp) else div.target)
            if name not in summed:
                continue
            whole = _whole_size(m, div.right if isinstance(div, ast.BinOp) else div.value, loader, datasets)
            if whole is None or _combined(m, fn, name, end, div.lineno):
                continue
            if isinstance(div, ast.BinOp) and _scaled_back(m, div):
                continue
            yield m.finding(
                CODE,
                div,
                f"`{name}` is summed over this rank's shard (the loop on line {loop.lineno} reads a "
                f"loader with a DistributedSampler) but divided by the whole dataset's size "
                f"(`{whole}`): the figure is about 1/world_size of the true one, on every rank",
                SEVERITY,
                hint="all-reduce the sum first (`dist.all_reduce(t)`), or divide by the shard's own "
                "count (`len(loader.sampler)`)",
                chain=m.chain_text([loop.lineno], div.lineno),
            )
            break
