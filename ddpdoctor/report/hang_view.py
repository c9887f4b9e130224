"""Rich rendering of a hang diagnosis (``ddpdoctor hang``, ``ddpdoctor watch``); reads well at 80
columns. Everything from the evidence (paths, code, messages) goes in as plain Text, never markup."""

from __future__ import annotations

import os

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ddpdoctor.model.hang.analysis import HangDiagnosis, RankReport, rank_list

CELL_STYLE = {
    "done": "green",
    "waiting": "yellow",
    "mismatch": "bold red",
    "never": "bold red",
    "unknown": "dim",
}
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


def watch_line(w: dict) -> str:
    """What `ddpdoctor watch` saw: the outcome and what set it off."""
    out = f"watch: {w.get('outcome')}"
    t = w.get("trigger") or {}
    if t.get("rank") is not None:
        op = f" in {t['operation']}" if t.get("operation") else ""
        waited = (
            f" waited {t['waiting_s']:.1f} s" if isinstance(t.get("waiting_s"), (int, float)) else " waited"
        )
        out += f" · rank {t['rank']}{waited}{op}"
    if w.get("outcome") == "hang" and w.get("certain"):
        out += " (a certain deadlock: --hang-after not waited for)"
    elif w.get("outcome") == "hang" and w.get("hang_after_s") is not None:
        out += f" (--hang-after {w['hang_after_s']:g} s)"
    codes = w.get("exit_codes") or {}
    if w.get("hang_after_auto") and w.get("outcome") == "hang":
        out = out.replace("(--hang-after", "(--hang-after auto,")
    if codes:
        out += " · exit codes " + ", ".join(
            f"rank {r}: {c}" for r, c in sorted(codes.items(), key=lambda x: int(x[0]))
        )
    return out


def indent(text: Text, n: int) -> Padding:
    """Wrapped lines keep the indentation (a long path or message at 80 columns)."""
    return Padding(text, (0, 0, 0, n), expand=False)


def rank_block(r: RankReport, max_lines: int = 8) -> Group:
    """A culprit rank: its state, then its stack (innermost user frame first) with lint findings."""
    out: list = [Text.assemble((where(r), "bold"), ": ", r.state)]
    for i, s in enumerate(r.chain[:max_lines]):
        lead = "at " if i == 0 else "from "
        out.append(
            indent(Text.assemble(lead, (f"{short_path(s.file)}:{s.line}", "cyan"), f" in {s.function}"), 2)
        )
        if s.code:
            out.append(indent(Text(s.code.strip(), style="dim"), 6))
        for f in s.lint:
            out.append(
                indent(Text.assemble((f"this is {f['code']}", "bold magenta"), f": {f['message']}"), 6)
            )
    if len(r.chain) > max_lines:
        out.append(indent(Text(f"... {len(r.chain) - max_lines} more frames", style="dim"), 2))
    if not r.chain and r.kind not in ("missing", "done"):
        out.append(indent(Text("(no frame of user code in its stack)", style="dim"), 2))
    return Group(*out)


def grouped(reports: list[RankReport]) -> list[Text]:
    """One line per (state, place): 255 ranks waiting in the same all_reduce make one line."""
    groups: dict[tuple, list[RankReport]] = {}
    for r in reports:
        if r.kind == "died":  # the same death on many ranks differs only in peer addresses
            key: tuple = (r.kind, (r.exception or "").split(":")[0], r.location)
        elif r.operation:
            key = (r.kind, r.operation, r.seq, r.location)
        else:
            key = (r.kind, r.state, r.location)
        groups.setdefault(key, []).append(r)
    out = []
    for rs in groups.values():
        first = max(rs, key=lambda r: r.waiting_s or 0.0)  # the longest wait speaks for the group
        hosts = sorted({r.host for r in rs if r.host})
        host = f" on {', '.join(hosts[:3])}{', ...' if len(hosts) > 3 else ''}" if hosts else ""
        loc = f" at {short_path(first.location)}" if first.location else ""
        line = Text(f"{rank_list([r.rank for r in rs])}{host}: {first.state}{loc}")
        for f in first.chain[0].lint if first.chain else ():  # a lint finding at the line they wait on
            line.append_text(Text.assemble("\n    ", (f"this is {f['code']}", "bold magenta"), f": {f['message']}"))
        out.append(line)
    return out


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
        yield Text.assemble((f"{d.heading} diagnosis: ", "bold"), (verdict, "bold red" if bad else "bold green"))
        if d.why:
            yield indent(Text(d.why), 2)
        if d.watch:
            yield Text(watch_line(d.watch), style="dim")
        if d.crash:
            yield Text(d.crash, style="red")
        for line in d.findings[0].details if d.findings else ():
            yield indent(Text(line), 2)
        for f in d.findings[1:]:
            yield Text.assemble(("also: ", "yellow"), f"{f.summary} ({f.group})")
        waiting = [r for r in d.ranks if r.rank in d.waiting_ranks]
        if waiting:
            yield Text("")
            yield Text("Waiting", style="bold")
            for line in grouped(waiting):
                yield indent(line, 2)
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
            for line in grouped(others):
                yield indent(line, 2)
        if d.missing_ranks:
            yield Text(f"No evidence from {rank_list(d.missing_ranks)}", style="yellow")
        if self.grid:
            for g in d.grids:
                if g.columns:
                    yield Text("")
                    yield Text(f"{g.group}: ranks x operations (collective sequence numbers)", style="bold")
                    yield grid_table(g)
