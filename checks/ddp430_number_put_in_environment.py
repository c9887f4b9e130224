"""DDP430: a number put into os.environ.

## What it does
Finds `os.environ["MASTER_PORT"] = 12355` (or `.setdefault`, `.update`, `putenv`) where the value
is a number, not a string: an int or float literal, `int(...)`, `len(...)`,
`torch.cuda.device_count()`, arithmetic on those, or a name this function binds only to such a
value (`world_size = torch.cuda.device_count()`, then `os.environ["WORLD_SIZE"] = world_size`).

## Why is this bad?
`os.environ` holds strings only: assigning a number raises `TypeError: str expected, not int` at
that line, on every rank, before `init_process_group` runs. Under `mp.spawn` every worker dies
with that traceback and the job never starts; the single-GPU path, which skips the line, hides it.

## Example
```python
os.environ["MASTER_ADDR"] = "localhost"
os.environ["MASTER_PORT"] = 12355
```

## Use instead
```python
os.environ["MASTER_PORT"] = str(12355)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dotted
from ddpdoctor.script.nodes import walk

CODE = "DDP430"
TITLE = "Number put into os.environ"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

# calls whose result is a number
_NUMBERS = frozenset(("int", "len", "float", "round", "torch.cuda.device_count", "os.cpu_count", "math.ceil", "math.floor"))


def check(m):
    for key, value, node, _how in m.env_writes:
        if value is None or not _number(m, value, m.enclosing_function(node), 0):
            continue
        yield m.finding(
            CODE,
            node,
            f"`{ast.unparse(value)[:40]}` is a number, and os.environ holds strings only: setting "
            f"{key} raises TypeError (str expected, not int) on every rank before the process group starts",
            SEVERITY,
            hint=f"convert it: `os.environ[{key!r}] = str({ast.unparse(value)[:30]})`",
        )


def _number(m, e: ast.AST, fn, depth: int) -> bool:
    if isinstance(e, ast.Constant):
        return isinstance(e.value, (int, float)) and not isinstance(e.value, bool)
    if isinstance(e, ast.Call):
        return (m.qualname(e.func) or dotted(e.func) or "") in _NUMBERS
    if isinstance(e, ast.BinOp) and not isinstance(e.op, ast.Mod):  # (`"%d" % port` is text)
        return _number(m, e.left, fn, depth) and _number(m, e.right, fn, depth)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        return _number(m, e.operand, fn, depth)
    if isinstance(e, ast.Name) and depth < 2 and fn is not None:
        bound = [
            st.value
            for st in walk(fn)
            if isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign))
            and any(isinstance(t, ast.Name) and t.id == e.id for t in _targets(st))
        ]
        params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
        return bool(bound) and e.id not in params and all(v is not None and _number(m, v, fn, depth + 1) for v in bound)
    return False


def _targets(st: ast.stmt) -> list[ast.AST]:
    if isinstance(st, ast.Assign):
        return [t for tt in st.targets for t in walk(tt)]
    return [st.target]
