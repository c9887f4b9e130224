"""DDP310: a metric of one rank's shard, reported by one rank as the whole dataset's.

## What it does
Follows what an evaluation computes from a loader given a `DistributedSampler` (a loop over it
that runs no backward pass, in a function named for evaluation or over a loader named for a
held-out split, also in the file's function the loader is handed to, through returns, assignments
and the lists it appends to) to the places where a rank test lets one rank use it: a `print`, a
logger or TensorBoard/wandb call, a "best so far" comparison, a checkpoint decision (`if rank == 0:
print(acc)`, `if local_rank == 0 and val_loss < best:`; a plain `print` after
`setup_for_distributed(rank == 0)`, which silences print on the other ranks; accelerate's
`accelerator.print`, with a loader handed back by `accelerator.prepare` as the sharded one). A "best
so far" test that every rank takes by its own shard's figure counts too: it picks the checkpoint that
rank 0 saves, and the ranks may disagree. A value handed to a collective first (`dist.all_reduce`,
`reduce_tensor(...)`, `all_gather`) is the same on every rank and is left alone; so are uses inside
the evaluation loop (a progress bar's running figure) and an evaluation only some ranks run (DDP309).
A training pass's figures over the rank's shard count only where one rank decides by them (the best
checkpoint by the epoch's training loss); printed or logged they are a progress report.

## Why is this bad?
A DistributedSampler hands each rank 1/world_size of the validation set. The accuracy or loss rank 0
computes is over its shard alone; printed, logged or used to pick the best checkpoint as if it were
the whole set's, it is noisier than it looks, changes with the number of GPUs, and the "best" model
is chosen on a fraction of the data. Nothing fails.

## Example
```python
val_loss = 0.0
for x, y in val_loader:                     # DistributedSampler: this rank's shard
    val_loss += criterion(model(x), y).item()
if rank == 0:
    print(f"val loss {val_loss / len(val_loader):.4f}")
```

## Use instead
```python
t = torch.tensor([val_loss, len(val_loader)], device=device)
dist.all_reduce(t)                          # every rank: the whole set's sum
if rank == 0:
    print(f"val loss {(t[0] / t[1]).item():.4f}")
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.analysis import names_eval_split
from ddpdoctor.script.divergence import RankValues
from ddpdoctor.script.loaders import loop_root, sharded_passes, trains
from ddpdoctor.script.names import dotted, name_words, names_evaluation
from ddpdoctor.script.ranks import guard_kind

CODE = "DDP310"
TITLE = "One rank's shard metric reported as the whole"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "medium"
OPT_IN_BECAUSE = (
    "at the line: on the 42 labelled folders of 2026-11-28, 19 of its 20 reports not on a line labelled "
    "both ways were bugs (0.95, the bar exactly); 3 more fall on lines labelled correct for another "
    "question (a guarded save or log) where the metric is still one rank's shard, and the shared "
    "scorer counts those false: switched on it adds 14 bugs found for 4 reports counted false, so it "
    "stays opt-in until code nobody has seen shows more"
)


# what a metric is called (`val_loss`, `top1`, `mIoU`, `psnr`): what is reported, not a batch
_METRIC_WORDS = frozenset((
    "loss", "losses", "acc", "accuracy", "metric", "metrics", "score", "scores", "f1", "auc", "ap",
    "map", "iou", "miou", "psnr", "ssim", "bleu", "wer", "cer", "ppl", "perplexity", "error", "err",
    "top1", "top5", "prec", "precision", "recall", "dice", "mae", "mse", "rmse", "fid", "correct",
    "best",  # `is_best`, `self.best_pred`: a best-so-far figure, or the decision made from one
))


_EVERY_RANK = object()  # (no rank test: every rank uses its own shard's figure)


def _names_metric(node: ast.AST) -> bool:
    text = ast.unparse(node)
    parts = {p.lower() for p in text.split(".")}  # `top1`, `self.best_acc`, `meter.avg`
    words = {w.lower() for w in name_words(text)} | parts
    words |= {w[:-1] for w in words if w.endswith("s") and len(w) > 3}  # `valid_accs`, `ious`
    return bool(words & _METRIC_WORDS) and "train" not in words


def _message_of_metrics(m, node: ast.AST) -> bool:
    """``log_str`` in ``print(log_str)`` after ``log_str = f"valid loss {valid_loss:5.2f} ..."``:
    a text made of metrics (an f-string, ``"...".format(...)``, ``%`` or ``+`` of strings) in the
    same function is reported with them."""
    if not isinstance(node, ast.Name):
        return False
    fn = m.enclosing_function(node)
    values = [
        a.value
        for a in m.nodes(ast.Assign)
        if a.lineno < node.lineno
        and any(isinstance(t, ast.Name) and t.id == node.id for t in a.targets)
        and m.enclosing_function(a) is fn
    ]
    return bool(values) and all(_text_of_metrics(v) for v in values)


def _text_of_metrics(value: ast.AST) -> bool:
    textual = (
        isinstance(value, ast.JoinedStr)
        or (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "format")
        or (isinstance(value, ast.BinOp) and isinstance(value.left, (ast.Constant, ast.JoinedStr)))
    )
    return textual and any(
        isinstance(n, (ast.Name, ast.Attribute)) and _names_metric(n) for n in ast.walk(value)
    )


def _evaluates(m, loop: ast.AST) -> bool:
    """An evaluation: the loop is in a function named for one (``validate``, ``evaluate_epoch``) or
    reads a loader named for a held-out split (``val_loader``, ``test_dl``); not a pass that
    estimates a statistic of the training data."""
    fn = m.enclosing_function(loop)
    if fn is not None and names_evaluation(fn.name):
        return True
    return names_eval_split(dotted(loop_root(loop.iter)) or "")


def _one_rank_test(m, test: ast.AST) -> bool:
    """``rank == 0``, or a conjunction with such a part (``local_rank == 0 and acc > best``)."""
    if guard_kind(m, test) is not None:
        return True
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and any(
        guard_kind(m, v) is not None for v in test.values
    )


def _reported_by_one_rank(m, node: ast.AST) -> ast.AST | None:
    """The rank test under which ``node`` runs (or whose own test reads it), else None."""
    child = node
    for a in m.ancestors(node):
        if isinstance(a, ast.If):
            if child is a.test and _one_rank_test(m, a.test):
                return a.test
            if child is not a.test and guard_kind(m, a.test) is not None:
                return a.test
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            break
        child = a
    guard = m.rank_guard(node)
    if guard is not None and guard.path is None:
        return guard.test
    return _print_silenced_elsewhere(m, node)


def _print_silenced_elsewhere(m, node: ast.AST) -> ast.AST | None:
    """The rank test handed to ``setup_for_distributed(rank == 0)`` (the helper that replaces
    ``print`` with one that stays silent on the other ranks) when ``node`` is printed by a plain
    ``print(...)``: one rank prints it."""
    call = next((a for a in m.ancestors(node) if isinstance(a, ast.Call)), None)
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "print"
        and (dotted(call.func.value) or "").rsplit(".", 1)[-1] == "accelerator"
    ):
        return call.func  # accelerate's print: on the main process only
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print"):
        return None
    if m.keyword(call, "force") is not None:
        return None
    for c, _q in m.calls:
        if (dotted(c.func) or "").rsplit(".", 1)[-1] == "setup_for_distributed" and c.args:
            if guard_kind(m, c.args[0]) is not None:
                return c.args[0]
    return None


def _in_training_loop(m, node: ast.AST) -> bool:
    """Inside a loop over batches that trains (a training step's own figures: logging-only, as
    labellers judge it); an epoch loop (`for epoch in range(n)`) is not one."""
    loop = next((a for a in m.ancestors(node) if isinstance(a, (ast.For, ast.AsyncFor))), None)
    if loop is None:
        return False
    it = loop_root(loop.iter)
    if isinstance(it, ast.Call) and (dotted(it.func) or "").rsplit(".", 1)[-1] in ("range", "trange"):
        return False
    return trains(m, loop)


def _sees_the_evaluation(m, fn, loop: ast.AST) -> bool:
    """The use is in the evaluation's own function, or in one that calls it (``acc = validate(...)``):
    not in another function whose like-named value only the analysis' per-name returns tie to it."""
    own = m.enclosing_function(loop)
    if own is None or fn is own:
        return True
    return fn is not None and any(
        isinstance(c, ast.Call) and (dotted(c.func) or "").rsplit(".", 1)[-1] == own.name for c in ast.walk(fn)
    )


