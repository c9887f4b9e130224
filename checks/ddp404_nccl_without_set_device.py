"""DDP404: NCCL without torch.cuda.set_device.

## What it does
Finds `init_process_group` with the NCCL backend in a script that never calls
`torch.cuda.set_device` (and passes no `device_id=`).

## Why is this bad?
NCCL and PyTorch use the *current* CUDA device for communicators, `barrier()` and object
collectives. Without `set_device`, every rank's current device is GPU 0: ranks create contexts on
GPU 0, `barrier()` may hang or use the wrong GPU, and GPU 0 runs out of memory.

## Example
```python
dist.init_process_group("nccl")
model = DDP(model.to(f"cuda:{local_rank}"), device_ids=[local_rank])
```

## Use instead
```python
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
```
"""

from __future__ import annotations

import ast

CODE = "DDP404"
TITLE = "NCCL without set_device"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def _nccl(m, call: ast.Call) -> bool:
    expr = m.keyword(call, "backend") or (call.args[0] if call.args else None)
    if expr is None:
        return False
    texts = [n.value for n in ast.walk(expr) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    if isinstance(expr, ast.Name):  # backend = "nccl" assigned somewhere in the file
        for node in m.nodes(ast.Assign):
            if any(isinstance(t, ast.Name) and t.id == expr.id for t in node.targets):
                texts += [
                    n.value
                    for n in ast.walk(node.value)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                ]
    return any("nccl" in t.lower() for t in texts) and not any("gloo" in t.lower() for t in texts)


def check(m):
    if m.mentions("set_device", "CUDA_VISIBLE_DEVICES", "torch.cuda.device(", "set_device_index"):
        return
    for call in m.dist_calls("init_process_group"):
        if _nccl(m, call) and m.keyword(call, "device_id") is None:
            yield m.finding(
                CODE,
                call,
                "NCCL process group, but the script never calls `torch.cuda.set_device`: every "
                "rank's current device is GPU 0",
                SEVERITY,
                hint="call `torch.cuda.set_device(local_rank)` before init_process_group",
            )
