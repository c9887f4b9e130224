"""A DDP wrapper given up before use: ``model = DDP(model)`` and then, before anything reads the
wrapper, ``model = model.module`` or ``self.model = torch.compile(model)``. DDP408 reports the
replacing line; DDP409 leaves the forwards of the name it rebinds to DDP408 (one finding per cause)."""

from __future__ import annotations

import ast

from ddpdoctor.script.branches import arms, in_loop
from ddpdoctor.script.names import dotted


def _loads(node: ast.AST, key: str) -> list[ast.AST]:
    """Reads of ``key`` (a name or ``self.model``) in ``node``."""
    return [
        n
        for n in ast.walk(node)
        if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Load) and dotted(n) == key
    ]


def replaced_before_use(m, call: ast.Call) -> ast.Assign | None:
    """``model = DDP(model, ...)`` and then, before anything reads the wrapper, ``model =
    model.module`` (the wrapper's own module back) or ``self.model = torch.compile(model)`` (a
    value made without it): the assignment that throws the wrapper away, else None."""
    assign = m.parents.get(call)
    if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1):
        return None
    key = dotted(assign.targets[0])
    scope = m.enclosing_function(assign) or m.tree
    if key is None or in_loop(m, assign, scope):
        return None
    after = sorted(
        (st for st in ast.walk(scope) if isinstance(st, ast.stmt) and st.lineno > (assign.end_lineno or assign.lineno)),
        key=lambda st: (st.lineno, st.col_offset),
    )
    here = arms(m, assign, scope)
    wraps = {id(c) for c in m.ddp_constructors}
    for st in after:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if m.enclosing_function(st) is not m.enclosing_function(assign):
            continue  # a function defined here runs later, when called
        if any(arms(m, st, scope).get(i, arm) != arm for i, arm in here.items()):
            continue  # the other arm of an `if` that holds the wrap: a path without the wrapper
        if isinstance(st, ast.Assign) and any(dotted(t) == key for t in st.targets):
            if set(arms(m, st, scope)) - set(here) and any(_unwraps(m, r) for r in _loads(st.value, key)):
                # the wrapper's own module taken back under a test of its own (`if archi == "vqgan":
                # model = model.module`): a choice for that case; the other paths keep the wrapper
                continue
            used = [r for r in _loads(st.value, key) if not _unwraps(m, r)]
            rewrapped = any(id(c) in wraps for c in ast.walk(st.value))  # another wrapper: a constructor test
            return None if used or rewrapped else st
        if isinstance(st, (ast.If, ast.While, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.Try)):
            heads = [getattr(st, f) for f in ("test", "iter") if getattr(st, f, None) is not None]
            heads += [i.context_expr for i in getattr(st, "items", ())]
            if any(_loads(h, key) for h in heads):
                return None
            continue  # its body's statements come next in the list
        if _loads(st, key):
            return None
    return None


def _unwraps(m, read: ast.AST) -> bool:
    parent = m.parents.get(read)
    return isinstance(parent, ast.Attribute) and parent.attr == "module"


def replacements(m) -> list[tuple[ast.Assign, ast.Call]]:
    """(the assignment that gives a wrapper up, the DDP call that made it) for each such wrapper of
    the file, found once per file (DDP408 and DDP409 both ask)."""
    found = m.__dict__.get("_wrapper_replacements")
    if found is None:
        found = [(st, call) for call in m.ddp_constructors if (st := replaced_before_use(m, call)) is not None]
        m.__dict__["_wrapper_replacements"] = found
    return found
