"""Link bandwidth between two ranks, from the measured point-to-point matrix (pure).

P2P001 measures each ordered pair on its own: ``values[i][j]`` is the GB/s rank i sent to rank j, null
where the pair was not measured (docs/architecture.md, "Bandwidth payloads"). Layouts need one figure
per unordered pair, a *link*: the slower of the two directions when both were measured (an order must
hold whichever way a collective runs it), the one measured otherwise, None when neither was.

Only the upper triangle is kept (``_up[i][k]`` is the link between i and i+1+k): a 1024-rank matrix
is a million cells, and every pass over them costs in pure Python.
"""

from __future__ import annotations

import math
import operator
import statistics
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

_NUMERIC = {float, int, type(None)}
_not_none = partial(operator.is_not, None)


class LinkMatrixError(ValueError):
    """The matrix is not the P2P001 shape (square, numbers of GB/s or null)."""


def _cell(value: Any, i: int, j: int) -> float | None:
    if value is None or i == j:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise LinkMatrixError(
            f"P2P matrix cell [{i}][{j}] is {value!r}; expected a non-negative number of GB/s or null"
        )
    return float(value)


def _validated(values: Sequence[Sequence[Any]]) -> list[Sequence[float | None]]:
    if not isinstance(values, (list, tuple)) or not values:
        raise LinkMatrixError("P2P matrix has no rows; expected one row per rank")
    n = len(values)
    out = []
    for i, row in enumerate(values):
        if not isinstance(row, (list, tuple)) or len(row) != n:
            got = len(row) if isinstance(row, (list, tuple)) else type(row).__name__
            raise LinkMatrixError(f"P2P matrix row {i} has {got} entries; expected {n} (one per rank)")
        # The common case (numbers and nulls) is checked with C-speed builtins; a row that fails is
        # walked cell by cell to say which cell is wrong. NaN and inf make the sum non-finite.
        if set(map(type, row)) <= _NUMERIC:
            nums = list(filter(_not_none, row))
            if not nums or (min(nums) >= 0 and math.isfinite(sum(nums))):
                out.append(row)  # the diagonal is never read: only pairs i < j are
                continue
        out.append([_cell(v, i, j) for j, v in enumerate(row)])
    return out


class Links:
    """Undirected link bandwidth (GB/s) between every pair of ranks; None = not measured."""

    def __init__(self, values: Sequence[Sequence[Any]] | None, n: int | None = None):
        self._known: list[float] | None = None
        if values is None:
            if n is None:
                raise LinkMatrixError("no matrix and no world size")
            self.n = n
            self._up: list[list[float | None]] = [[None] * (n - 1 - i) for i in range(n)]
            self._rows_measured = [False] * n
            return
        directed = _validated(values)
        self.n = n = len(directed)
        cols = list(zip(*directed))
        # the slower direction, or whichever was measured; a conditional, not min(), as this runs per cell
        self._up = [
            [
                a if b is None else b if a is None else (a if a < b else b)  # noqa: FURB136
                for a, b in zip(row[i + 1 :], col[i + 1 :])
            ]
            for i, (row, col) in enumerate(zip(directed, cols))
        ]
        self._rows_measured = [
            any(v is not None for v in directed[i]) or any(v is not None for v in cols[i]) for i in range(n)
        ]

    @classmethod
    def from_payload(cls, matrix: dict[str, Any]) -> Links:
        """From P2P001's ``data["matrix"]`` ({"unit": "GB/s", "labels": [...], "values": [[...]]})."""
        if not isinstance(matrix, dict) or "values" not in matrix:
            raise LinkMatrixError("P2P matrix has no 'values'; expected {'unit': 'GB/s', 'values': [[...]]}")
        unit = matrix.get("unit", "GB/s")
        if unit != "GB/s":
            raise LinkMatrixError(f"P2P matrix unit is {unit!r}; expected 'GB/s'")
        return cls(matrix["values"])

    def get(self, i: int, j: int) -> float | None:
        if i < j:
            return self._up[i][j - i - 1]
        if i > j:
            return self._up[j][i - j - 1]
        return None

    def measured(self, rank: int) -> bool:
        """Has this rank any link with a figure."""
        return self._rows_measured[rank]

    def pairs(self, at_least: float | None = None) -> Iterator[tuple[int, int]]:
        """Pairs (i < j) with a figure, or with a figure of at least ``at_least`` GB/s."""
        for i, row in enumerate(self._up):
            if at_least is None:
                hits = [k for k, v in enumerate(row) if v is not None]
            else:
                hits = [k for k, v in enumerate(row) if v is not None and v >= at_least]
            for k in hits:
                yield i, i + 1 + k

    def median_between(self, a: Sequence[int], b: Sequence[int]) -> float | None:
        """Typical link between two groups of ranks: the median over pairs at the same position in each
        list (rail-aligned when the lists are in local-rank order), widened to a bounded sample of all
        pairs when fewer than three of those were measured; None when none was."""
        vals = [v for x, y in zip(a, b) if x != y and (v := self.get(x, y)) is not None]
        if len(vals) < 3:
            vals += [v for x in a[:32] for y in b[:32] if x != y and (v := self.get(x, y)) is not None]
        return statistics.median(vals) if vals else None

    def known_values(self) -> list[float]:
        """Every link figure (one per measured pair), computed once."""
        if self._known is None:
            self._known = [v for row in self._up for v in row if v is not None]
        return self._known

    def coverage(self) -> float:
        """Share of unordered pairs with a link figure (1.0 for a world of one)."""
        pairs = self.n * (self.n - 1) // 2
        return len(self.known_values()) / pairs if pairs else 1.0
