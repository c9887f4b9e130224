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
masks) from rank 0, a collective every rank must join; once, the forward after the first backward
also rebuilds the gradient buckets, another broadcast. Run on rank 0 alone, that broadcast pairs with
whatever the other ranks do next (their gradient all-reduce) or waits until the timeout. A model
without buffers communicates nothing in a later forward, but whether it has buffers is decided by
the model's own file and can change under the script (nanoGPT's attention registers a mask buffer
only on a torch without flash attention), and the fix, the plain `.module`, is right either way.
Where the file shows the buffers (SyncBatchNorm, its own class with BatchNorm or a registered
buffer, a torchvision family built with BatchNorm) DDP312 reports it. A model class of the file's own
without buffers is reported here too: with gradients on, the first forward after a backward rebuilds
the gradient buckets with a broadcast from rank 0 (torch's `DistributedDataParallel._pre_forward`).

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
CONFIDENCE = "high"


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
