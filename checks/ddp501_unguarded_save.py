"""DDP501: torch.save not guarded by rank.

## What it does
Finds `torch.save` that every rank reaches (per the per-rank interpreter, or syntactically when the
code is not reached from the script's entry point) in a distributed script, writing to a path that
does not depend on the rank.

## Why is this bad?
All N ranks write the same file at the same time: N times the I/O, and on shared file systems
interleaved writes produce a truncated or corrupt checkpoint that fails only when you load it.

## Example
```python
torch.save(model.module.state_dict(), "ckpt.pt")
```

## Use instead
```python
if dist.get_rank() == 0:
    torch.save(model.module.state_dict(), "ckpt.pt")
dist.barrier()
```
"""

from __future__ import annotations

import ast

from ddpdoctor.lint.names import dotted

CODE = "DDP501"
TITLE = "torch.save not guarded by rank"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


_STREAMS = ("BytesIO", "open", "NamedTemporaryFile", "TemporaryFile", "SpooledTemporaryFile")


def _target(m, call):
    return call.args[1] if len(call.args) > 1 else m.keyword(call, "f")


def _rank_in_path(m, call) -> bool:
    arg = _target(m, call)
    text = ast.unparse(arg).lower() if arg is not None else ""
    return "rank" in text or "shard" in text


def _to_stream(m, call) -> bool:
    """Saving into a buffer or a file object opened here (``with open(p, "wb") as f``): whoever opened it
    chose the path; an in-memory BytesIO writes nothing."""
    arg = _target(m, call)
    if isinstance(arg, ast.Call):
        return (dotted(arg.func) or "").rsplit(".", 1)[-1] in _STREAMS
    if not isinstance(arg, ast.Name):
        return False
    scope = m.enclosing_function(call) or m.tree
    for node in ast.walk(scope):
        if isinstance(node, ast.withitem) and isinstance(node.optional_vars, ast.Name):
            if node.optional_vars.id == arg.id:
                return True
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if any(isinstance(t, ast.Name) and t.id == arg.id for t in node.targets):
                if (dotted(node.value.func) or "").rsplit(".", 1)[-1] in _STREAMS:
                    return True
    return False


_ENTRY_NAMES = ("main", "train", "run", "worker", "fit", "demo")


def _unguarded_entry(m, call) -> bool:
    """Code the script's own entry point does not reach: report it only if the file calls its function
    without a rank guard, or the function looks like an entry point itself (a library helper's caller
    decides who saves)."""
    fn = m.enclosing_function(call)
    if fn is None:
        return True
    if m.call_sites(fn):
        return not m.callers_all_guarded(fn)
    return any(fn.name.lower().startswith(n) or fn.name.lower().endswith(n) for n in _ENTRY_NAMES)


def _guard_on_the_way(m, call) -> bool:
    """A rank test the interpreter could not evaluate (``args.rank % ngpus_per_node == 0``) still reads
    as a guard: on the save itself or on a call that led to it."""
    if m.guarded_by_rank(call):
        return True
    lines = {ln for run in m.runs for t in run.traces for e in t.events if e.node is call for ln in e.chain}
    return any(c.lineno in lines and m.guarded_by_rank(c) for c, _ in m.calls)


def check(m):
    if not m.is_training_script and not m.dist_calls("get_rank"):
        return
    for call in m.calls_named("torch.save"):
        if _rank_in_path(m, call) or _to_stream(m, call):
            continue  # per-rank files are meant to be written by every rank
        if _guard_on_the_way(m, call):
            continue
        reach = m.reach(call)
        if reach:
            if not any(len(ranks) == run.world_size for run, ranks in reach):
                continue  # only some ranks get here
            if all(run.entry != "<module>" for run, _ in reach) and not _unguarded_entry(m, call):
                continue
        elif m.guarded_by_rank(call) or not _unguarded_entry(m, call):
            continue
        yield m.finding(
            CODE,
            call,
            "`torch.save` runs on every rank: all ranks write the same file at once",
            SEVERITY,
            hint="save on rank 0 only (`if dist.get_rank() == 0:`), then `dist.barrier()`",
        )
