"""DDP403: the process group is never destroyed.

## What it does
Finds a script that calls `init_process_group` but never `destroy_process_group`.

## Why is this bad?
Without an orderly shutdown NCCL communicators are torn down by the interpreter's exit in any order:
PyTorch warns ("destroy_process_group() was not called"), exits can hang or crash in the NCCL
watchdog, and a rank that finishes early may leave the others waiting until the timeout.

## Example
```python
dist.init_process_group("nccl")
train()
```

## Use instead
```python
dist.init_process_group("nccl")
try:
    train()
finally:
    dist.destroy_process_group()
```
"""

from __future__ import annotations

CODE = "DDP403"
TITLE = "No destroy_process_group"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "low"
# why it is not in the default selection (measured with benchmarks/lint_rule_precision.py)
OPT_IN_BECAUSE = (
    "on labelled real code 0 of its reports were bugs (1 false, 19 unlabelled): most scripts end the "
    "process right after training, which tears the group down anyway; below the 0.95 precision a "
    "default rule needs"
)


def check(m):
    inits = m.dist_calls("init_process_group")
    if inits and not m.dist_calls("destroy_process_group") and not m.mentions("destroy_process_group"):
        yield m.finding(
            CODE,
            inits[0],
            "the process group is created here but `destroy_process_group()` is never called",
            SEVERITY,
            hint="call `dist.destroy_process_group()` at the end (in a finally:)",
        )
