"""Helpers the tool-output parsers share; the parsed shapes live in ddpdoctor/model/imported/tool_runs.py (pure
data the import model builds reports from)."""

from __future__ import annotations

import math

from ddpdoctor.model.imported.tool_runs import ToolOutputError


def to_float(tok: str) -> float | None:
    """A number as the tools print it; None for N/A (and for anything that is not a number)."""
    try:
        v = float(tok)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def read_grid(
    lines: list[str], start: int, path: str, corner: str | None = None
) -> tuple[list[str], list[str], list[list[float | None]], int]:
    """A printed matrix: a header of column labels at ``lines[start]`` (0-based; after an optional
    ``corner`` token such as ``D\\D``), then one row per line, ``label v v …`` with numbers or N/A.
    Returns (column labels, row labels, values, index of the first line after the matrix). A row
    with the wrong number of cells is a ToolOutputError naming its line (a cut or garbled table)."""
    head = lines[start].split()
    if corner is not None and head and head[0] == corner:
        head = head[1:]
    if not head:
        raise ToolOutputError(path, start + 1, "a matrix without column labels")
    rows: list[str] = []
    values: list[list[float | None]] = []
    i = start + 1
    while i < len(lines):
        toks = lines[i].split()
        if not toks or not toks[0].isdigit():  # a blank line, SUM …, the next title
            break
        if len(toks) < len(head) + 1:
            raise ToolOutputError(
                path,
                i + 1,
                f"a matrix row of {len(toks) - 1} cells under {len(head)} columns: the table is cut short",
            )
        if len(toks) > len(head) + 1:
            break
        cells = [to_float(t) for t in toks[1:]]
        if any(c is None and t != "N/A" for c, t in zip(cells, toks[1:])):
            raise ToolOutputError(path, i + 1, "a matrix cell that is neither a number nor N/A")
        rows.append(toks[0])
        values.append(cells)
        i += 1
    if not rows:
        raise ToolOutputError(path, start + 1, "a matrix header without rows: the table is cut short")
    return head, rows, values, i
