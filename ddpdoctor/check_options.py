"""Per-check options (`ddpdoctor check --option KEY=VALUE`): declared by the checks, validated before launch.

A cluster check that reads ``ctx.options[...]`` declares each key it reads, at module level:

    OPTIONS = (Option("algo_reps", "A/B repetitions per arm", whole(2, 20)), ...)

``validate(given, specs)`` refuses a key no check declares (naming the valid ones and the closest match)
and a value the option's parser rejects, so a typo or a bad value ends the run with exit 2 before
anything is launched, not on every rank after it. Pure: no torch, no I/O.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


class OptionError(ValueError):
    """A bad --option; the message names the option and what is expected."""


@dataclass(frozen=True)
class Option:
    name: str
    help: str
    parse: Callable[[Any], Any]  # the value as given (JSON-decoded) -> the value the check reads; ValueError says why


# -- parsers ---------------------------------------------------------------------------------------------
def whole(lo: int, hi: int | None = None) -> Callable[[Any], int]:
    def parse(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
            span = f"from {lo} to {hi}" if hi is not None else f"of at least {lo}"
            raise ValueError(f"expected a whole number {span}")
        return v

    return parse


def seconds(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
        raise ValueError("expected a positive number of seconds")
    return float(v)


def choice(*values: str) -> Callable[[Any], str]:
    def parse(v: Any) -> str:
        if v not in values:
            raise ValueError(f"expected one of {', '.join(values)}")
        return v

    return parse


def size(v: Any) -> int:
    from ddpdoctor.model.bandwidth.sizes import parse_size

    return parse_size(v)


def text(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError("expected text")
    return v


def names(allowed: Iterable[str]) -> Callable[[Any], list[str]]:
    """A comma-separated list (or a JSON list) of names from allowed."""
    allowed = tuple(allowed)

    def parse(v: Any) -> list[str]:
        items = v if isinstance(v, list) else str(v).split(",")
        out = [str(i).strip() for i in items if str(i).strip()]
        bad = [i for i in out if i not in allowed]
        if bad or not out:
            raise ValueError(f"expected some of {', '.join(allowed)}")
        return out

    return parse


# -- validation --------------------------------------------------------------------------------------------
def declared(specs: Iterable[Any]) -> dict[str, tuple[Option, list[str]]]:
    """Every option the checks declare: name -> (Option, the codes that read it)."""
    out: dict[str, tuple[Option, list[str]]] = {}
    for spec in specs:
        for opt in getattr(spec.module, "OPTIONS", ()):
            out.setdefault(opt.name, (opt, []))[1].append(spec.code)
    return out


def validate(given: dict[str, Any], specs: Iterable[Any]) -> dict[str, Any]:
    """The options as the checks will read them; OptionError for an unknown key or a bad value."""
    known = declared(specs)
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise OptionError(f"--option {key}: no check takes this option; {hint}valid options: "
                              f"{', '.join(sorted(known))} (`ddpdoctor check --list` shows the checks)")
        opt, codes = known[key]
        try:
            out[key] = opt.parse(value)
        except (ValueError, TypeError) as e:
            raise OptionError(f"--option {key}={value!r} ({', '.join(codes)}: {opt.help}): {e}") from None
    return out
