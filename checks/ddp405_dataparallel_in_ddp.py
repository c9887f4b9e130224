"""DDP405: DataParallel as the one-process fallback of a distributed script.

## What it does
Finds `torch.nn.DataParallel` as the single-process multi-GPU fallback of a script that also runs
under torch.distributed (`elif torch.cuda.device_count() > 1: model = nn.DataParallel(model)`).
DataParallel where the distributed run uses it is DDP413.

## Why is this bad?
It is not wrong but slow (one process drives every GPU, the model is replicated each step):
PyTorch recommends DistributedDataParallel even on one machine.

## Example
```python
if args.distributed:
    model = DDP(model, device_ids=[local_rank])
elif torch.cuda.device_count() > 1:
    model = nn.DataParallel(model)
```

## Use instead
```python
# launch with `torchrun --nproc-per-node=N` on one machine too, and keep only the DDP path
model = DDP(model, device_ids=[local_rank])
```
"""

from __future__ import annotations

from ddpdoctor.script import ranks

CODE = "DDP405"
TITLE = "DataParallel as the one-process fallback of a distributed script"
KIND = "script"
SEVERITY = "info"
CONFIDENCE = "medium"
# why it is not in the default selection (benchmarks/lint_rule_precision.py on the labelled sets)
OPT_IN_BECAUSE = (
    "the labellers of real code disagree on the one-process DataParallel fallback beside a DDP path: "
    "of its 15 labelled reports on 43 sets of real code 13 are bugs and two are marked correct "
    "(precision 0.87, under the 0.95 a default rule needs)"
)


def check(m):
    if not m.uses_distributed:
        return
    for call in m.calls_named("DataParallel"):
        if ranks.dataparallel_in_distributed_run(m, call):
            continue  # DDP413
        yield m.finding(
            CODE,
            call,
            "`DataParallel` as the single-process multi-GPU path: it is slower than "
            "DistributedDataParallel even on one machine (PyTorch recommends DDP)",
            "info",
            hint="launch with `torchrun --nproc-per-node=N` and use the DDP path instead",
        )
