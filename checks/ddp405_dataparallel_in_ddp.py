"""DDP405: DataParallel in a distributed script.

## What it does
Finds `torch.nn.DataParallel` in a script that uses torch.distributed: as an error where DDP runs
(or both wrappers stack), and as a note where it is the script's single-process multi-GPU fallback
(`elif torch.cuda.device_count() > 1: model = nn.DataParallel(model)`).

## Why is this bad?
DataParallel is single-process multi-GPU: inside a DDP job each rank would replicate the model over
every visible GPU, fighting the other ranks for them, and gradients are not synchronised across
ranks. As the fallback it is not wrong but slow (one process drives every GPU, the model is
replicated each step): PyTorch recommends DistributedDataParallel even on one machine.

## Example
```python
dist.init_process_group("nccl")
model = nn.DataParallel(model)
```

## Use instead
```python
model = DDP(model.to(local_rank), device_ids=[local_rank])
```
"""

from __future__ import annotations

CODE = "DDP405"
TITLE = "DataParallel in a distributed script"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "medium"
# why it is not in the default selection (benchmarks/lint_rule_precision.py on the labelled sets)
OPT_IN_BECAUSE = (
    "the labellers of real code disagree on the one-process DataParallel fallback beside a DDP path: "
    "of its six labelled reports five are bugs and one is marked correct (precision 0.83, under the "
    "0.95 a default rule needs)"
)


def check(m):
    if not m.uses_distributed:
        return
    for call in m.calls_named("DataParallel"):
        if m.conditional(call):
            # the single-process fallback of a script that also supports DDP: slow, not broken
            yield m.finding(
                CODE,
                call,
                "`DataParallel` as the single-process multi-GPU path: it is slower than "
                "DistributedDataParallel even on one machine (PyTorch recommends DDP)",
                "info",
                hint="launch with `torchrun --nproc-per-node=N` and use the DDP path instead",
            )
            continue
        yield m.finding(
            CODE,
            call,
            "`DataParallel` in a torch.distributed script: each rank would spread over "
            "every GPU and gradients are not synchronised across ranks",
            SEVERITY,
            hint="wrap with DistributedDataParallel only, one process per GPU",
        )
