"""DDP503: torch.load without map_location in distributed code.

## What it does
Finds `torch.load(path)` with no `map_location` in a script that sets up torch.distributed or DDP.

## Why is this bad?
Tensors are restored onto the device they were saved from — usually `cuda:0`. Every rank then
allocates the whole checkpoint on GPU 0: memory spikes on one GPU, out-of-memory errors, and a
slow start while it all funnels through one device.

## Example
```python
ckpt = torch.load("ckpt.pt")
```

## Use instead
```python
ckpt = torch.load("ckpt.pt", map_location="cpu")   # or {"cuda:0": f"cuda:{local_rank}"}
```
"""

from __future__ import annotations

from ddpdoctor.script.ranks import single_process_arm
from ddpdoctor.script.writers import per_process_path

CODE = "DDP503"
TITLE = "torch.load without map_location"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def check(m):
    if m.one_process:  # init_process_group(world_size=1): no other rank to collide with
        return
    if not m.distributed_context:
        return
    for call in m.calls_named("torch.load"):
        if (
            len(call.args) < 2
            and m.rank_guard(call) is None  # one rank loads: nothing crowds onto cuda:0
            and m.keyword(call, "map_location") is None
            and not any(k.arg is None for k in call.keywords)
            # a file of this rank's own (`queue{rank}.pth`) was saved from this rank's device:
            # it comes back there, not onto cuda:0
            and not per_process_path(call.args[0] if call.args else m.keyword(call, "f"), m)
            # the arm a job takes only when it is not distributed (the `else` of `if args.distributed:`):
            # one process, nothing crowds onto another rank's GPU
            and not single_process_arm(m, call)
        ):
            yield m.finding(
                CODE,
                call,
                "`torch.load` without `map_location` in a distributed script: every rank "
                "loads the tensors onto the GPU they were saved from (usually cuda:0)",
                SEVERITY,
                hint="pass map_location='cpu' or the rank's own device",
            )
