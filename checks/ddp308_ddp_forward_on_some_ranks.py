"""DDP308: a forward of the DDP model that some ranks run and the others do not.

## What it does
Compares every rank's sequence of DistributedDataParallel forwards, as the per-rank interpreter
computes them (the same walk as DDP301), and reports a rank test that keeps only DDP forwards from
the other ranks: rank-0-only evaluation through the wrapper (`if rank == 0: evaluate(ddp_model)`),
also through a function of another module named for evaluation that is handed the wrapper. A rank
test that also keeps a collective from the others is DDP301's. A wrapper made with
`broadcast_buffers=False` (and no SyncBatchNorm) syncs nothing in its forward and is left alone.

## Why is this bad?
Before each forward DDP broadcasts the model's buffers (BatchNorm running statistics, registered
masks) from rank 0, a collective every rank must join. Run on rank 0 alone, that broadcast pairs
with whatever the other ranks do next (their gradient all-reduce) or waits until the timeout. A
model without buffers communicates nothing in a forward, which is why this rule is opt-in: the file
rarely shows the model's layers. Where it does (SyncBatchNorm, its own model class with BatchNorm or
a registered buffer, a torchvision family built with BatchNorm), DDP312 reports it, by default.

## Example
```python
if rank == 0:
    evaluate(ddp_model, val_loader)    # the wrapper's forward on rank 0 only
```

## Use instead
```python
if rank == 0:
    evaluate(ddp_model.module, val_loader)   # the plain module does no communication
```
"""

from __future__ import annotations

from ddpdoctor.script.buffers import buffers_evident
from ddpdoctor.script.divergent import FORWARD_ONLY_HINT, forward_only

CODE = "DDP308"
TITLE = "DDP forward run by some ranks only"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "medium"
OPT_IN_BECAUSE = (
    "a forward communicates only when the model has buffers to broadcast (BatchNorm statistics, "
    "registered masks), which the model's own file decides: on 47 labelled sets 39 of 47 such "
    "reports were bugs (0.83), the others models without buffers (graph networks, small GPTs)"
)


def check(m):
    if buffers_evident(m) is not None:
        return  # the file shows the model's buffers: DDP312 (on by default) reports these
    for anchor, message, chain in forward_only(m):
        yield m.finding(
            CODE,
            anchor,
            message,
            SEVERITY,
            hint=FORWARD_ONLY_HINT,
            chain=chain,
        )
