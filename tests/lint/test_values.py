"""The values both lint walks compute with (script/values.py): unknown, truth, argument binding."""

from __future__ import annotations

import ast

import pytest

from ddpdoctor.script.values import (
    FREE,
    NOT_NONE,
    UNKNOWN,
    Modelled,
    bind_arguments,
    negation,
    truth_of,
    unknown_default,
)


class _Maybe(Modelled):
    def truth(self) -> object:
        return UNKNOWN


class _Broken:
    def __bool__(self) -> bool:
        raise ValueError("ambiguous")


@pytest.mark.parametrize(
    "value, truth",
    [
        (0, False),
        (3, True),
        ("", False),
        ((), False),
        ((1,), True),
        (range(0), False),
        (None, False),
        (UNKNOWN, UNKNOWN),
        (NOT_NONE, UNKNOWN),  # not None may still be 0 or empty
        (Modelled(), True),  # an object without __bool__ is true
        (_Maybe(), UNKNOWN),
        (_Broken(), UNKNOWN),
        (object(), True),
    ],
)
def test_truth_is_three_valued(value, truth):
    assert truth_of(value) is truth
    assert negation(value) is (UNKNOWN if truth is UNKNOWN else not truth)


def _fn(src: str) -> ast.arguments:
    return ast.parse(src).body[0].args


def _constant(e: ast.expr) -> object:
    return e.value if isinstance(e, ast.Constant) else UNKNOWN


def test_binds_positional_keyword_default_and_rest_like_python():
    a = _fn("def f(a, b, c=3, *rest, d, e=5, f, **more): pass")
    frame = bind_arguments(a, [1, 2], {"d": 4, "zz": 9}, _constant, {})
    assert frame == {
        "a": 1,
        "b": 2,
        "c": 3,
        "d": 4,
        "e": 5,
        "f": UNKNOWN,  # keyword-only without a default, not given
        "rest": UNKNOWN,
        "more": UNKNOWN,
    }


def test_keyword_fills_a_positional_parameter_and_extra_positionals_are_dropped():
    a = _fn("def f(a, b=2, /, c=7): pass")
    assert bind_arguments(a, [1, 8, 9, 10], {}, _constant, {}) == {"a": 1, "b": 8, "c": 9}
    assert bind_arguments(a, [1], {"c": 0}, _constant, {}) == {"a": 1, "b": 2, "c": 0}


def test_bound_method_and_frame_kept():
    a = _fn("def m(self, x): pass")
    frame = bind_arguments(a, [5], {}, _constant, {"__class__": "C"}, self_value="obj")
    assert frame == {"__class__": "C", "self": "obj", "x": 5}
    assert bind_arguments(a, [5], {}, _constant, {}, self_value=FREE) == {"self": 5, "x": UNKNOWN}


def test_a_default_is_asked_for_only_when_the_call_gives_none():
    asked = []

    def default(e):
        asked.append(e.value)
        return e.value

    a = _fn("def f(a=1, *, k=2, j=3): pass")
    assert bind_arguments(a, [10], {"k": 20}, default, {}) == {"a": 10, "k": 20, "j": 3}
    assert asked == [3]


def test_entry_point_parameters_are_unknown_and_named_has_the_last_say():
    a = _fn("def f(self, rank=0, *, peer=None, x=1): pass")

    def named(name, v):
        return "R" if name == "rank" else v

    frame = bind_arguments(a, [], {}, unknown_default, {}, self_value="obj", named=named)
    assert frame == {"self": "obj", "rank": "R", "peer": UNKNOWN, "x": UNKNOWN}
