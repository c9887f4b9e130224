"""Live progress on the terminal, fed by the event stream (rich Live on a TTY, plain lines otherwise)."""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from ddpdoctor.core.events import CheckEnd, Event, Log
from ddpdoctor.core.report import Status
from ddpdoctor.report.render_text import status_text
from ddpdoctor.run_state import PENDING, RUNNING, CheckRow, RunState


class ProgressView:
    """Draws the run state (ddpdoctor.run_state.RunState, folded from the events) on the terminal."""

    def __init__(self, console: Console, quiet: bool = False, echo_events_to_stdout: bool = False) -> None:
        self.console = console
        self.quiet = quiet
        self.echo = echo_events_to_stdout
        self.live: Live | None = None
        self.state = RunState()  # also what a partial report is made of if rank 0 dies
        self.header = ""

    @property
    def rendezvoused(self) -> bool:
        return self.state.rendezvoused

    def launching(self, plan, backend: str, codes: list[str], titles: list[str]) -> None:
        self.header = (f"ddpdoctor check: {plan.nnodes} node(s) × {plan.nproc_per_node} rank(s) on {backend}, "
                       f"rendezvous {plan.endpoint}")
        self.state.expect(codes, titles)
        if not self.quiet and not self.echo:
            self.console.print(Text(self.header, style="bold"))

    def __enter__(self) -> ProgressView:
        if not self.quiet and not self.echo and self.console.is_terminal:
            self.live = Live(self._table(), console=self.console, refresh_per_second=8, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.live = None

    def _table(self) -> Table:
        t = Table(show_header=False, show_edge=False, box=None, pad_edge=False)
        for row in self.state.rows():
            if row.status == RUNNING:
                status = Spinner("dots", text=Text(f" {row.ranks_done} rank(s) done {row.progress}"[:60]))
            elif row.status == PENDING:
                status = Text("waiting", style="dim")
            else:
                status = status_text(Status(row.status))
            t.add_row(Text(row.code, style="bold"), Text(row.title), status, Text(row.summary))
        if not self.state.rendezvoused:
            t.add_row("", Text("waiting for the rendezvous …", style="dim"), "", "")
        return t

    def _said_before(self, row: CheckRow) -> str:
        """A skip's reason once: a later check skipped for the same reason points at the first."""
        if row.status != Status.SKIPPED.value:
            return row.summary
        for other in self.state.rows():
            if other.code == row.code:
                break
            if other.status == row.status and other.summary == row.summary:
                return f"as {other.code}"
        return row.summary.removeprefix("skipped: ")

    def handle(self, ev: Event) -> None:
        if self.echo:
            sys.stdout.write(json.dumps(ev.to_json()) + "\n")
            sys.stdout.flush()
        self.state.apply(ev)
        if isinstance(ev, CheckEnd) and self.live is None and not self.quiet and not self.echo:
            row = self.state.checks[ev.code]
            line = Text(f"  {row.code} ", style="bold")
            line.append(row.title + " ")
            line.append_text(status_text(Status(row.status)))
            line.append(f" ({row.duration_s or 0:.1f} s) {self._said_before(row)}", style="dim")
            self.console.print(line)
        elif isinstance(ev, Log) and ev.level in ("error", "warning") and not self.quiet:
            self.console.print(Text(f"  {ev.message}", style="yellow"))
        if self.live is not None:
            self.live.update(self._table())
