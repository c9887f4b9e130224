"""DDP406: a hard-coded MASTER_PORT.

## What it does
Finds `os.environ["MASTER_PORT"] = "12355"` (or `.update`/`putenv`) with a literal port.

## Why is this bad?
A fixed port overrides what the launcher (torchrun, Slurm) chose; two jobs on one node then collide
("Address already in use") and a re-run right after a crash waits for the old socket to clear.

## Example
```python
os.environ["MASTER_PORT"] = "12355"
```

## Use instead
```python
os.environ.setdefault("MASTER_PORT", "29500")   # only when the launcher did not set it
```
or let torchrun pick it (`--rdzv-endpoint`, `--master-port`).
"""

from __future__ import annotations

import ast

CODE = "DDP406"
TITLE = "Hard-coded MASTER_PORT"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "medium"
# why it is not in the default selection (measured with benchmarks/lint_rule_precision.py)
OPT_IN_BECAUSE = (
    "a fixed MASTER_PORT only breaks two jobs sharing a node, and labellers of real code mostly call it "
    "debatable or correct: on the 20 labelled folders measured on 2026-11-27 it made 4 true and 6 false "
    "reports (0.40)"
)


def _literal(value: ast.AST) -> bool:
    if isinstance(value, ast.Constant):
        return True
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id in ("str", "int")
        and len(value.args) == 1
        and isinstance(value.args[0], ast.Constant)
    )


def check(m):
    for key, value, node, how in m.env_writes:
        if key == "MASTER_PORT" and how == "assign" and value is not None and _literal(value):
            yield m.finding(
                CODE,
                node,
                "MASTER_PORT is hard-coded: it overrides the launcher's port and collides "
                "with other jobs on the node",
                SEVERITY,
                hint="use os.environ.setdefault('MASTER_PORT', ...) or a free port",
            )
