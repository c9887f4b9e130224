"""Rich rendering of a hang diagnosis (``ddpdoctor hang``, ``ddpdoctor watch``); reads well at 80
columns. Everything from the evidence (paths, code, messages) goes in as plain Text, never markup."""

from __future__ import annotations

import os

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from ddpdoctor.model.hang_analysis import HangDiagnosis, RankReport, rank_list

CELL_STYLE = {"done": "green", "waiting": "yellow", "mismatch": "bold red", "never": "bold red", "unknown": "dim"}
CELL_MARK = {"done": "ok", "waiting": "wait", "mismatch": "DIFF", "never": "--", "unknown": "?"}


def short_path(path: str) -> str:
    """Relative to the working folder when under it: shorter lines, still clickable."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def where(r: RankReport) -> str:
    return f"rank {r.rank}" + (f" on {r.host}" if r.host else "")


def rank_block(r: RankReport, max_lines: int = 8) -> Group:
    """A culprit rank: its state, then its stack (innermost user frame first) with lint findings."""
    out = [Text.assemble((where(r), "bold"), ": ", r.state)]
    for i, s in enumerate(r.chain[:max_lines]):
        lead = "  at " if i == 0 else "  from "
        out.append(Text.assemble(lead, (f"{short_path(s.file)}:{s.line}", "cyan"), f" in {s.function}"))
        if s.code:
            out.append(Text("      " + s.code.strip(), style="dim"))
        for f in s.lint:
            out.append(Text.assemble("      ", (f"this is {f['code']}", "bold magenta"), f": {f['message']}"))
    if len(r.chain) > max_lines:
        out.append(Text(f"  ... {len(r.chain) - max_lines} more frames", style="dim"))
    if not r.chain and r.kind not in ("missing",):
        out.append(Text("  (no frame of user code in its stack)", style="dim"))
    return Group(*out)


def grid_table(g, max_ranks: int = 16) -> Table:
    t = Table(pad_edge=False, box=None)
    t.add_column("rank", justify="right")
    for c in g.columns:
        t.add_column(c.split()[0], justify="center")
    for rank, row in list(zip(g.ranks, g.cells))[:max_ranks]:
        t.add_row(str(rank), *(Text(CELL_MARK[c], style=CELL_STYLE[c]) for c in row))
    return t


class HangView:
    """The whole diagnosis as one renderable."""

    def __init__(self, diag: HangDiagnosis, grid: bool = True) -> None:
        self.diag = diag
        self.grid = grid

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        d = self.diag
        bad = d.kind != "none"
        verdict = d.verdict
        for r in d.culprits:  # shorter paths on screen; the JSON keeps them whole
            if r.location:
                verdict = verdict.replace(r.location, short_path(r.location))
        yield Text.assemble(("Hang diagnosis: ", "bold"), (verdict, "bold red" if bad else "bold green"))
        if d.crash:
            yield Text(d.crash, style="red")
        for f in d.findings:
            for line in f.details:
                yield Text("  " + line)
        for f in d.findings[1:]:
            yield Text.assemble(("also: ", "yellow"), f"{f.summary} ({f.group})")
        waiting = [r for r in d.ranks if r.rank in d.waiting_ranks]
        if waiting:
            yield Text("")
            yield Text("Waiting", style="bold")
            for r in waiting:
                loc = f" at {short_path(r.location)}" if r.location else ""
                yield Text(f"  {where(r)}: {r.state}{loc}")
        culprits = d.culprits
        if culprits:
            yield Text("")
            yield Text("Culprit" + ("s" if len(culprits) > 1 else ""), style="bold")
            for r in culprits:
                yield rank_block(r)
        others = [r for r in d.ranks if not r.culprit and r.rank not in d.waiting_ranks]
        if others:
            yield Text("")
            yield Text("Other ranks", style="bold")
            for r in others:
                loc = f" at {short_path(r.location)}" if r.location else ""
                yield Text(f"  {where(r)}: {r.state}{loc}")
        if d.missing_ranks:
            yield Text(f"No evidence from {rank_list(d.missing_ranks)}", style="yellow")
        if self.grid:
            for g in d.grids:
                if g.columns:
                    yield Text("")
                    yield Text(f"{g.group}: ranks x operations (collective sequence numbers)", style="bold")
                    yield grid_table(g)
