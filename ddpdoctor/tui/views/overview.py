"""The checks overview: one row per check, one glyph per rank grouped by node, details below."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Static
from textual.widgets.data_table import ColumnKey

from ddpdoctor.run_state import CheckRow, RunState
from ddpdoctor.tui.adapt import severity_style
from ddpdoctor.tui.livestate import GLYPHS
from ddpdoctor.tui.views.common import glyph, no_data, status_text

RANKS_MAX_WIDTH = 24
COLUMNS = (
    ("code", "Code", 7),
    ("title", "Check", 22),
    ("status", "Status", 11),
    ("ranks", "Ranks", 11),
    ("time", "Time", 6),
    ("summary", "Summary", 40),
)


def rank_strip(row: CheckRow, state: RunState) -> Text:
    """Glyphs per rank, a space between nodes: `✓✓ ✓✗` is 2 nodes × 2 ranks."""
    t = Text()
    for k, (_, _, ranks) in enumerate(state.node_groups()):
        if k:
            t.append(" ")
        for r in ranks:
            t.append_text(glyph(row.ranks.get(r, row.status)))
    return t


def run_line(state: RunState, mode: str) -> Text:
    t = Text()
    if state.backend or state.world_size:
        t.append(
            f"{state.backend or '?'} · {state.world_size} rank{'' if state.world_size == 1 else 's'} on {len(state.node_groups())} node(s)", "bold"
        )
    for n, host, ranks in state.node_groups():
        span = f"r{ranks[0]}" if len(ranks) == 1 else f"r{ranks[0]}-{ranks[-1]}"
        t.append(f" · n{n} {host} {span}", "dim")
    if mode:
        t.append(f"\n{mode}", "italic")
    return t


class OverviewView(Vertical):
    DEFAULT_CSS = """
    OverviewView #ov-run { height: auto; max-height: 3; }
    OverviewView DataTable { height: auto; max-height: 12; }
    OverviewView #ov-details { height: 1fr; }
    """

    def compose(self) -> ComposeResult:
        yield Static(no_data("checks", "Start a run or open a report."), id="ov-run")
        table = DataTable(id="ov-table", cursor_type="row", zebra_stripes=True)
        for key, label, width in COLUMNS:
            table.add_column(label, key=key, width=width)
        yield table
        with VerticalScroll(id="ov-details"):
            yield Static("", id="ov-details-text")

    def on_mount(self) -> None:
        self.shown: dict[str, dict] = {}  # the cells on screen, per check code
        self.app.feed(self)

    def show_state(self, state: RunState, mode: str = "") -> None:
        self.run_state = state
        self.query_one("#ov-run", Static).update(
            run_line(state, mode)
            if state.checks or mode
            else no_data("checks", "Waiting for the run to start.")
        )
        table = self.query_one(DataTable)
        # one glyph per rank plus a space per node boundary; very large runs show the rest in the details
        width = min(RANKS_MAX_WIDTH, max(5, len(state.ranks) + len(state.node_groups()) - 1))
        ranks_col = table.columns[ColumnKey("ranks")]
        if ranks_col.width != width:
            ranks_col.width = width
            table.refresh()
        for row in state.rows():
            cells = {
                "code": Text(row.code, "bold"),
                "title": Text(row.title),
                "status": status_text(row.status),
                "ranks": rank_strip(row, state),
                "time": "" if row.duration_s is None else f"{row.duration_s:.1f}s",
                "summary": Text(row.progress or row.summary or ""),
            }
            shown = self.shown.get(row.code)
            if shown is None:
                table.add_row(*cells.values(), key=row.code)
            else:  # only what changed: progress events arrive many times a second
                for key, value in cells.items():
                    if shown[key] != value:
                        table.update_cell(row.code, key, value)
            self.shown[row.code] = cells
        self._show_details()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_details()

    def _show_details(self) -> None:
        state = getattr(self, "run_state", None)
        table = self.query_one(DataTable)
        if state is None or not table.row_count:
            return
        code = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        row = state.checks.get(code)
        if row is None:
            return
        parts: list = [Text.assemble((f"{row.code} ", "bold"), row.title, "  ", status_text(row.status))]
        if row.summary:
            parts.append(Text(row.summary))
        if len(state.ranks) + len(state.node_groups()) - 1 > RANKS_MAX_WIDTH:
            parts.append(Text("ranks: ").append_text(rank_strip(row, state)))
        if row.progress:
            parts.append(Text(f"progress: {row.progress}", "blue"))
        for f in row.findings:
            line = Text(f"{f.severity.value:>7} ", severity_style(f.severity))
            line.append(f.message)
            if f.where:
                line.append("  " + ", ".join(f"{k}={v}" for k, v in f.where.items()), "dim")
            if f.hint:
                line.append(f"\n        hint: {f.hint}", "italic")
            parts.append(line)
        if not row.findings and row.finding_count:
            parts.append(Text(f"{row.finding_count} finding(s): details arrive with the report", "dim"))
        hide = {"not_run", "pending", "running"} if state.ended else {"not_run"}
        legend = Text(
            "  ".join(f"{g} {s.replace('_', ' ')}" for s, (g, _) in GLYPHS.items() if s not in hide), "dim"
        )
        parts.append(legend)
        if state.logs:
            parts.append(Text("\n".join(f"[{lvl}] {msg}" for lvl, msg in state.logs[-3:]), "dim"))
        self.query_one("#ov-details-text", Static).update(Group(*parts))
