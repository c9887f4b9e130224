"""Which communication backend a script's process group uses, as far as its text says."""

from __future__ import annotations

import ast


def nccl_only(m, call: ast.Call) -> bool:
    """``init_process_group`` ``call`` names NCCL and no other backend: as a constant, or through a
    name the file assigns it to (``backend = "nccl"``). ``"nccl" if cuda else "gloo"`` is not."""
    expr = m.keyword(call, "backend") or (call.args[0] if call.args else None)
    if expr is None:
        return False
    texts = [n.value for n in ast.walk(expr) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    if isinstance(expr, ast.Name):  # backend = "nccl" assigned somewhere in the file
        for node in m.nodes(ast.Assign):
            if any(isinstance(t, ast.Name) and t.id == expr.id for t in node.targets):
                texts += [
                    n.value
                    for n in ast.walk(node.value)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                ]
    return any("nccl" in t.lower() for t in texts) and not any("gloo" in t.lower() for t in texts)
