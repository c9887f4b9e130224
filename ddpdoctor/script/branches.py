"""Branches of a function that no call in the file takes: ``def load(rank, kind="a"): if kind ==
"a": ...`` when every call passes ``kind="b"``. What such a branch builds never runs."""

from __future__ import annotations

import ast

from ddpdoctor.script.names import rebinds
from ddpdoctor.script.values import bound_argument

_UNKNOWN = object()


def untaken_by_callers(m, node: ast.AST) -> bool:
    """``node`` sits in an arm of an ``if param == CONSTANT`` (or ``!=``) of its plain function that
    every call of that function in this file steers away from, by the constant it passes or the
    parameter's default. A function with no calls here, or one whose calls pass anything else, is
    unknown: False."""
    fn = m.enclosing_function(node)
    if fn is None or isinstance(fn, ast.Lambda) or m.is_method(fn):
        return False
    sites = [c for c in m.call_sites(fn) if isinstance(c.func, ast.Name) and c.func.id == fn.name]
    if not sites:
        return False
    child = node
    for a in m.ancestors(node):
        if a is fn:
            break
        if isinstance(a, ast.If) and child is not a.test:
            test = _param_test(a.test, fn)
            if test is not None:
                name, const, equal = test
                passed = [_passed(site, fn, name) for site in sites]
                if all(v is not _UNKNOWN for v in passed):
                    takes_body = [(v == const) == equal for v in passed]
                    in_body = any(child is s for s in a.body)
                    if (in_body and not any(takes_body)) or (not in_body and all(takes_body)):
                        return True
        child = a
    return False


def _param_test(test: ast.AST, fn) -> tuple[str, object, bool] | None:
    """(parameter, constant, True for ==) for ``param == "a"``, ``"a" == param`` or ``!=``, where the
    parameter is never rebound in ``fn``."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq))):
        return None
    left, right = test.left, test.comparators[0]
    if isinstance(right, ast.Name) and isinstance(left, ast.Constant):
        left, right = right, left
    if not (isinstance(left, ast.Name) and isinstance(right, ast.Constant)):
        return None
    a = fn.args
    if left.id not in {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}:
        return None
    if rebinds(fn, left.id):
        return None
    return left.id, right.value, isinstance(test.ops[0], ast.Eq)


def _passed(call: ast.Call, fn, name: str) -> object:
    """The constant ``call`` gives parameter ``name`` (or its constant default); _UNKNOWN otherwise."""
    if any(isinstance(x, ast.Starred) for x in call.args) or any(k.arg is None for k in call.keywords):
        return _UNKNOWN
    _known, value = bound_argument(fn, call, name)
    return value.value if isinstance(value, ast.Constant) else _UNKNOWN


def arms(m, node: ast.AST, scope: ast.AST) -> dict[int, str]:
    """{id of an ``if``: the arm ("body"/"orelse") ``node`` sits in} up to ``scope``: two nodes whose
    maps disagree on one ``if`` never run in the same pass."""
    out = {}
    child = node
    for a in m.ancestors(node):
        if a is scope:
            break
        if isinstance(a, ast.If) and child is not a.test:
            out[id(a)] = "body" if any(child is s for s in a.body) else "orelse"
        child = a
    return out


def in_loop(m, node: ast.AST, scope: ast.AST) -> bool:
    """``node`` sits in a loop of ``scope`` (it may run more than once there)."""
    for a in m.ancestors(node):
        if a is scope:
            return False
        if isinstance(a, (ast.For, ast.AsyncFor, ast.While)):
            return True
    return False
