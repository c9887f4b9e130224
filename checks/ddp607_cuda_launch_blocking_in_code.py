"""DDP607: CUDA_LAUNCH_BLOCKING=1 left on in a multi-process training script.

## What it does
Finds `os.environ["CUDA_LAUNCH_BLOCKING"] = "1"` (also `setdefault`, `update`, `putenv`) in a
script that runs one process per GPU, unless a test chooses it (`if args.debug:`).

## Why is this bad?
It makes every kernel launch wait for the kernel to finish. DDP overlaps the gradient all-reduce
of one bucket with the backward of the next; with blocking launches nothing overlaps, and every
rank runs at the pace of a debugger. NCCL has also deadlocked under it: a blocking kernel launch
can wait on NCCL's proxy thread, which waits on the launch (NVIDIA/nccl#750, partly fixed in
later releases). It is a debugging switch, usually left behind with a comment saying so.

## Example
```python
os.environ["CUDA_LAUNCH_BLOCKING"] = "1"  # for debugging
```

## Use instead
Set it in the shell for the one run that needs it (`CUDA_LAUNCH_BLOCKING=1 torchrun ...`), or
behind a `--debug` flag.
"""

from __future__ import annotations

import ast

from ddpdoctor.script import ranks

CODE = "DDP607"
TITLE = "CUDA_LAUNCH_BLOCKING=1 set in a multi-process script"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

_VAR = "CUDA_LAUNCH_BLOCKING"


def _turns_on(value) -> bool:
    return isinstance(value, ast.Constant) and str(value.value).strip().lower() in ("1", "true", "yes")


def _chosen(m, node) -> bool:
    """Under a test (``if args.debug:``, ``if args.infer_time:`` to time kernels, ``if
    "CUDA_LAUNCH_BLOCKING" not in os.environ:``): someone chose it for that case. Only the script's
    own ``if __name__ == "__main__":`` does not count."""
    for a in m.ancestors(node):
        if isinstance(a, (ast.If, ast.IfExp)) and "__name__" not in ast.unparse(a.test):
            return True
    return False


def check(m):
    if not m.mentions(_VAR) or not ranks.multi_process(m):
        return
    for key, value, node, _how in m.env_writes:
        if key == _VAR and _turns_on(value) and not _chosen(m, node):
            yield m.finding(
                CODE,
                node,
                "`CUDA_LAUNCH_BLOCKING=1` is set in code: every kernel launch waits for the kernel, so "
                "DDP's all-reduce no longer overlaps the backward on any rank, and NCCL can hang under it",
                SEVERITY,
                hint="remove it; set it in the shell for a debugging run "
                "(`CUDA_LAUNCH_BLOCKING=1 torchrun ...`) or behind a --debug flag",
            )
