"""DDP418: a rank predicate tested without calling it.

## What it does
Finds a test of a function that answers "am I the main process?" (`is_main_process`, `is_master`,
`is_rank_zero`, ... by its name) written without the call: `if utils.is_main_process:` where the
same file calls `utils.is_main_process()` elsewhere, or names a function it defines (not a
property). An attribute of an object (`accelerator.is_main_process`, `trainer.is_global_zero`) is a
property and is left alone.

## Why is this bad?
A function object is always true. The branch meant for one rank runs on every rank: every rank
profiles, logs, writes the file, or calls whatever the branch holds, and a rank test with an
`else` never takes the `else`.

## Example
```python
if distributed_utils.is_main_process:       # the function, not its answer
    model_copy = deepcopy(model_without_ddp)
    compute_flops(model_copy)
```

## Use instead
```python
if distributed_utils.is_main_process():
    ...
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dotted, is_property
from ddpdoctor.script.ranks import predicate_name_kind

CODE = "DDP418"
TITLE = "Rank predicate tested without calling it"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def _tests(m):
    """The conditions of the file's ``if``s, ``while``s and conditional expressions, and the parts
    of their ``and``/``or``/``not``."""
    for n in m.nodes(ast.If, ast.IfExp, ast.While):
        stack = [n.test]
        while stack:
            t = stack.pop()
            if isinstance(t, ast.BoolOp):
                stack.extend(t.values)
            elif isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not):
                stack.append(t.operand)
            else:
                yield n, t


def _a_function(m, name: str) -> bool:
    """``name`` is called somewhere in the file (``utils.is_main_process()``), or is a function the
    file defines that is not a property."""
    if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in m.nodes(ast.Name)):
        return False  # `is_master = rank == 0` somewhere: a value, whatever else the name is
    if any(dotted(c.func) == name for c, _q in m.calls):
        return True
    defs = [f for f in m.functions if f.name == name]
    return bool(defs) and not any(is_property(f) for f in defs)


def check(m):
    for stmt, test in _tests(m):
        if not isinstance(test, (ast.Name, ast.Attribute)):
            continue
        name = dotted(test)
        if name is None or name.startswith("self.") or predicate_name_kind(name.rsplit(".", 1)[-1]) is None:
            continue
        if not _a_function(m, name):
            continue
        yield m.finding(
            CODE,
            test,
            f"`{name}` is a function and is not called here: a function is always true, so every "
            f"rank takes this branch (line {stmt.lineno}), not only the main process",
            SEVERITY,
            hint=f"call it: `{name}()`",
        )
