"""Tables that fit the terminal without cutting or breaking words (80 columns: a laptop, a CI log)."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text


def no_broken_words(t: Table) -> RenderableType:
    """A wrapping column is at least as wide as its longest word, so rich never breaks a word; a table
    that cannot fit even so is folded into one paragraph per row (see Folded)."""
    for col in t.columns:
        if not col.no_wrap:
            words = [w for cell in [str(col.header), *col.cells] for w in str(cell).split()]
            col.min_width = max((len(w) for w in words), default=1)
    return Folded(t)


class Folded:
    """A table as it is where it fits; otherwise each row as "first-cell  header value · header value …",
    wrapped between words, so nothing is cut at a narrow terminal."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        wide = options.update_width(10_000)
        if Measurement.get(console, wide, self.table).minimum <= options.max_width:
            yield self.table
            return
        cols = self.table.columns
        cells = [list(c.cells) for c in cols]
        if self.table.title:
            yield Text(str(self.table.title), style="italic")
        for r in range(self.table.row_count):
            line = Text(str(cells[0][r]) + "  ", style="bold")
            for k, col in enumerate(cols[1:]):
                cell = cells[k + 1][r]
                line.append(f"{col.header} ", style="dim")
                line.append_text(cell if isinstance(cell, Text) else Text(str(cell)))
                line.append(" · " if k < len(cols) - 2 else "", style="dim")
            yield line


