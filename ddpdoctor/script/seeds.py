"""Seeding calls: what a script seeds its random states with."""

from __future__ import annotations

import ast


def seeded_from_own_parameters(m, call: ast.Call, args: list[ast.AST]) -> bool:
    """A seeding call inside the file's own seeding helper (``def set_seed(seed):
    torch.manual_seed(seed)``), seeded from that helper's parameters only: its callers say what the
    seed is."""
    fn = m.enclosing_function(call)
    if fn is None or "seed" not in getattr(fn, "name", "").lower() or not args:
        return False
    params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    names = [n.id for a in args for n in ast.walk(a) if isinstance(n, ast.Name)]
    return bool(names) and all(n in params for n in names)
