"""Flag value types shared by every command that takes the flag (argparse names the flag on error,
exit 2): `check`, `tui` and `watch` read --nodes, --nproc-per-node and time limits through the same
functions, so a value one refuses the others refuse too."""

from __future__ import annotations

import argparse
import math


def _whole(text: str, least: int) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < least:
        raise argparse.ArgumentTypeError(f"must be {'at least 1' if least == 1 else '0 or more'}, got {n}")
    return n


def count(text: str) -> int:
    """A count of nodes or ranks: a whole number of at least 1."""
    return _whole(text, 1)


def rank(text: str) -> int:
    """A rank or index: a whole number of 0 or more."""
    return _whole(text, 0)


def _positive(text: str, expected: str, must: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not (x > 0 and math.isfinite(x)):
        raise argparse.ArgumentTypeError(f"must be {must}, got {text}")
    return x


def seconds(text: str) -> float:
    """A positive, finite number of seconds (nan, inf, 0 and negatives refused)."""
    return _positive(text, "seconds", "a positive number of seconds")


def scale(text: str) -> float:
    """A positive, finite factor."""
    return _positive(text, "a number", "a positive number")


def codes(text: str) -> list[str]:
    """A comma-separated list of check or rule codes (or prefixes), upper-cased."""
    return [c.strip().upper() for c in text.split(",") if c.strip()]
