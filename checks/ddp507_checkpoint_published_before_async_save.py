"""DDP507: a checkpoint published before its asynchronous save has finished.

## What it does
Finds an asynchronous checkpoint save (`torch.distributed.checkpoint.async_save`, or the `save` of
an object named for async checkpointing) followed, in the same function and with no `.wait()` or
`.result()` in between, by code that declares the checkpoint complete: pointing a `latest` link or
file at it (`symlink_to`, `os.symlink`, `os.replace`/`rename`) or deleting older checkpoints
(`shutil.rmtree`, a `cleanup`/`prune`/`rotate` helper).

## Why is this bad?
The async save has only been dispatched: the shards are still being written in the background.
If the job crashes or is preempted during the flush, `latest` names a checkpoint without its
metadata, and the older complete checkpoints are already gone: the run cannot resume at all.

## Example
```python
future = dcp.async_save(state, checkpoint_id=str(step_dir))
latest.unlink(missing_ok=True)
latest.symlink_to(step_dir.name)
prune_old_checkpoints(keep=2)
```

## Use instead
```python
future = dcp.async_save(state, checkpoint_id=str(step_dir))
future.result()               # or publish from a done-callback of the future
latest.unlink(missing_ok=True)
latest.symlink_to(step_dir.name)
prune_old_checkpoints(keep=2)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dotted

CODE = "DDP507"
TITLE = "Checkpoint published before its async save finished"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

_WAITS = ("wait", "result", "join", "synchronize", "finalize", "flush")
_PUBLISH_METHODS = ("symlink_to", "hardlink_to")
_PUBLISH_FUNCS = ("os.symlink", "os.replace", "os.rename", "shutil.rmtree", "shutil.move")
_CLEANUP_WORDS = ("cleanup", "clean_up", "prune", "rotate", "remove_old", "delete_old", "purge")


def _async_save(m, call: ast.Call, q: str | None) -> bool:
    if q and q.endswith("async_save"):
        return True
    f = call.func
    if isinstance(f, ast.Attribute) and "save" in f.attr.lower():
        return "async" in (dotted(f.value) or "").lower()
    return False


def _publishes(call: ast.Call, q: str | None) -> str | None:
    f = call.func
    name = (q or dotted(f) or (f.attr if isinstance(f, ast.Attribute) else "")).lower()
    last = name.rsplit(".", 1)[-1]
    if isinstance(f, ast.Attribute) and f.attr in _PUBLISH_METHODS:
        return "points a link at the checkpoint"
    if q in _PUBLISH_FUNCS:
        return "deletes older checkpoints" if q == "shutil.rmtree" else "publishes the checkpoint"
    if (
        isinstance(f, ast.Attribute)
        and f.attr in ("rename", "replace")
        and "latest" in ast.unparse(f.value).lower()
    ):
        return "points `latest` at the checkpoint"
    if any(w in last for w in _CLEANUP_WORDS):
        return "deletes older checkpoints"
    return None


def check(m):
    if not m.mentions("async"):
        return
    saves = [c for c, q in m.calls if _async_save(m, c, q)]
    done: set[int] = set()
    for save in saves:
        fn = m.enclosing_function(save)
        if id(fn) in done:
            continue  # the first async save of a function stands for the others
        done.add(id(fn))
        lo, hi = (fn.lineno, fn.end_lineno) if fn is not None else (1, len(m.lines))
        calls = [(c, q) for c, q in m.calls if lo <= c.lineno <= hi and m.enclosing_function(c) is fn]
        waits = [c.lineno for c, _q in calls if isinstance(c.func, ast.Attribute) and c.func.attr in _WAITS]
        for call, q in calls:
            if call.lineno <= save.lineno or any(save.lineno < w <= call.lineno for w in waits):
                continue
            what = _publishes(call, q)
            if what is None or any(isinstance(a, ast.Lambda) for a in m.ancestors(call)):
                continue  # a lambda runs later (a done-callback of the future)
            yield m.finding(
                CODE,
                call,
                f"this {what} while the async save at line {save.lineno} may still be writing: a "
                "crash during the flush leaves no complete checkpoint to resume from",
                SEVERITY,
                hint="wait for the save first (`future.result()`), or publish from its done-callback",
                chain=[save.lineno, call.lineno],
            )
            break  # one finding per unfinished save
