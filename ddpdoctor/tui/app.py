"""The ddpdoctor Textual app: one tab per view over a report, a live run or lint results."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.css.query import NoMatches
from textual.lazy import Lazy
from textual.widgets import Footer, Header, Static, TabbedContent, TabPane

from ddpdoctor.core.events import Event
from ddpdoctor.core.report import Report
from ddpdoctor.report.io import ReportError, load_report
from ddpdoctor.run_state import RunState
from ddpdoctor.tui.adapt import lint_findings
from ddpdoctor.tui.bindings import VIEWS, textual_bindings
from ddpdoctor.tui.live import LiveConfig, LiveRun
from ddpdoctor.tui.livestate import state_from_report
from ddpdoctor.tui.views.curve import CurvePane
from ddpdoctor.tui.views.help import HelpScreen
from ddpdoctor.tui.views.lint import LintPane
from ddpdoctor.tui.views.overview import OverviewView
from ddpdoctor.tui.views.p2p import P2PPane
from ddpdoctor.tui.views.recs import RecsPane
from ddpdoctor.tui.views.topology import TopologyPane

PANES: dict[str, Callable[[], Any]] = {
    "overview": OverviewView,
    "p2p": P2PPane,
    "bw": CurvePane,
    "topo": TopologyPane,
    "recs": RecsPane,
    "lint": LintPane,
}


class DoctorApp(App[int]):
    """Exactly one source: ``report`` (a loaded Report), ``live`` (run the check) or ``lint`` (a
    callable returning a Report, run in a thread since it reads many files)."""

    TITLE = "ddpdoctor"
    ENABLE_COMMAND_PALETTE = False  # every action has a key; the footer needs the room at 80 columns
    CSS = """
    #status { height: 1; background: $boost; padding: 0 1; }
    TabbedContent { height: 1fr; }
    TabPane { padding: 0 1; }
    """
    BINDINGS = textual_bindings()

    def __init__(
        self,
        report: Report | None = None,
        live: LiveConfig | None = None,
        lint: Callable[[], Report] | None = None,
        report_dir: Path | None = None,
        start_view: str | None = None,
    ) -> None:
        super().__init__()
        self.report = report
        self.live_cfg = live
        self.lint_fn = lint
        self.report_dir = report_dir
        self.start_view = start_view or ("lint" if lint else "overview")
        self.state = RunState()
        self.run_handle: LiveRun | None = None
        self.exit_code = 0
        self.signalled: int | None = None  # SIGTERM or SIGHUP ended the app
        self.mode = ""
        self.started = False  # views that mount before the app's on_mount wait for it
        self.bad_lines_seen = 0

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="status")
        with TabbedContent(initial=self.start_view):
            for tab, label, _ in VIEWS:
                with TabPane(label, id=tab):
                    pane = PANES[tab](id=f"view-{tab}", classes="view")
                    # hidden views mount after the first paint; they pull their data via feed()
                    yield pane if tab == self.start_view else Lazy(pane)
        yield Footer()

    def on_mount(self) -> None:
        self.started = True
        # SIGTERM and SIGHUP (a closed terminal, `timeout`) end the app as `q` does, from the event
        # loop: the live run is stopped and its temp folder removed (commands/tui.py).
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        if self.report is None:
            for pane in self.query(".view"):
                self.feed(pane)
        if self.report is not None:
            self.sub_title = "saved report"
            self.show_report(self.report)
        elif self.live_cfg is not None:
            self.sub_title = "live"
            self.run_worker(self.live_loop(), exclusive=True, group="live")
        elif self.lint_fn is not None:
            self.sub_title = "lint"
            self.set_status(Text("linting…", "blue"))
            self.run_worker(self.lint_loop(), exclusive=True, group="lint")
        self.focus_view(self.start_view)  # arrow keys work at once

    # -- data in -------------------------------------------------------------------------------------
    def feed(self, pane: Any) -> None:
        """Give one view what it shows; views call this when they mount (hidden ones lazily)."""
        if not self.started:
            return
        if isinstance(pane, OverviewView):
            pane.show_state(self.state, self.mode)
        elif self.report is None:
            return
        elif isinstance(pane, (P2PPane, CurvePane, TopologyPane)):
            pane.show_report(self.report)
        elif isinstance(pane, RecsPane):
            pane.set_items(list(self.report.recommendations))
        elif isinstance(pane, LintPane):
            pane.bases = tuple(b for b in (self.report_dir, Path.cwd()) if b)
            pane.set_items(lint_findings(self.report))

    def show_report(self, report: Report, saved: Path | None = None) -> None:
        self.report = report
        self.state = state_from_report(report)
        if self.live_cfg:
            self.mode = f"live run finished · exit {report.exit_code()} · report: {saved}"
        else:
            self.mode = f"saved report · {report.run.endpoint or ''}".rstrip(" ·")
        for pane in self.query(".view"):  # the views mounted so far; the rest pull on mount
            self.feed(pane)
        self.exit_code = report.exit_code()
        verdict = ("FAILED", "bold red") if report.failed else ("passed", "bold green")
        counts = f"{len(report.checks)} checks · {len(report.recommendations)} recs · {len(report.lint)} lint"
        self.set_status(Text.assemble(("verdict: ", "bold"), verdict, f" · {counts}"))

    def set_status(self, text: Text) -> None:
        self.query_one("#status", Static).update(text)

    def apply_events(self, events: list[Event]) -> None:
        for ev in events:
            self.state.apply(ev)
        self.mode = "live run"
        for pane in self.query(OverviewView):
            pane.show_state(self.state, self.mode)
        st = self.state
        if st.ended:
            return
        cur = st.checks.get(st.current) if st.current else None
        text = Text("running ", "bold blue")
        text.append(f"{cur.code} {cur.title} {cur.progress}" if cur else "…")
        done = sum(1 for r in st.checks.values() if r.status not in ("pending", "running"))
        text.append(f"  [{done}/{len(st.checks)} checks · {st.elapsed:.1f}s]", "dim")
        self.set_status(text)

    async def live_loop(self) -> None:
        run = self.run_handle = LiveRun(self.live_cfg)
        self.set_status(Text(f"starting: {' '.join(run.command[-6:])}", "blue"))
        try:
            await run.start()
        except OSError as e:
            self.set_status(Text(f"could not start the check: {e}", "bold red"))
            self.exit_code = 2
            return
        try:
            async for batch in run.batches():
                self.note_bad_lines(run)
                self.apply_events(batch)
            self.note_bad_lines(run)
            await self.finish_live(run)
        except NoMatches:  # the app is closing under us: end the child with it
            await run.stop()

    def note_bad_lines(self, run: LiveRun) -> None:
        """Say so, once per new count, when the event file holds lines that are not events."""
        if run.tail.bad_lines > self.bad_lines_seen:
            self.bad_lines_seen = run.tail.bad_lines
            self.state.logs.append(
                ("warning", f"{run.tail.bad_lines} unreadable line(s) in {run.events_path}")
            )

    async def finish_live(self, run: LiveRun) -> None:
        # the --json this app asked for first: the path in the events is the check's scratch copy,
        # gone once `ddpdoctor check` has written the outputs and removed its temp folder
        path = run.report_path
        if not path.is_file() and self.state.report_path:
            path = Path(self.state.report_path)
        if path.is_file():
            try:
                report = await asyncio.to_thread(load_report, path)  # big matrices: off the UI loop
            except ReportError as e:
                self.set_status(Text(str(e), "bold red"))
                self.exit_code = 2
                return
            self.report_dir = path.parent
            self.show_report(report, saved=path)
            return
        why = "stopped" if run.stopped else f"exited with {run.returncode}"
        if run.timed_out:
            why = f"timed out after {run.cfg.timeout_s:.0f}s"
        self.exit_code = 2
        self.set_status(Text(f"check {why} without a report; log: {run.log_path}", "bold red"))
        self.state.logs.append(("error", run.log_tail(5) or "(empty log)"))
        self.mode = f"check {why}"
        for pane in self.query(OverviewView):
            pane.show_state(self.state, self.mode)

    async def lint_loop(self) -> None:
        try:
            report = await asyncio.to_thread(self.lint_fn)
        except Exception as e:  # noqa: BLE001 -- a linter crash must not take the app down
            self.set_status(Text(f"lint failed: {type(e).__name__}: {e}", "bold red"))
            self.exit_code = 2
            return
        self.show_report(report)
        self.set_status(Text(f"{len(report.lint)} lint finding(s)", "bold"))

    # -- actions ---------------------------------------------------------------------------------------
    def action_show_view(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        self.focus_view(tab)

    def focus_view(self, tab: str) -> None:
        # Something in the new view must take focus: if focus stayed in the hidden view, TabbedContent
        # would switch back to it.
        try:
            pane = self.query_one(f"#view-{tab}")
        except NoMatches:  # a lazy view not mounted yet: it is focused when it mounts
            self.call_after_refresh(self.focus_view, tab)
            return
        scrollers = [pane] if pane.can_focus else []
        candidates = [*pane.query("Heatmap, DataTable"), *scrollers, *pane.query("ScrollableContainer")]
        if candidates:
            candidates[0].focus()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_copy(self) -> None:
        active = self.query_one(TabbedContent).active
        pane = {"recs": RecsPane, "lint": LintPane}.get(active)
        text = next((p.copy_text() for p in self.query(pane)), None) if pane else None
        if not text:
            self.notify("nothing to copy here", severity="warning", timeout=2)
            return
        self.copy_to_clipboard(text)
        self.notify(f"copied: {text.splitlines()[0][:60]}", timeout=2)

    def action_next_node(self) -> None:
        for pane in self.query(TopologyPane):
            pane.next_node()

    async def action_stop(self) -> None:
        if self.run_handle is not None and self.run_handle.returncode is None:
            self.set_status(Text("stopping the check…", "bold yellow"))
            await self.run_handle.stop()

    def _on_signal(self, sig: int) -> None:
        self.signalled = sig
        self.run_worker(self.action_stop_and_exit(128 + sig), group="signal")

    async def action_stop_and_exit(self, code: int) -> None:
        await self.action_stop()
        self.exit(code)

    async def action_quit(self) -> None:
        await self.action_stop()
        self.exit(self.exit_code)

    def on_unmount(self) -> None:
        if self.run_handle is not None:
            self.run_handle.kill_now()