def _method_of(m, attr: ast.Attribute) -> bool:
    call = m.parents.get(attr)
    return isinstance(call, ast.Call) and call.func is attr


def _inside(node: ast.AST, loop: ast.AST) -> bool:
    return loop.lineno <= node.lineno <= (loop.end_lineno or loop.lineno)


def _decides_best(m, node: ast.AST) -> bool:
    """``node`` is compared in the test of an ``if`` (``if epoch_loss < self.best_loss:``): a
    decision, such as which checkpoint is the best, not a figure shown."""
    child = node
    for a in m.ancestors(node):
        if isinstance(a, ast.If):
            return child is a.test and any(
                isinstance(c, ast.Compare) and any(isinstance(o, (ast.Lt, ast.Gt, ast.LtE, ast.GtE)) for o in c.ops)
                for c in ast.walk(a.test)
            )
        if isinstance(a, ast.stmt):
            return False
        child = a
    return False


def _printed(m, node: ast.AST) -> bool:
    """``node`` is an argument of ``print(...)`` (also inside an f-string): shown, not kept."""
    for a in m.ancestors(node):
        if isinstance(a, ast.Call):
            return isinstance(a.func, ast.Name) and a.func.id == "print"
        if isinstance(a, ast.stmt):
            return False
    return False


def check(m):
    if not m.distributed_context or m.one_process:
        return
    sharded = sharded_passes(m)
    if not sharded:
        return
    loops = [
        n for n in m.nodes(ast.For, ast.AsyncFor) if id(n) in sharded and not trains(m, n) and _evaluates(m, n)
    ]
    # an evaluation only some ranks run is DDP309's
    loops = [loop for loop in loops if m.rank_guard(loop) is None]
    # a training pass's figures count only where one rank decides by them (the best checkpoint by
    # the epoch's training loss); printed or logged, labellers call them a progress report
    training = [
        n for n in m.nodes(ast.For, ast.AsyncFor) if id(n) in sharded and trains(m, n) and m.rank_guard(n) is None
    ]
    if not loops and not training:
        return
    # (`dist.reduce(acc, dst=0)` gives rank 0 the whole: counted as reduced here)
    values = RankValues(m, frozenset(id(loop) for loop in loops), to_one_rank=True) if loops else None
    by_training = RankValues(m, frozenset(id(n) for n in training), to_one_rank=True) if training else None
    trained = {id(n) for n in training}
    found: dict[int, list] = {}  # origin loop -> (node, test, origin) of each one-rank use
    for node in m.nodes(ast.Name, ast.Attribute):
        parent = m.parents.get(node)
        if not isinstance(node.ctx, ast.Load):
            continue
        if isinstance(parent, ast.Call) and parent.func is node:
            continue  # a method called (`meter.update(...)`), not a value reported
        if isinstance(parent, ast.Attribute) and not _method_of(m, parent):
            continue  # (the whole `a.b.c` is read once, at its outermost node; `top1.mean()` reads top1)
        if not (_names_metric(node) or _message_of_metrics(m, node)):
            continue
        fn = m.enclosing_function(node)
        origin = values.reads(node, fn) if values is not None else None
        if (origin is None or not origin.data) and by_training is not None and _decides_best(m, node):
            origin = by_training.reads(node, fn)
        if origin is None or not origin.data:
            continue
        if any(_inside(node, loop) for loop in loops) or (
            _in_training_loop(m, node) and id(origin.node) in trained
        ):
            continue  # the running figure inside the evaluation itself, or a training step's
            # (an evaluation run every k steps from inside the training loop is reported)
        if id(origin.node) in trained and (_inside(node, origin.node) or not _decides_best(m, node)):
            continue
        test = _reported_by_one_rank(m, node)
        if test is None and id(origin.node) not in trained and _decides_best(m, node):
            test = _EVERY_RANK  # each rank picks its own "best" by its own part
        if test is None or not _sees_the_evaluation(m, fn, origin.node):
            continue
        found.setdefault(id(origin.node), []).append((node, test, origin))
    for uses in found.values():
        # one finding per evaluation: the use beside it first, and one that lasts (a log file, a
        # tracker, a best-checkpoint test) before a console print
        node, test, origin = min(
            uses,
            key=lambda u: (
                m.enclosing_function(u[0]) is not m.enclosing_function(u[2].node),
                not _decides_best(m, u[0]),  # the decision it drives (the best checkpoint), where one is
                _printed(m, u[0]),
                u[0].lineno,
            ),
        )
        who = (
            "every rank decides by its own shard's figure here, so the ranks may disagree"
            if test is _EVERY_RANK
            else f"only the main process prints it (`{ast.unparse(test)}`, line {test.lineno})"
            if isinstance(test, ast.Attribute) and test.attr == "print"
            else f"only the ranks that pass `{ast.unparse(test)[:40]}` (line {test.lineno}) use it here"
        )
        yield m.finding(
            CODE,
            node,
            f"`{ast.unparse(node)}` comes from this rank's own shard of the data (the loop on line "
            f"{origin.node.lineno} reads a loader sharded across the ranks) and is never reduced, "
            f"but {who}: it describes 1/world_size of the dataset, not the whole",
            SEVERITY,
            hint="all-reduce the sums and counts first (`dist.all_reduce(t)`), then report or compare",
            chain=m.chain_text([origin.node.lineno] + ([] if test is _EVERY_RANK else [test.lineno]), node.lineno),
        )
