"""Training steps seen from a file that does not show the model's wrapper: the per-step all-reduce
that makes it one of several data-parallel ranks, and the loss scaler that runs the backward.

MAE's and DeiT's ``engine_*.py`` get the DDP model from ``main_*.py``; what tells that their
backward all-reduces is the metric they all-reduce beside it (``misc.all_reduce_mean(loss)``)."""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dotted


def reduces_across_ranks(m) -> bool:
    """The file all-reduces (``dist.all_reduce``, ``misc.all_reduce_mean``), gathers or waits at a
    barrier with the other ranks: it runs as one of several data-parallel ranks, whatever wraps the
    model it is handed."""
    found = m.__dict__.get("_steps_reduces")
    if found is None:
        found = m.__dict__["_steps_reduces"] = bool(
            m.dist_calls("all_reduce", "barrier", "all_gather", "all_gather_object", "reduce")
        ) or any("all_reduce" in (dotted(c.func) or "").rsplit(".", 1)[-1].lower() for c, _q in m.calls)
    return found


def last_name(e: ast.AST) -> str:
    """The last part of a name, lower case (``self.loss_scaler`` -> ``loss_scaler``); "" for others."""
    name = dotted(e) if isinstance(e, (ast.Name, ast.Attribute)) else None
    return name.rsplit(".", 1)[-1].lower() if name else ""


def backward_step_object(c: ast.Call) -> bool:
    """A call that does the backward (and the step) for the caller: a loss scaler called with the
    loss and the optimizer (``loss_scaler(loss, optimizer, ...)``, timm's NativeScaler and its
    copies), or a ``backward_step(loss, optimizer)`` of another module."""
    callee = last_name(c.func)
    if not c.args or not any(w in callee for w in ("scaler", "backward")) or "loss" not in last_name(c.args[0]):
        return False
    return any("optim" in last_name(a) for a in (*c.args[1:], *(k.value for k in c.keywords)))
