"""Slurm hostlist expressions from host names (pure): ``[node1, node2, node3, node7]`` -> ``node[1-3,7]``.

The reverse of ``launch.expand_slurm_nodelist`` and of ``scontrol show hostnames``, so the result goes
straight into ``srun --exclude`` / ``sbatch --exclude`` / ``--nodelist``. As Slurm reads them:
- only a name's trailing number is bracketed; names that differ before it form separate groups;
- a zero-padded number (``gpu007``) keeps its width, and joins only numbers of the same width
  (``gpu[007-010]``); unpadded numbers of any length share a group (``n[9-10]``);
- a name without a trailing number is written as it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_TRAILING = re.compile(r"^(.*?)(\d+)$")


def compress_hostlist(hosts: Iterable[str]) -> str:
    """One hostlist expression for ``hosts`` (duplicates dropped; groups in first-seen order, numbers
    ascending within a group). Empty input gives an empty string."""
    groups: dict[tuple[str, int], set[int]] = {}
    plain: dict[str, None] = {}
    order: list[tuple[str, object]] = []
    parsed = []
    for h in dict.fromkeys(h.strip() for h in hosts if h and h.strip()):
        m = _TRAILING.match(h)
        if not m or "[" in h or "," in h:
            parsed.append((h, None, None))
            continue
        prefix, digits = m.groups()
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        parsed.append((prefix, digits, width))
    padded = {(p, w) for p, d, w in parsed if d is not None and w}
    for prefix, digits, width in parsed:
        if digits is None:
            if prefix not in plain:
                plain[prefix] = None
                order.append(("plain", prefix))
            continue
        if not width and (prefix, len(digits)) in padded:
            width = len(digits)  # gpu010 belongs with gpu007: both three digits wide
        key = (prefix, width)
        if key not in groups:
            groups[key] = set()
            order.append(("group", key))
        groups[key].add(int(digits))
    parts = []
    for kind, key in order:
        if kind == "plain":
            parts.append(key)
            continue
        prefix, width = key
        numbers = sorted(groups[key])
        if len(numbers) == 1:
            parts.append(f"{prefix}{numbers[0]:0{width}d}")
        else:
            parts.append(f"{prefix}[{ranges_text(numbers, width)}]")
    return ",".join(parts)


def ranges_text(numbers: Iterable[int], width: int = 0) -> str:
    """0,1,2,5 -> "0-2,5" (each number zero-padded to ``width``); empty input gives ""."""
    numbers = sorted(set(numbers))
    if not numbers:
        return ""
    out = []
    start = prev = numbers[0]
    for n in numbers[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}")
        if n is not None:
            start = prev = n
    return ",".join(out)
