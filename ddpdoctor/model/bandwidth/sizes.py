"""Message sizes as users write them ("64M", "1GiB", "4096") and as we print them. Pure.

Suffixes are binary (K = KiB = 1024 B), as nccl-tests' -b/-e flags and DDP's bucket_cap_mb read them.
"""

from __future__ import annotations

import re

_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """Bytes from "64M", "64MiB", "1.5G", "4096" or an int; ValueError naming the input otherwise."""
    if isinstance(text, bool):
        raise ValueError(f"bad size {text!r}")
    if isinstance(text, int):
        if text <= 0:
            raise ValueError(f"size must be positive, got {text}")
        return text
    m = _RE.match(str(text))
    if not m:
        raise ValueError(
            f"bad size {text!r}: expected a number of bytes with an optional K, M, G suffix (e.g. 64M)"
        )
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"size must be positive, got {text!r}")
    return value


def format_size(n: float) -> str:
    """1024 -> "1 KiB", 67108864 -> "64 MiB", 1536 -> "1.5 KiB", 100 -> "100 B"."""
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            v = n / div
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.3g} {unit}"
    return f"{n:.0f} B"


def size_ladder(lo: int, hi: int, factor: int = 4) -> list[int]:
    """lo, lo·f, lo·f², … up to hi; hi itself is always the last size."""
    if lo <= 0 or hi < lo or factor < 2:
        raise ValueError(f"bad size range {lo}..{hi} (factor {factor})")
    out = []
    s = lo
    while s < hi:
        out.append(s)
        s *= factor
    out.append(hi)
    return out
