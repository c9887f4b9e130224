"""The point-to-point matrix as a heatmap: arrow keys move a cursor; the cell's details show below."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import ScrollableContainer, Vertical
from textual.geometry import Region
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from ddpdoctor.core.report import Report
from ddpdoctor.tui.adapt import P2PView, cell_details, p2p_view
from ddpdoctor.tui.charts import HEATMAP_TOP, heatmap_layout, heatmap_text
from ddpdoctor.tui.views.common import no_data


class Heatmap(Widget, can_focus=True):
    DEFAULT_CSS = "Heatmap { height: auto; width: auto; }"
    BINDINGS: ClassVar = [
        Binding("up", "move(-1, 0)", show=False),
        Binding("down", "move(1, 0)", show=False),
        Binding("left", "move(0, -1)", show=False),
        Binding("right", "move(0, 1)", show=False),
    ]
    cursor: reactive[tuple[int, int]] = reactive((0, 1), layout=True)

    class CellSelected(Message):
        def __init__(self, i: int, j: int) -> None:
            super().__init__()
            self.i, self.j = i, j

    def __init__(self, view: P2PView, **kw) -> None:
        super().__init__(**kw)
        self.p2p = view
        n = view.matrix.size
        # start on the worst outlier: the cell the user most likely came for
        if view.outliers:
            self.set_reactive(Heatmap.cursor, min(view.outliers, key=lambda c: _num(view, c)))
        elif n < 2:
            self.set_reactive(Heatmap.cursor, (0, 0))

    def render(self) -> Text:
        width = self.parent.size.width if self.parent is not None else 80
        return heatmap_text(self.p2p.matrix, self.p2p.outliers, self.cursor, width or 80)

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self.render().plain.splitlines())

    def get_content_width(self, container, viewport) -> int:
        # as wide as the matrix needs: the pane scrolls sideways for very large runs
        text = heatmap_text(self.p2p.matrix, self.p2p.outliers, self.cursor, container.width or 80)
        return max(len(line) for line in text.plain.splitlines())

    def action_move(self, di: int, dj: int) -> None:
        n = self.p2p.matrix.size
        i, j = self.cursor
        self.cursor = ((i + di) % n, (j + dj) % n)

    def watch_cursor(self, cursor: tuple[int, int]) -> None:
        self.post_message(self.CellSelected(*cursor))
        self.scroll_to_cursor()

    def on_show(self) -> None:
        # shown at last (it may have mounted in a hidden tab): bring the cursor, maybe an outlier far
        # off screen, into view once the layout has sizes
        self.call_after_refresh(self.scroll_to_cursor)

    def scroll_to_cursor(self) -> None:
        """Keep the cursor in view when the matrix is larger than the pane."""
        if self.parent is None:
            return
        label_w, cell_w = heatmap_layout(self.p2p.matrix.size, self.parent.size.width or 80)
        i, j = self.cursor
        region = Region(label_w + j * cell_w, HEATMAP_TOP + i, cell_w, 1)
        self.parent.scroll_to_region(region, animate=False)


def _num(view: P2PView, cell: tuple[int, int]) -> float:
    v = view.matrix.values[cell[0]][cell[1]]
    return v if isinstance(v, (int, float)) else float("inf")


class P2PPane(Vertical):
    DEFAULT_CSS = """
    P2PPane #p2p-title { height: 1; }
    P2PPane #p2p-scroll { height: 1fr; }
    P2PPane #p2p-details { height: 5; border-top: solid $primary; }
    """

    def compose(self) -> ComposeResult:
        yield Static(Text("P2P bandwidth heatmap", "bold"), id="p2p-title")
        yield ScrollableContainer(
            Static(no_data("point-to-point matrix", "The P2P check has not reported."), id="p2p-empty"),
            id="p2p-scroll",
        )
        yield Static("", id="p2p-details")

    def on_mount(self) -> None:
        self.app.feed(self)

    def show_report(self, report: Report | None) -> None:
        view = p2p_view(report)
        scroll = self.query_one("#p2p-scroll", ScrollableContainer)
        if view is None:
            return
        self.p2p = view
        scroll.remove_children()
        m = view.matrix
        self.query_one("#p2p-title", Static).update(
            Text.assemble(
                ("P2P bandwidth heatmap", "bold"),
                f"  {view.code} · {m.size} ranks · {m.unit}",
                (f" · {len(view.outliers)} outlier(s)" if view.outliers else "", "bold red"),
            )
        )
        heatmap = Heatmap(view)
        scroll.mount(heatmap)
        self._details(*heatmap.cursor)

    def on_heatmap_cell_selected(self, msg: Heatmap.CellSelected) -> None:
        self._details(msg.i, msg.j)

    def _details(self, i: int, j: int) -> None:
        view = self.p2p
        t = Text(cell_details(view, i, j), "bold red" if (i, j) in view.outliers else "")
        for f in view.findings:
            ranks = f.where.get("ranks") if isinstance(f.where, dict) else None
            if isinstance(ranks, list) and ranks[:2] == [i, j]:
                t.append(f"\n{f.code} {f.severity.value}: {f.message}")
                if f.hint:
                    t.append(f"\nhint: {f.hint}", "italic")
        self.query_one("#p2p-details", Static).update(t)
