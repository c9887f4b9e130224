"""Lint findings with the source lines around each one."""

from __future__ import annotations

from pathlib import Path

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text

from ddpdoctor.core.report import Finding
from ddpdoctor.tui.adapt import embedded_source, severity_style
from ddpdoctor.tui.source import context_lines
from ddpdoctor.tui.views.common import no_data
from ddpdoctor.tui.views.selectable import ListDetail


def where(f: Finding) -> str:
    loc = f.location
    return f"{loc.path}:{loc.line}:{loc.col}" if loc else "?"


class LintPane(ListDetail):
    COLUMNS = (("Location", 22), ("Code", 7), ("Sev", 7), ("Message", 60))
    EMPTY = no_data("lint findings", "Open one with `ddpdoctor tui --lint train.py`.")
    bases: tuple[Path, ...] = ()  # where relative paths are looked up

    def row(self, f: Finding) -> list:
        return [where(f), f.code, Text(f.severity.value, severity_style(f.severity)), f.message]

    def details(self, f: Finding) -> RenderableType:
        parts: list[RenderableType] = [
            Text.assemble((f"{where(f)}: ", "bold"), (f"{f.code} ", severity_style(f.severity)), f.message)
        ]
        ctx = context_lines(f, self.bases)
        if ctx is not None and f.location is not None:
            text, first = ctx
            last = f.location.end_line or f.location.line
            parts.append(
                Syntax(
                    text,
                    "python",
                    line_numbers=True,
                    start_line=first,
                    theme="ansi_dark",
                    highlight_lines=set(range(f.location.line, last + 1)),
                )
            )
        elif (src := embedded_source(f)) is not None:
            parts.append(Syntax(src, "python", theme="ansi_dark"))
        else:
            parts.append(Text("source not available on this machine", "dim"))
        if f.hint:
            parts.append(Text(f"hint: {f.hint}", "italic"))
        return Group(*parts)

    def copy_text(self) -> str | None:
        f = self.selected()
        return f"{where(f)}: {f.code} {f.message}" if f is not None else None
