"""Send payloads that lose tensors: a send side that posts fewer sends than the peer posts recvs.

Pipeline code often normalises what it sends with a helper that handles one tensor and a list of
tensors alike. When the single-tensor path keeps the tensor whatever a condition says
(``if split: t = chunk(t)``, then ``return t``) but the list path appends an item only when the
condition holds (no ``else: out.append(item)``), a list payload loses every item the condition
rejects. The receiver still posts one recv per expected tensor, so its batch of recvs never
completes: the pipeline hangs. Pure AST: input is a module's functions and its import aliases.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ddpdoctor.script.names import dist_op, dotted, qualify

_SEND_OPS = frozenset({"send", "isend"})


@dataclass
class DroppingBuilder:
    """A function whose list path drops the items its tensor path keeps."""

    fn: ast.FunctionDef | ast.AsyncFunctionDef
    cond: str  # the condition's source, ``send_split``
    keep: ast.If  # the tensor path's ``if cond: x = ...`` (keeps x either way)
    drop: ast.If  # the list path's ``if cond: out.append(...)`` (no else)


@dataclass
class LostPayload:
    builder: DroppingBuilder
    call: ast.Call  # where the builder's result is made
    send: ast.Call  # where that result is sent


def _text(node: ast.AST) -> str:
    return ast.unparse(node)


def _isinstance_of(test: ast.AST) -> str | None:
    """``x`` for ``isinstance(x, ...)``."""
    if (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id == "isinstance"
        and len(test.args) == 2
        and isinstance(test.args[0], ast.Name)
    ):
        return test.args[0].id
    return None


def _optional_rewrite(body: list[ast.stmt], var: str) -> ast.If | None:
    """``if cond: var = ...`` with no else, followed (later in the path) by ``return var``."""
    rewrite = None
    for st in body:
        if (
            isinstance(st, ast.If)
            and not st.orelse
            and any(
                isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == var for t in s.targets)
                for s in st.body
            )
        ):
            rewrite = st
    last = body[-1] if body else None
    if isinstance(last, ast.Return) and isinstance(last.value, ast.Name) and last.value.id == var:
        return rewrite
    return None


def _appends_to(st: ast.stmt) -> str | None:
    """``out`` for ``out.append(...)``."""
    if (
        isinstance(st, ast.Expr)
        and isinstance(st.value, ast.Call)
        and isinstance(st.value.func, ast.Attribute)
        and st.value.func.attr in ("append", "extend")
        and isinstance(st.value.func.value, ast.Name)
    ):
        return st.value.func.value.id
    return None


def _filtering_append(loop: ast.For, cond: str) -> ast.If | None:
    """In ``for item in var:``, the only appends sit in ``if cond:`` with no else."""
    guarded = None
    for st in loop.body:
        if isinstance(st, ast.If) and _text(st.test) == cond:
            if st.orelse:
                return None
            if any(_appends_to(s) for s in st.body):
                guarded = st
        elif any(_appends_to(s) for s in ast.walk(st) if isinstance(s, ast.stmt)):
            return None  # the item is appended on some other path
    return guarded


def dropping_builders(functions: list) -> list[DroppingBuilder]:
    """``functions``: the module's FunctionDef nodes (only their top-level statements are read)."""
    out = []
    for fn in functions:
        params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args)}
        for i, st in enumerate(fn.body):
            var = _isinstance_of(st.test) if isinstance(st, ast.If) else None
            if var is None or var not in params or st.orelse:
                continue
            keep = _optional_rewrite(st.body, var)
            if keep is None:
                continue
            cond = _text(keep.test)
            for later in fn.body[i + 1 :]:
                if isinstance(later, ast.For) and isinstance(later.iter, ast.Name) and later.iter.id == var:
                    drop = _filtering_append(later, cond)
                    if drop is not None:
                        out.append(DroppingBuilder(fn, cond, keep, drop))
                    break
    return out


def _is_send_ref(node: ast.AST, aliases: dict[str, str]) -> bool:
    name = dotted(node)
    return name is not None and dist_op(qualify(name, aliases)) in _SEND_OPS


def _sends(call: ast.Call, var: str, aliases: dict[str, str]) -> bool:
    """Does this call send ``var``: ``dist.isend(var, ...)``, ``P2POp(dist.isend, var, ...)``, or a
    helper handed both ``var`` and ``dist.isend`` (``fill_ops(var, dist.isend, peer, ops)``)?"""
    args = [*call.args, *(k.value for k in call.keywords)]
    if not any(isinstance(a, ast.Name) and a.id == var for a in args):
        return False
    return _is_send_ref(call.func, aliases) or any(_is_send_ref(a, aliases) for a in args)


def lost_payloads(functions: list, aliases: dict[str, str]) -> list[LostPayload]:
    builders = {b.fn.name: b for b in dropping_builders(functions)}
    if not builders:
        return []
    out = []
    for fn in functions:
        made: dict[str, tuple[DroppingBuilder, ast.Call]] = {}
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call)
            ):
                callee = dotted(node.value.func) or ""
                b = builders.get(callee.rsplit(".", 1)[-1])
                if b is not None and b.fn is not fn:
                    made[node.targets[0].id] = (b, node.value)
        if not made:
            continue
        for node in ast.walk(fn):  # ``for t in payload:`` sends the payload item by item
            if (
                isinstance(node, ast.For)
                and isinstance(node.iter, ast.Name)
                and node.iter.id in made
                and isinstance(node.target, ast.Name)
            ):
                made[node.target.id] = made[node.iter.id]
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            for var, (b, call) in made.items():
                if node.lineno > call.lineno and _sends(node, var, aliases):
                    out.append(LostPayload(b, call, node))
    seen: set[int] = set()
    unique = []
    for lp in out:  # one finding per builder: the cause is there
        if id(lp.builder.fn) not in seen:
            seen.add(id(lp.builder.fn))
            unique.append(lp)
    return unique
