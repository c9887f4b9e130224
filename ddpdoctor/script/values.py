"""The values the lint walks compute with: unknown, known not None, three-valued truth, argument binding.

Both walks of a script use them: the per-rank interpreter (``interp.py``) and the pipeline-neighbour
walker (``p2p_exchange.py``). A value is a concrete Python value where the text shows it, a modelled
object (a DDP model, a neighbour rank, request handles) or UNKNOWN. A condition's truth is True,
False or UNKNOWN; an UNKNOWN condition is one the walk cannot decide, not one that is false.
"""

from __future__ import annotations

import ast
from collections.abc import Callable


class Modelled:
    """A value a walk models without holding it. ``truth()`` is its truth where Python's ``bool``
    would read the real object; an object without ``__bool__`` or ``__len__`` is true."""

    __slots__ = ()

    def truth(self) -> object:
        return True


class Unknown(Modelled):
    __slots__ = ()

    def truth(self) -> object:
        return UNKNOWN

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = Unknown()


class NotNone(Modelled):
    """Unknown, but known not to be None (learnt from a condition such as ``if x is not None``)."""

    __slots__ = ()

    def truth(self) -> object:
        return UNKNOWN  # not None may still be 0, False or empty

    def __repr__(self) -> str:
        return "!None"


NOT_NONE = NotNone()


def truth_of(v: object) -> object:
    """``bool(v)`` as True, False or UNKNOWN."""
    if isinstance(v, Modelled):
        return v.truth()
    try:
        return bool(v)
    except Exception:  # noqa: BLE001 - any error of a concrete operation means the value is unknown
        return UNKNOWN


def negation(v: object) -> object:
    """The truth of ``not v``."""
    t = truth_of(v)
    return UNKNOWN if t is UNKNOWN else not t


FREE = object()  # bind_arguments(self_value=FREE): a plain function, no bound first parameter


def unknown_default(_default: ast.expr) -> object:
    """For bind_arguments: a function walked as an entry point has unknown callers, so every
    parameter is unknown, one with a default included."""
    return UNKNOWN


def bind_arguments(
    a: ast.arguments,
    args: list,
    kwargs: dict,
    default: Callable[[ast.expr], object],
    frame: dict,
    self_value: object = FREE,
    named: Callable[[str, object], object] | None = None,
) -> dict:
    """Binds a call's values to the parameters of ``a`` in ``frame`` (returned) as Python does:
    positional, then keyword, then the default (``default(expr)`` gives its value, asked only when
    the call gives none), else UNKNOWN. ``self_value``: the first parameter of a bound method.
    ``*args`` and ``**kwargs`` parameters are UNKNOWN. ``named(name, value)``: a last say over each
    named parameter's value (the interpreter knows a parameter called ``rank`` is the rank)."""
    params = [*a.posonlyargs, *a.args]
    if self_value is not FREE and params:
        frame[params[0].arg] = self_value
        params = params[1:]
    defaults = [None] * (len(params) - len(a.defaults)) + list(a.defaults)
    for i, p in enumerate(params):
        if i < len(args):
            v = args[i]
        elif p.arg in kwargs:
            v = kwargs[p.arg]
        elif defaults[i] is not None:
            v = default(defaults[i])
        else:
            v = UNKNOWN
        frame[p.arg] = v if named is None else named(p.arg, v)
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        if p.arg in kwargs:
            v = kwargs[p.arg]
        else:
            v = UNKNOWN if d is None else default(d)
        frame[p.arg] = v if named is None else named(p.arg, v)
    if a.vararg:
        frame[a.vararg.arg] = UNKNOWN
    if a.kwarg:
        frame[a.kwarg.arg] = UNKNOWN
    return frame


def bound_argument(fn: ast.AST, call: ast.Call, param: str) -> tuple[bool, ast.AST | None]:
    """(known, the expression ``call`` binds to ``fn``'s parameter ``param``: the argument, else the
    default, else None). Not known when ``*args``/``**kwargs`` could carry it."""
    args = fn.args
    params = [*args.posonlyargs, *args.args]
    if params and params[0].arg in ("self", "cls") and isinstance(call.func, ast.Attribute):
        params = params[1:]
    for k in call.keywords:
        if k.arg == param:
            return True, k.value
        if k.arg is None:
            return False, None
    names = [p.arg for p in params]
    if param in names:
        i = names.index(param)
        if any(isinstance(a, ast.Starred) for a in call.args[: i + 1]):
            return False, None
        if i < len(call.args):
            return True, call.args[i]
        defaults = args.defaults
        j = i - (len(params) - len(defaults))
        return True, defaults[j] if j >= 0 else None
    for p, d in zip(args.kwonlyargs, args.kw_defaults):
        if p.arg == param:
            return True, d
    return False, None
