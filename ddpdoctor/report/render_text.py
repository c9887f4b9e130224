"""The report on a terminal (rich). ReportView renders the same in the CLI, a Textual widget or a test."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ddpdoctor.core.report import Finding, Recommendation, Report, Severity, Status
from ddpdoctor.report.fit import no_broken_words

STATUS_STYLE = {
    Status.PASSED: ("✔", "green"),
    Status.WARNING: ("!", "yellow"),
    Status.FAILED: ("✘", "red"),
    Status.TIMED_OUT: ("⏱", "red"),
    Status.ERROR: ("✘", "red"),
    Status.SKIPPED: ("-", "dim"),
    Status.NOT_RUN: ("·", "dim"),
}
SEVERITY_STYLE = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def _or_unknown(v: object) -> object:
    return "?" if v is None else v


def status_text(status: Status) -> Text:
    icon, style = STATUS_STYLE[status]
    return Text(f"{icon} {status.value.replace('_', ' ')}", style=style)


def finding_text(f: Finding) -> Text:
    t = Text()
    t.append(f"{f.severity.value:<7} ", style=SEVERITY_STYLE[f.severity])
    t.append(f"{f.code} ", style="bold")
    if f.location is not None:
        t.append(f"{f.location.path}:{f.location.line}:{f.location.col} ", style="dim")
    t.append(f.message)
    if f.hint:
        t.append(f"\n        hint: {f.hint}", style="dim")
    return t


def recommendation_panel(rec: Recommendation, evidence: bool = False) -> Panel:
    """One recommendation: value, confidence, why, the evidence (optional) and the snippet to paste."""
    body = Text(f"{rec.value}", style="bold")
    body.append(f"  (confidence: {rec.confidence})", style="dim")
    if rec.rationale:
        body.append(f"\n{rec.rationale}")
    if evidence and rec.evidence:
        for k, v in rec.evidence.items():
            items = list(v) if isinstance(v, (list, tuple)) else [v]
            if items and all(isinstance(x, str) and len(x) > 20 and x in rec.rationale for x in items):
                continue  # the rationale already says it, word for word
            text = ", ".join(map(str, items)) if isinstance(v, (list, tuple)) else str(v)
            body.append(f"\n  {k}: {text}", style="dim")
    if rec.snippet:
        body.append(f"\n{rec.snippet}", style="cyan")
    return Panel(body, title=Text(rec.title), title_align="left", expand=False)


def skipped_lines(skipped: list[tuple[str, str]]) -> Text | None:
    """[(code, "skipped: why")] -> "- skipped GPU001, NVL001: why", one line per distinct reason."""
    by_reason: dict[str, list[str]] = {}
    for code, summary in skipped:
        by_reason.setdefault(summary.removeprefix("skipped: ") or "no reason given", []).append(code)
    if not by_reason:
        return None
    t = Text()
    for i, (reason, codes) in enumerate(by_reason.items()):
        t.append("\n" if i else "")
        t.append("- skipped ", style="dim")
        t.append(", ".join(codes), style="bold")
        t.append(f": {reason}", style="dim")
    return t


class ReportView:
    def __init__(self, report: Report, verbose: bool = False) -> None:
        self.report = report
        self.verbose = verbose

    def header(self) -> Text:
        run = self.report.run
        t = Text()
        t.append("ddpdoctor ", style="bold")
        if run.mode == "import":  # measured by other tools: no ranks, torch or run time of ours
            files = run.imported
            tools = sorted({tool for f in files for tool in f.get("tools") or []})
            prof = run.profile or {}
            t.append(f"import of {len(files)} file(s) ({', '.join(tools)}); profile {prof.get('name') or 'none'}")
            t.append(f" ({prof.get('how', '?')})", style="dim")
            return t
        names = run.nodes  # older sample reports give a count instead (run.counted_nodes)
        t.append(
            f"{_or_unknown(run.world_size)} rank{'' if run.world_size == 1 else 's'} on {run.node_count} node(s)"
            + (f" [{', '.join(map(str, names[:6]))}{', …' if len(names) > 6 else ''}]" if names else "")
            + f", backend {_or_unknown(run.backend)}, torch {self.report.versions.get('torch', '?')}"
        )
        if self.report.versions.get("nccl"):
            t.append(f", NCCL {self.report.versions['nccl']}")
        if run.duration_s is not None:
            t.append(f", {run.duration_s:.1f} s")
        return t

    def checks_table(self) -> Table:
        table = Table(show_edge=False, expand=False, pad_edge=False)
        table.add_column("check", style="bold", no_wrap=True)
        table.add_column("title")
        table.add_column("status", no_wrap=True)
        table.add_column("summary")
        table.add_column("time", justify="right", no_wrap=True)
        for c in self.report.checks:
            if c.status is not Status.SKIPPED:
                # user and machine text as Text, never markup: a "[/red]" in a custom check's title or
                # torch's "[enforce fail at ...]" in a summary is shown as written
                table.add_row(Text(c.code), Text(c.title), status_text(c.status), Text(c.summary),
                              f"{c.duration_s:.1f} s")
        return table

    def skipped(self) -> Text | None:
        """Skipped checks, one line per reason: on a machine without a GPU seven topology checks skip for
        the same reason, and the reason is said once."""
        return skipped_lines([(c.code, c.summary) for c in self.report.checks if c.status is Status.SKIPPED])

    def verdict(self) -> Text:
        r = self.report
        n_err = sum(1 for f in r.findings() if f.severity is Severity.ERROR)
        n_warn = sum(1 for f in r.findings() if f.severity is Severity.WARNING)
        failing = [c.code for c in r.checks if c.status.failing]
        if r.run.aborted_reason:
            head = Text(f"INCOMPLETE: {r.run.aborted_reason}", style="bold red")
        elif failing or n_err:
            head = Text(f"FAILED: {', '.join(failing) or 'errors found'}", style="bold red")
        else:
            head = Text("OK: nothing failed", style="bold green")
        head.append(f"  ({n_err} error(s), {n_warn} warning(s))", style="dim")
        if r.run.lost_nodes:
            head.append(f"\nlost node(s): {', '.join(r.run.lost_nodes)}", style="red")
        bad = r.run.bad_nodes.hostlist if r.run.bad_nodes else None
        if bad:
            head.append(f"\nbad node(s): {bad} (leave them out with srun --exclude={bad})", style="red")
        return head

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.header()
        if self.report.checks:
            if any(c.status is not Status.SKIPPED for c in self.report.checks):
                yield no_broken_words(self.checks_table())
            skipped = self.skipped()
            if skipped is not None:
                yield skipped
        findings = [f for f in self.report.findings() if self.verbose or f.severity is not Severity.INFO]
        findings.sort(key=lambda f: -f.severity.rank)
        if findings:
            yield Text("")
            yield Group(*(finding_text(f) for f in findings[:200]))
            if len(findings) > 200:
                yield Text(f"… and {len(findings) - 200} more (see the JSON report)", style="dim")
        if self.report.recommendations:
            yield Text("")
            for rec in self.report.recommendations:
                yield recommendation_panel(rec, evidence=self.verbose)
        yield Text("")
        yield self.verdict()


def print_report(report: Report, console: Console | None = None, verbose: bool = False) -> None:
    (console or Console()).print(ReportView(report, verbose=verbose))
