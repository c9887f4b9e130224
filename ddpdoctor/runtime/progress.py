"""Live progress on the terminal, fed by the event stream (rich Live on a TTY, plain lines otherwise)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from ddpdoctor.core.report import Status
from ddpdoctor.report.render_text import status_text


class ProgressView:
    def __init__(self, console: Console, quiet: bool = False, echo_events_to_stdout: bool = False) -> None:
        self.console = console
        self.quiet = quiet
        self.echo = echo_events_to_stdout
        self.live: Live | None = None
        self.rows: dict[str, dict[str, Any]] = {}
        self.rendezvoused = False
        self.ranks_seen: set[int] = set()
        self.header = ""
        self.events: list[dict[str, Any]] = []  # kept for a partial report if rank 0 dies

    def launching(self, plan, backend: str, codes: list[str], titles: list[str]) -> None:
        self.header = (f"ddpdoctor check: {plan.nnodes} node(s) × {plan.nproc_per_node} rank(s) on {backend}, "
                       f"rendezvous {plan.endpoint}")
        for code, title in zip(codes, titles):
            self.rows[code] = {"title": title, "status": "waiting", "summary": "", "ranks_done": 0, "message": ""}
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
        for code, row in self.rows.items():
            st = row["status"]
            if st == "running":
                status = Spinner("dots", text=Text(f" {row['ranks_done']} rank(s) done {row['message']}"[:60]))
            elif st == "waiting":
                status = Text("waiting", style="dim")
            else:
                status = status_text(Status(st))
            t.add_row(Text(code, style="bold"), Text(str(row["title"])), status, Text(str(row["summary"])))
        if not self.rendezvoused:
            t.add_row("", Text("waiting for the rendezvous …", style="dim"), "", "")
        return t

    def _said_before(self, code: str, row: dict[str, Any]) -> str:
        """A skip's reason once: a later check skipped for the same reason points at the first."""
        if row["status"] != Status.SKIPPED.value:
            return row["summary"]
        for other, r in self.rows.items():
            if other == code:
                break
            if r["status"] == row["status"] and r["summary"] == row["summary"]:
                return f"as {other}"
        return row["summary"].removeprefix("skipped: ")

    def handle(self, ev: dict[str, Any]) -> None:
        if ev.get("event") != "progress":
            self.events.append(ev)
        if self.echo:
            sys.stdout.write(json.dumps(ev) + "\n")
            sys.stdout.flush()
        kind = ev.get("event")
        code = ev.get("code")
        row = self.rows.get(code) if code else None
        if kind == "rendezvous":
            self.rendezvoused = True
            self.ranks_seen.add(int(ev.get("rank", -1)))
        elif kind in ("check_start", "rank_check_start") and row is not None:
            if row["status"] == "waiting":
                row["status"] = "running"
                row["started"] = time.monotonic()
        elif kind == "rank_check_end" and row is not None:
            row["ranks_done"] += 1
        elif kind == "progress" and row is not None:
            row["message"] = str(ev.get("message") or (f"{ev.get('done')}/{ev.get('total')}" if ev.get("total") else ""))
        elif kind == "check_end" and row is not None:
            row["status"] = ev.get("status", "passed")
            row["summary"] = ev.get("summary", "")
            if self.live is None and not self.quiet and not self.echo:
                line = Text(f"  {code} ", style="bold")
                line.append(row["title"] + " ")
                line.append_text(status_text(Status(row["status"])))
                line.append(f" ({ev.get('duration_s', 0):.1f} s) {self._said_before(code, row)}", style="dim")
                self.console.print(line)
        elif kind == "log" and ev.get("level") in ("error", "warning") and not self.quiet:
            self.console.print(Text(f"  {ev.get('message')}", style="yellow"))
        if self.live is not None:
            self.live.update(self._table())
