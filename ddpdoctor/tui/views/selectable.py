"""A table of items over a details pane: the shape the recommendations and lint views share."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Static


class ListDetail(Vertical):
    """Subclasses set COLUMNS and implement row() and details(); ``items`` feeds both."""

    DEFAULT_CSS = """
    ListDetail DataTable { height: auto; max-height: 8; }
    ListDetail .details { height: 1fr; border-top: solid $primary; }
    """
    COLUMNS: tuple[tuple[str, int | None], ...] = ()
    EMPTY: RenderableType = ""

    def compose(self) -> ComposeResult:
        table = DataTable(cursor_type="row")
        for label, width in self.COLUMNS:
            table.add_column(label, width=width)
        yield table
        with VerticalScroll(classes="details"):
            yield Static(self.EMPTY, classes="details-text")

    def on_mount(self) -> None:
        self.app.feed(self)

    def set_items(self, items: list[Any]) -> None:
        self.items = items
        table = self.query_one(DataTable)
        table.clear()
        for k, item in enumerate(items):
            # a str cell would be read as markup by DataTable: data is shown as written
            table.add_row(*(Text(c) if isinstance(c, str) else c for c in self.row(item)), key=str(k))
        if items:
            self._show_item(0)

    def selected(self) -> Any | None:
        items = getattr(self, "items", None)
        if not items:
            return None
        return items[min(self.query_one(DataTable).cursor_row, len(items) - 1)]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_item(event.cursor_row)

    def _show_item(self, k: int) -> None:
        if 0 <= k < len(self.items):
            self.query_one(".details-text", Static).update(self.details(self.items[k]))

    def row(self, item: Any) -> list[Any]:
        raise NotImplementedError

    def details(self, item: Any) -> RenderableType:
        raise NotImplementedError
