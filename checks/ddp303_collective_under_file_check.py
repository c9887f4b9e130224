"""DDP303: a collective behind a file-system check each rank makes on its own.

## What it does
Finds a torch.distributed collective (broadcast, barrier, all_reduce, ...) inside an `if` whose
condition asks the file system (`path.exists()`, `os.path.isfile(...)`, `os.path.isdir(...)`),
directly or through a call to a function of the same file.

## Why is this bad?
Each rank evaluates the condition on its own. On shared file systems (NFS, Lustre) attribute caches
make ranks disagree for a while after a file appears, and on node-local disks they always may.
Ranks that see the file enter the collective, the others skip it, and the job hangs.

## Example
```python
if state_path.exists():
    state = torch.load(state_path) if rank == 0 else None
    objs = [state]
    dist.broadcast_object_list(objs, src=0)
```

## Use instead
```python
flag = [state_path.exists() if rank == 0 else None]
dist.broadcast_object_list(flag, src=0)      # every rank takes rank 0's answer
if flag[0]:
    ...
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.interp import COLLECTIVES
from ddpdoctor.script.names import dist_op, dotted

CODE = "DDP303"
TITLE = "Collective behind a per-rank file-system check"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "medium"
# why it is not in the default selection (benchmarks/lint_rule_precision.py on the labelled sets)
OPT_IN_BECAUSE = (
    "too little evidence and not enough precision: on 16 labelled sets of real code it made two "
    "reports, one a real bug and one a resume checkpoint's existence test that every rank sees alike "
    "(precision 0.50, under the 0.95 a default rule needs)"
)
_FS_METHODS = ("exists", "is_file", "is_dir", "isfile", "isdir")


def _asks_file_system(m, test: ast.AST) -> ast.Call | None:
    for n in ast.walk(test):
        if isinstance(n, ast.Call):
            name = dotted(n.func) or ""
            last = name.rsplit(".", 1)[-1]
            if last in _FS_METHODS and (m.qualname(n.func) or "").split(".")[0] not in ("torch",):
                return n
    return None


def _collectives_in(m, body: list[ast.stmt], depth: int = 0) -> list[tuple[ast.Call, ast.Call]]:
    """(call in ``body``, collective) for the default group's collectives in ``body``, also one call
    deep into the file's functions."""
    out = []
    own = {f.name: f for f in m.functions}
    for st in body:
        for n in ast.walk(st):
            if not isinstance(n, ast.Call):
                continue
            q = m.qualname(n.func)
            op = dist_op(q)
            if op in COLLECTIVES and op != "new_group":
                # a collective under its own rank test in there (rank-0-first cache building) is
                # about ordering ranks, not about the file check: leave it to DDP301
                if m.keyword(n, "group") is None and m.rank_guard(n) is None:
                    out.append((n, n))
            elif depth == 0 and isinstance(n.func, (ast.Name, ast.Attribute)):
                name = (dotted(n.func) or "").rsplit(".", 1)[-1]
                fn = own.get(name)
                if fn is not None and (dotted(n.func) or "").split(".")[0] not in m.aliases:
                    out.extend((n, inner) for _c, inner in _collectives_in(m, fn.body, depth + 1))
    return out


def check(m):
    if not m.uses_distributed:
        return
    # Only the lines holding a call named like a file-system test are worth walking an `if` test for.
    fs_lines = {c.lineno for c, q in m.calls if (q or dotted(c.func) or "").rsplit(".", 1)[-1] in _FS_METHODS}
    if not fs_lines:
        return
    for node in m.nodes(ast.If):
        if not any(node.test.lineno <= ln <= node.test.end_lineno for ln in fs_lines):
            continue
        probe = _asks_file_system(m, node.test)
        if probe is None or m.is_rank_guard(node.test):
            continue
        found = _collectives_in(m, node.body)
        if not found or m.rank_guard(node.test) is not None:
            continue
        c, inner = found[0]
        op = dist_op_name(m, inner)
        via = f" (through {m.chain_text((c.lineno,), inner.lineno)})" if c is not inner else ""
        yield m.finding(
            CODE,
            c,
            f"`{op}`{via} runs only on the ranks where `{ast.unparse(probe)}` (line {node.lineno}) is true, and "
            "each rank asks the file system on its own: ranks that disagree (attribute caches, "
            "node-local disks) skip the collective and the others hang",
            SEVERITY,
            hint="let rank 0 check and broadcast the answer, then branch on the broadcast value",
            check_line=node.lineno,
        )


def dist_op_name(m, call: ast.Call) -> str:
    return dist_op(m.qualname(call.func)) or "collective"
