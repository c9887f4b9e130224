"""The all-reduce curve: busbw against message size as a braille plot, with the points below."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddpdoctor.core.report import Report
from ddpdoctor.tui.adapt import BandwidthView, bandwidth_view
from ddpdoctor.tui.charts import CurvePlot, fmt_size, fmt_value
from ddpdoctor.tui.views.common import no_data

PLOT_HEIGHT = 11  # leaves the points table a few lines at 80×24


def points_table(view: BandwidthView) -> Table:
    c = view.curves[0]
    times = dict(view.times.points) if view.times else {}
    t = Table(box=None, padding=(0, 2), header_style="bold")
    t.add_column("size", justify="right")
    t.add_column("time (µs)", justify="right")
    t.add_column(f"{c.name} busbw ({c.unit_y or '?'})", justify="right")
    for x, y in c.points:
        us = times.get(x)
        t.add_row(fmt_size(x), "" if us is None else f"{us * 1e6:.1f}", fmt_value(y))
    return t


class CurvePane(VerticalScroll):
    def compose(self):
        yield Static(no_data("bandwidth curve", "The bandwidth sweep has not reported."), id="bw-plot")
        yield Static("", id="bw-points")

    def on_mount(self) -> None:
        self.app.feed(self)

    def show_report(self, report: Report | None) -> None:
        view = bandwidth_view(report)
        if view is None:
            return
        unit = view.curves[0].unit_y
        self.query_one("#bw-plot", Static).update(CurvePlot(view.curves, PLOT_HEIGHT, view.expected, unit))
        peak = max(view.curves[0].points, key=lambda p: p[1])
        head = Text(f"{view.code}: peak {fmt_value(peak[1])} {unit} at {fmt_size(peak[0])}", "bold")
        self.query_one("#bw-points", Static).update(Group(head, points_table(view)))
