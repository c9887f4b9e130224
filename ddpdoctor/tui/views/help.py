"""The help screen (`?`): every key binding, from the same table as the footer."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ddpdoctor.tui.bindings import help_rows


def help_table() -> Table:
    t = Table(title="ddpdoctor tui — keys", box=None, padding=(0, 1), title_style="bold")
    t.add_column("key", style="bold cyan", no_wrap=True)
    t.add_column("does")
    t.add_column("where", style="dim")
    for key, what, scope in help_rows():
        t.add_row(key, what, scope)
    return t


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar = [Binding("escape,question_mark,q", "app.pop_screen", "Close", key_display="esc")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 78; height: auto; max-height: 22; border: round $primary;
                                  background: $surface; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(help_table())
            yield Static(Text("esc, ? or q closes this screen", "dim"))
