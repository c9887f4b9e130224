"""Small pieces the views share."""

from __future__ import annotations

from rich.text import Text

from ddpdoctor.tui.livestate import GLYPHS


def no_data(what: str, why: str = "") -> Text:
    t = Text(f"No {what} yet.", "bold dim")
    if why:
        t.append(f"\n{why}", "dim")
    return t


def status_text(status: str) -> Text:
    glyph, style = GLYPHS.get(status, ("?", ""))
    return Text(f"{glyph} {status.replace('_', ' ')}", style)


def glyph(status: str) -> Text:
    g, style = GLYPHS.get(status, ("?", ""))
    return Text(g, style)
