"""DDP603: NCCL_ALGO / NCCL_PROTO set in code.

## What it does
Finds a script that sets `NCCL_ALGO` or `NCCL_PROTO` in `os.environ`.

## Why is this bad?
NCCL documents these as debugging knobs: it picks the algorithm and protocol per call from a cost
model of the actual topology and message size. A value hard-coded in the script overrides that on
every cluster the script ever runs on, usually slower, and hides from whoever launches the job.

## Example
```python
os.environ["NCCL_ALGO"] = "Ring"
```

## Use instead
Leave them unset; if an A/B measurement at your message sizes shows a gain, set it in the launch
environment for that cluster (and record the NCCL version).
"""

from __future__ import annotations

CODE = "DDP603"
TITLE = "NCCL_ALGO/NCCL_PROTO set in code"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def check(m):
    for key, _value, node, _how in m.env_writes:
        if key in ("NCCL_ALGO", "NCCL_PROTO"):
            yield m.finding(
                CODE,
                node,
                f"`{key}` is set in code: it overrides NCCL's per-call tuning on every cluster "
                "this script runs on",
                SEVERITY,
                hint="remove it; set it per cluster in the launch environment if measured",
            )
