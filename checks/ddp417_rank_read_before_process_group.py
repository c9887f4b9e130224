"""DDP417: the rank asked for before the process group exists.

## What it does
Finds a rank query (`get_rank()` of a project helper, `dist.get_rank()`; also `get_world_size()`,
which answers 1 there, and a main-process predicate such as `utils.is_main_process()`, which answers
yes there) that runs before `init_process_group` (or the project's setup helper,
`init_distributed_mode(args)`) in the same straight-line code: the query sits earlier in the function (or the
`__main__` block) that later creates the process group, or that later calls this file's function
that creates it (DINO's `__main__` before `train_dino(args)`), outside any test of
`dist.is_initialized()`. A helper of this file that reads the launcher's `RANK` from the
environment is right at any time and is left alone, and so is a query inside a function that runs
later.

## Why is this bad?
Before the process group exists, the usual helper (`return dist.get_rank() if
dist.is_initialized() else 0`) answers 0 on every process, and `dist.get_rank()` itself raises.
What is built from it is then the same on every rank: `set_seed(seed + get_rank())` gives every
rank the same seed (identical random augmentation and dropout, identical shuffles of a sampler
seeded from it), and a logger or writer set up for `rank == 0` opens on every process.

## Example
```python
set_seed(1 + get_rank())                 # 0 on every process: one seed for all
dist.init_process_group("nccl")
```

## Use instead
```python
dist.init_process_group("nccl")
set_seed(1 + get_rank())                 # each rank its own seed
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script import ranks
from ddpdoctor.script.names import dotted

CODE = "DDP417"
TITLE = "Rank read before the process group exists"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

_QUERIES = ("get_rank", "get_global_rank")
_WORLD = "get_world_size"  # answers 1 before the group exists: a batch divided by it is not divided


def _reads_environment(m, name: str, depth: int = 0) -> bool:
    """This file's helper of that name reads the launcher's environment (RANK), itself or through
    another helper of the file, or asks torch.distributed nothing at all (``return args.local_rank
    == 0``, a value set before it runs): right before the process group exists too."""
    fns = [f for f in m.functions if f.name == name]
    if fns and not any(_asks_the_group(m, f, depth) for f in fns):
        return True
    for f in fns:
        for n in ast.walk(f):
            if (isinstance(n, ast.Attribute) and n.attr in ("environ", "getenv")) or (
                isinstance(n, ast.Constant) and n.value == "RANK"
            ):
                return True
            if (
                depth < 3
                and isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name)
                and n.func.id != name
                and n.func.id in m.function_names
                and _reads_environment(m, n.func.id, depth + 1)
            ):
                return True
    return False


def _asks_the_group(m, fn: ast.AST, depth: int) -> bool:
    """``fn`` calls torch.distributed (or an accelerate/Horovod-style rank call it does not show),
    itself or through another helper of the file."""
    for n in ast.walk(fn):
        if not isinstance(n, ast.Call):
            continue
        q = m.qualname(n.func) or ""
        last = (dotted(n.func) or "").rsplit(".", 1)[-1]
        if q.startswith("torch.distributed") or last in (*_QUERIES, _WORLD, "is_initialized"):
            return True
        if isinstance(n.func, ast.Name) and n.func.id in m.function_names and n.func.id != getattr(fn, "name", ""):
            if depth >= 3 or any(_asks_the_group(m, g, depth + 1) for g in m.functions if g.name == n.func.id):
                return True
        elif not (isinstance(n.func, ast.Name) and n.func.id in ("hasattr", "getattr", "int", "str", "bool")):
            return True  # a call it does not show (`accelerator.is_main_process`, `hvd.rank()`)
    return False


def _group_makers(m, inits: list) -> list[ast.Call]:
    """Calls of this file's functions that make the process group in their own body
    (``train_dino(args)`` whose first lines call ``init_distributed_mode(args)``): the group exists
    only after such a call returns, so a rank asked for before it is asked too early."""
    makers = {getattr(m.enclosing_function(i), "name", None) for i in inits} - {None}
    return [c for c, _q in m.calls if isinstance(c.func, ast.Name) and c.func.id in makers]


def _under_initialized_test(m, node: ast.AST) -> bool:
    for a in m.ancestors(node):
        if isinstance(a, (ast.If, ast.IfExp)) and "is_initialized" in ast.unparse(a.test):
            return True
    return False


def _same_code(m, node: ast.AST) -> ast.AST:
    """The function that holds ``node`` (the module for top-level code)."""
    return m.enclosing_function(node) or m.tree


def check(m):
    # the process group is made here or by the project's setup helper (`init_distributed_mode(args)`)
    inits = [*m.dist_calls("init_process_group"), *m.setup_helper_calls]
    if not inits:
        return
    makers = _group_makers(m, inits)
    for call, q in m.calls:
        name = dotted(call.func) or ""
        last = name.rsplit(".", 1)[-1]
        predicate = last not in (*_QUERIES, _WORLD) and ranks.predicate_name_kind(last) == ranks.GLOBAL
        if (last not in (*_QUERIES, _WORLD) and not predicate) or call.args or call.keywords:
            continue
        if not (q or "").startswith("torch.distributed") and (
            "." in name and name.split(".", 1)[0] not in m.aliases
        ):
            continue  # `self.get_rank()`, `trainer.get_rank()`: an object's own idea of the rank
        if last in m.function_names and _reads_environment(m, last):
            continue
        if _under_initialized_test(m, call) or m.enclosing_loop(call) is not None:
            continue
        code = _same_code(m, call)
        later = [i for i in inits if _same_code(m, i) is code and i.lineno > call.lineno]
        later += [c for c in makers if _same_code(m, c) is code and c.lineno > call.lineno]
        later.sort(key=lambda c: c.lineno)
        if not later:
            continue
        init = later[0]
        if (q or "").startswith("torch.distributed"):
            answer = "it raises there, so what is made from it here is the same on every rank"
        elif predicate:
            answer = (
                "such a helper answers yes (rank 0) on every process there, so every rank takes what "
                "it keeps for the main process"
            )
        elif last == _WORLD:
            answer = "such a helper answers 1 there (one process), so what is sized from it here is sized for one process"
        else:
            answer = "such a helper answers 0 on every process there, so what is made from it here is the same on every rank"
        yield m.finding(
            CODE,
            call,
            f"`{name}()` runs before the process group is created (line {init.lineno}): {answer}",
            SEVERITY,
            hint="create the process group first, then ask for the rank or the world size, or read "
            "the launcher's RANK / WORLD_SIZE from the environment",
            chain=[call.lineno, init.lineno],
        )
