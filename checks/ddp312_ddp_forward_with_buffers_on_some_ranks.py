"""DDP312: a forward of a DDP model with buffers that some ranks run and the others do not.

## What it does
DDP308's question, asked where the file shows the wrapped model has buffers: it converts the model
to SyncBatchNorm, builds it from one of its own classes that holds BatchNorm layers or registers a
buffer, builds BatchNorm into the wrapped module directly, or uses a torchvision family built with
BatchNorm (ResNet, DenseNet, EfficientNet, MobileNet, ...). Then a rank test that keeps only DDP
forwards from the other ranks (`if rank == 0: evaluate(ddp_model)`) is a certain hang. Where the
file does not show the model's layers, DDP308 reports the same test as a likely one.

## Why is this bad?
Before each forward DDP broadcasts the model's buffers (BatchNorm running statistics) from rank 0,
a collective every rank must join (`broadcast_buffers=True`, the default). Under `torch.no_grad()`
only the first forward after one with gradients does so, which is why items dealt out round-robin
(`if i % world_size != rank: continue`) under `no_grad` are left alone: every rank makes that first
forward, and the uneven rest communicate nothing (tests/test_ddp_sync_semantics.py runs both).
Run on rank 0 alone, that broadcast pairs with whatever the other ranks do next (their gradient
all-reduce) or waits until the timeout.

## Example
```python
model = DDP(torchvision.models.resnet50().cuda(rank), device_ids=[rank])
...
if rank == 0:
    evaluate(model, val_loader)    # the wrapper's forward: a buffer broadcast on rank 0 only
```

## Use instead
```python
if rank == 0:
    evaluate(model.module, val_loader)   # the plain module does no communication
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.buffers import buffers_evident
from ddpdoctor.script.divergent import FORWARD_ONLY_HINT, forward_only
from ddpdoctor.script.names import dotted
from ddpdoctor.script.ranks import round_robin_split

CODE = "DDP312"
TITLE = "DDP forward of a model with buffers run by some ranks only"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def check(m):
    buffers = buffers_evident(m)
    if buffers is None:
        return
    for anchor, message, chain in forward_only(m, buffers):
        yield m.finding(
            CODE,
            anchor,
            message,
            SEVERITY,
            hint=FORWARD_ONLY_HINT,
            chain=chain,
        )
    for test, forward in _uneven_shares(m):
        yield m.finding(
            CODE,
            test,
            f"`{ast.unparse(test)}` deals the loop's items out to the ranks one by one, and each rank "
            f"runs the DDP model's forward (line {forward.lineno}) on its own: unless the count divides "
            f"by the world size, some ranks run one forward more, and each forward broadcasts the "
            f"buffers (line {buffers.lineno}: `{ast.unparse(buffers)[:40]}`), a collective the others "
            "never join: they hang or pair it with their next collective",
            SEVERITY,
            hint="run such forwards through the plain module (`model.module(x)`), or give every rank "
            "the same number of items (a DistributedSampler pads the last round)",
        )


def _uneven_shares(m):
    """(the split test, the forward) for each loop that deals its items out round-robin
    (`if i % world_size != rank: continue`, the nanoGPT HellaSwag evaluation) and runs a forward of
    the DDP wrapper itself on the items it keeps."""
    models = {name for c in m.ddp_constructors if (name := m.assigned_to(c)) is not None}
    if not models:
        return
    for loop in m.nodes(ast.For):
        split = round_robin_split(m, loop)
        if split is None:
            continue
        branch, _share, kept = split
        forward = next(
            (n for k in kept for n in ast.walk(k) if isinstance(n, ast.Call) and dotted(n.func) in models),
            None,
        )
        if forward is not None and not m.without_grad(forward):  # no-grad: one sync, every rank makes it
            yield branch.test, forward
