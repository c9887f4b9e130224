"""Which model code trains: one the caller hands it (``def train_one_epoch(model, ...)``, a
trainer's ``self.model``), the model a distributed job wraps in DDP where it builds it."""

from __future__ import annotations

import ast

_MODEL_WORDS = ("model", "net", "module")


def handed_a_model(m, node: ast.AST) -> bool:
    """``node`` runs in a function handed its model by the caller (``def train_one_epoch(model,
    ...)``, a trainer method on ``self.model``): the caller's model is the one the job wraps in DDP.
    A model the file builds and trains at the top level (``model = GPT(...)``) it would have
    wrapped here."""
    fn = m.enclosing_function(node)
    if fn is None:
        return False
    params = [a.arg.lower() for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]
    if any(any(w in p for w in _MODEL_WORDS) for p in params):
        return True
    return bool(params) and params[0] == "self" and any(
        isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
        and any(w in n.attr.lower() for w in _MODEL_WORDS)
        for n in ast.walk(fn)
    )
