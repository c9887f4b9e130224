"""DDP510: every rank opens a TensorBoard writer on the same folder.

## What it does
Finds, in a distributed script, a TensorBoard `SummaryWriter` (torch's, tensorboardX's) that every
rank creates with the same log folder: no rank test around it or around a call that leads to it, and
a folder that does not name the rank or host, where the file also writes events (`add_scalar`,
`add_image`, ...) on every rank. A writer made on rank 0 only
(`SummaryWriter(d) if rank == 0 else None`), one per rank's own folder (`f"{d}/rank{rank}"`) and a
script that runs one process are left alone, and so is a writer only rank 0 writes to (the other
ranks' event files stay empty: clutter, not wrong curves).

## Why is this bad?
Each rank's writer adds its own event file to the one run folder, and TensorBoard draws them as one
run: every curve is there world-size times, each rank's own batch loss zig-zagging against the
others, and the folder fills with files nobody reads. Where the ranks write their validation numbers
too, the figure shown is whichever rank's event came last.

## Example
```python
dist.init_process_group("nccl")
writer = SummaryWriter(args.log_dir)
writer.add_scalar("loss", loss.item(), step)
```

## Use instead
```python
writer = SummaryWriter(args.log_dir) if dist.get_rank() == 0 else None
if writer is not None:
    writer.add_scalar("loss", loss.item(), step)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.apart import class_apart_from_distributed
from ddpdoctor.script.writers import every_rank_reaches, per_process_path

CODE = "DDP510"
TITLE = "Every rank opens a TensorBoard writer on the same folder"
KIND = "script"
SEVERITY = "info"
CONFIDENCE = "high"


def _log_dir(call: ast.Call) -> ast.AST | None:
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg in ("log_dir", "logdir")), None)


# SummaryWriter's event methods (torch.utils.tensorboard, tensorboardX)
_EVENT_WRITES = frozenset(
    (
        "add_scalar",
        "add_scalars",
        "add_image",
        "add_images",
        "add_figure",
        "add_histogram",
        "add_text",
        "add_audio",
        "add_video",
        "add_pr_curve",
        "add_embedding",
        "add_mesh",
        "add_hparams",
    )
)


def _writes_on_every_rank(m, gates: frozenset[str] = frozenset()) -> bool:
    """The file writes TensorBoard events where every rank gets (through whichever writer: a
    name, an attribute, a dict entry), and not behind one of ``gates``, the tests around the writer
    itself (``if is_logger:`` around the writer and every event: a flag the caller sets, on rank 0
    only as far as this file shows)."""
    return any(
        isinstance(c.func, ast.Attribute)
        and c.func.attr in _EVENT_WRITES
        and every_rank_reaches(m, c)
        and not (_tests_around(m, c) & gates)
        for c, _q in m.calls
    )


def _tests_around(m, node: ast.AST) -> frozenset[str]:
    return frozenset(ast.unparse(a.test) for a in m.ancestors(node) if isinstance(a, ast.If))


def _tensorboard_writer(q: str | None) -> bool:
    # torch's (`torch.utils.tensorboard[.writer].SummaryWriter`) and tensorboardX's
    return q is not None and q.endswith(".SummaryWriter") and "tensorboard" in q.lower()


def check(m):
    if m.one_process:
        return
    if not m.is_training_script and not m.distributed_context:
        return
    for call, q in m.calls:
        if not _tensorboard_writer(q):
            continue
        folder = _log_dir(call)
        if per_process_path(folder, m) or per_process_path(call, m):
            continue  # `SummaryWriter(f"{d}/rank{rank}")`, `SummaryWriter(comment=f"_r{rank}")`
        if not every_rank_reaches(m, call) or class_apart_from_distributed(m, call):
            continue
        if not _writes_on_every_rank(m, _tests_around(m, call)):
            return
        where = (
            f"`{ast.unparse(folder)}`" if folder is not None else "the default `runs/<time>_<host>` folder"
        )
        yield m.finding(
            CODE,
            call,
            f"every rank opens a TensorBoard SummaryWriter on {where}: one event file per rank in one "
            "run, every curve drawn world-size times",
            SEVERITY,
            hint="create the writer on rank 0 only (`SummaryWriter(d) if dist.get_rank() == 0 else None`) "
            "and write through it only there",
        )
        return  # one habit per file: the first writer stands for the others
