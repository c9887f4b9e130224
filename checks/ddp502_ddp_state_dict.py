"""DDP502: saving the DDP wrapper's state_dict.

## What it does
Finds `state_dict()` called on the DistributedDataParallel wrapper (not on `.module`) in a script
that saves checkpoints, with no prefix handling in sight.

## Why is this bad?
The wrapper's keys all start with `module.`. The checkpoint then only loads into another DDP wrapper:
`model.load_state_dict(ckpt)` on a plain model fails with "Missing key(s)... Unexpected key(s)
module.…", typically at inference time, far from the training code.

## Example
```python
model = DDP(model, device_ids=[local_rank])
torch.save(model.state_dict(), "ckpt.pt")
```

## Use instead
```python
torch.save(model.module.state_dict(), "ckpt.pt")
```
"""

from __future__ import annotations

CODE = "DDP502"
TITLE = "Saving a DDP-wrapped state_dict"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"
_PREFIX_HANDLING = (
    "consume_prefix_in_state_dict_if_present",
    '"module."',
    "'module.'",
    "[7:]",
    'len("module.")',
)


def check(m):
    if not m.ddp_constructors or not m.calls_named("torch.save") or m.mentions(*_PREFIX_HANDLING):
        return
    seen: set[int] = set()
    for run in m.runs:
        for t in run.traces:
            for e in t.events:
                if e.kind == "state_dict" and id(e.node) not in seen:
                    seen.add(id(e.node))
                    yield m.finding(
                        CODE,
                        e.node,
                        "`state_dict()` of the DDP wrapper: every key gets a `module.` prefix "
                        "and the checkpoint will not load into the plain model",
                        SEVERITY,
                        hint="save `model.module.state_dict()`",
                    )
