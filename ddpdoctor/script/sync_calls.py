"""Library calls known to synchronise every rank: a collective hidden inside Lightning, accelerate or
DeepSpeed. Called on one rank only, each waits forever like a bare ``dist.barrier()``.

A call matches when the file imports the library and the receiver is named for the library's object
(``trainer.save_checkpoint(...)`` in a file that imports lightning). Each row carries the fact it
rests on; a call that is not in the table is unknown, and unknown is not guilty.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ddpdoctor.script.names import dotted
from ddpdoctor.script.nodes import may_show


@dataclass(frozen=True)
class SyncCall:
    libraries: tuple[str, ...]  # import prefixes: the file must import one of them
    receivers: tuple[str, ...]  # the last part of the receiver's name (``self.trainer`` -> trainer)
    method: str
    op: str  # the collective it amounts to, as torch.distributed names it


_LIGHTNING = ("lightning", "pytorch_lightning")
_ACCELERATE = ("accelerate",)

TABLE: tuple[SyncCall, ...] = (
    # lightning/pytorch/trainer/trainer.py, Trainer.save_checkpoint: "needs to be called on all
    # processes"; it ends in self.strategy.barrier("Trainer.save_checkpoint")
    SyncCall(_LIGHTNING, ("trainer",), "save_checkpoint", "barrier"),
    # lightning/pytorch/strategies/strategy.py: Strategy.barrier and Strategy.broadcast are the
    # strategy's collectives (torch.distributed.barrier / broadcast_object_list under DDP)
    SyncCall(_LIGHTNING, ("strategy",), "barrier", "barrier"),
    SyncCall(_LIGHTNING, ("strategy",), "broadcast", "broadcast"),
    # lightning/fabric/fabric.py: Fabric.barrier, all_reduce, all_gather, broadcast
    SyncCall(_LIGHTNING, ("fabric",), "barrier", "barrier"),
    SyncCall(_LIGHTNING, ("fabric",), "all_reduce", "all_reduce"),
    SyncCall(_LIGHTNING, ("fabric",), "all_gather", "all_gather"),
    SyncCall(_LIGHTNING, ("fabric",), "broadcast", "broadcast"),
    # accelerate/state.py, PartialState.wait_for_everyone: torch.distributed.barrier() under DDP
    SyncCall(_ACCELERATE, ("accelerator", "state"), "wait_for_everyone", "barrier"),
    # accelerate/utils/operations.py: gather -> all_gather, reduce -> all_reduce,
    # pad_across_processes gathers every rank's size first
    SyncCall(_ACCELERATE, ("accelerator",), "gather", "all_gather"),
    SyncCall(_ACCELERATE, ("accelerator",), "gather_for_metrics", "all_gather"),
    SyncCall(_ACCELERATE, ("accelerator",), "reduce", "all_reduce"),
    SyncCall(_ACCELERATE, ("accelerator",), "pad_across_processes", "all_gather"),
    # deepspeed/runtime/engine.py, DeepSpeedEngine.save_checkpoint: "all processes must call this
    # method and not just the process with rank 0" (it gathers and ends in a barrier)
    SyncCall(("deepspeed",), ("model_engine", "engine", "ds_engine"), "save_checkpoint", "barrier"),
)

_BY_METHOD: dict[str, tuple[SyncCall, ...]] = {}
for _row in TABLE:
    _BY_METHOD[_row.method] = (*_BY_METHOD.get(_row.method, ()), _row)


# Context managers that let one process go first and the others wait: each process passes one
# barrier (the others on entry, the first one on exit). accelerate/state.py
# PartialState.main_process_first / local_main_process_first (wait_for_everyone around the block);
# transformers TrainingArguments.main_process_first (torch.distributed.barrier); and the
# `torch_distributed_zero_first(local_rank)` idiom that YOLOv5 made common (barrier before the block
# on ranks != 0, after it on rank 0), whatever file defines it.
_FIRST_CONTEXTS = ("main_process_first", "zero_first")
FIRST_CONTEXT = SyncCall((), (), "<main process first>", "barrier")


def first_process_block(m, node: ast.AST) -> ast.With | None:
    """The ``with torch_distributed_zero_first(rank):`` (or ``main_process_first()``) block ``node``
    runs in: one process runs it first while the others wait, then they run it."""
    for a in m.ancestors(node):
        if isinstance(a, (ast.With, ast.AsyncWith)):
            for item in a.items:
                e = item.context_expr
                if isinstance(e, ast.Call) and any(w in (dotted(e.func) or "").rsplit(".", 1)[-1] for w in _FIRST_CONTEXTS):
                    return a
    return None


def imported_libraries(aliases: dict[str, str]) -> frozenset[str]:
    """The table's libraries this file imports (``aliases``: local name -> qualified name)."""
    roots = {v.split(".", 1)[0] for v in aliases.values()}
    return frozenset(lib for row in TABLE for lib in row.libraries if lib in roots)


def sync_call(call: ast.Call, libraries: frozenset[str]) -> SyncCall | None:
    """The table row ``call`` matches, given the libraries its file imports; else None."""
    func = call.func
    last = (dotted(func) or "").rsplit(".", 1)[-1]
    if any(w in last for w in _FIRST_CONTEXTS):
        return FIRST_CONTEXT
    if not libraries or not isinstance(func, ast.Attribute):
        return None
    rows = _BY_METHOD.get(func.attr)
    if rows is None:
        return None
    owner = dotted(func.value)
    if owner is None:
        return None
    last = owner.rsplit(".", 1)[-1].lower()
    for row in rows:
        if last in row.receivers and any(lib in libraries for lib in row.libraries):
            return row
    return None


def grads_reduced_by_hand(m) -> bool:
    """The file reduces gradients itself (``dist.all_reduce(p.grad)``, ``average_gradients(model)``):
    a model trained outside the DDP wrapper may still be kept in step. (Asked up to once per
    training call by DDP408: answered once per file.)"""
    found = m.__dict__.get("_grads_reduced_by_hand")
    if found is None:
        found = m.__dict__["_grads_reduced_by_hand"] = _grads_reduced_by_hand(m)
    return found


def _grads_reduced_by_hand(m) -> bool:
    for call, _q in m.calls:
        name = (dotted(call.func) or "").rsplit(".", 1)[-1].lower()
        if "reduce" in name or "average" in name or "sync" in name:
            if may_show(call, "grad", fold=True) and "grad" in ast.unparse(call).lower():
                return True
    return False
