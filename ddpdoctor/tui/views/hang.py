"""A saved hang diagnosis (``ddpdoctor tui HANG.json``): the verdict and what `watch --verify` found,
ranks x operations as a grid (state per cell) for each process group, and the selected rank's stack
with lint findings."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Footer, Header, Static

from ddpdoctor.model.hang.analysis import Grid, HangDiagnosis, RankReport
from ddpdoctor.report.hang_view import CELL_MARK, CELL_STYLE, rank_block, short_path

LEGEND = Text.assemble(
    *(
        part
        for state in ("done", "waiting", "mismatch", "never", "unknown")
        for part in ((CELL_MARK[state], CELL_STYLE[state]), f" {state}  ")
    )
)


def rank_details(r: RankReport) -> RenderableType:
    parts: list[RenderableType] = [rank_block(r, max_lines=30)]
    if r.culprit:
        parts.insert(0, Text("culprit", "bold red"))
    return Group(*parts)


class HangPane(Vertical):
    """Verdict on top, the grid of one group (``g`` cycles groups), the selected rank's stack below."""

    DEFAULT_CSS = """
    HangPane #hang-verdict { height: auto; max-height: 14; }
    HangPane #hang-group { height: auto; max-height: 2; }
    HangPane DataTable { height: auto; max-height: 10; }
    HangPane .details { height: 1fr; border-top: solid $primary; }
    """

    def __init__(self, diag: HangDiagnosis, **kw) -> None:
        super().__init__(**kw)
        self.diag = diag
        self.group_index = 0

    def compose(self) -> ComposeResult:
        yield Static(self.verdict_text(), id="hang-verdict")
        yield Static("", id="hang-group")
        yield DataTable(cursor_type="row", zebra_stripes=False)
        with VerticalScroll(classes="details"):
            yield Static("", id="hang-details")

    def verdict_text(self) -> Text:
        d = self.diag
        verdict = d.verdict
        for r in d.culprits:
            if r.location:
                verdict = verdict.replace(r.location, short_path(r.location))
        t = Text.assemble(("Verdict: ", "bold"), (verdict, "bold red" if d.kind != "none" else "bold green"))
        if d.crash:
            t.append("\n" + d.crash, "red")
        if d.missing_ranks:
            t.append(f"\nno evidence from ranks {', '.join(map(str, d.missing_ranks))}", "yellow")
        if d.verify:
            t.append(f"\nwatch --verify: {len(d.verify)} finding{'s' if len(d.verify) != 1 else ''}", "bold")
            for f in d.verify:
                t.append(f"\n  {short_path(f.where)}", "bold yellow")
                when = f.when()
                t.append(f" ({'rank' if len(f.ranks) == 1 else 'ranks'} {', '.join(map(str, f.ranks))}"
                         f"{'; ' + when if when else ''}): {f.message}")  # fmt: skip
                for line in f.joined():
                    t.append(f"\n    {line}", "cyan")
        return t

    def on_mount(self) -> None:
        # open on the group the verdict is about
        names = [g.group for g in self.diag.grids]
        self.show_group(names.index(self.diag.group) if self.diag.group in names else 0)

    def grid(self) -> Grid | None:
        return self.diag.grids[self.group_index] if self.diag.grids else None

    def show_group(self, index: int) -> None:
        grids = self.diag.grids
        table = self.query_one(DataTable)
        table.clear(columns=True)
        table.add_column("rank")
        table.add_column("host")
        if not grids:
            self.query_one("#hang-group", Static).update(
                Text("no Flight Recorder entries in the evidence", "dim")
            )
            rows = [(r.rank, []) for r in self.diag.ranks]
        else:
            self.group_index = index % len(grids)
            g = grids[self.group_index]
            more = f" · g: next of {len(grids)} groups" if len(grids) > 1 else ""
            self.query_one("#hang-group", Static).update(
                Text.assemble((f"{g.group}", "bold"), f": ranks x operations{more}\n", LEGEND)
            )
            for c in g.columns:
                table.add_column(c)
            rows = list(zip(g.ranks, g.cells))
        for rank, cells in rows:
            r = self.diag.rank(rank)
            label = Text(str(rank), "bold red" if r and r.culprit else "")
            table.add_row(
                label,
                Text((r.host if r else None) or "?"),
                *(Text(CELL_MARK[c], CELL_STYLE[c]) for c in cells),
                key=str(rank),
            )
        start = next((i for i, (rank, _) in enumerate(rows) if rank in self.diag.culprit_ranks), 0)
        if rows:
            table.move_cursor(row=start)
            self.show_rank(rows[start][0])

    def show_rank(self, rank: int) -> None:
        r = self.diag.rank(rank)
        body = rank_details(r) if r else Text(f"rank {rank}: no report", "dim")
        self.query_one("#hang-details", Static).update(body)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key is not None and event.row_key.value is not None:
            self.show_rank(int(event.row_key.value))


class HangApp(App[int]):
    """``ddpdoctor tui HANG.json``: exits with the diagnosis' code (1 hang found, 0 none)."""

    TITLE = "ddpdoctor"
    SUB_TITLE = "hang diagnosis"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = (Binding("q", "quit", "Quit"), Binding("g", "next_group", "Next group"))

    def __init__(self, diag: HangDiagnosis) -> None:
        super().__init__()
        self.diag = diag

    def compose(self) -> ComposeResult:
        yield Header()
        yield HangPane(self.diag, id="view-hang")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()

    def action_next_group(self) -> None:
        pane = self.query_one(HangPane)
        pane.show_group(pane.group_index + 1)

    def action_quit(self) -> None:
        self.exit(0 if self.diag.kind == "none" else 1)
