"""The rich Console every command prints through. At a terminal: colours, box drawing, live updates.
Anywhere else (a pipe, a file, a CI or `srun` job log): plain text — no colour or cursor codes, and
tables and panels drawn in ASCII, since a job log that splits lines by bytes cuts box-drawing
characters in half ("…───�")."""

from __future__ import annotations

import sys
from typing import IO

from rich.console import Console


class _AsciiBoxes:
    """A text stream that tells rich its encoding is ASCII, so rich substitutes ASCII boxes (the
    text itself goes through unchanged)."""

    encoding = "ascii"

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._stream.fileno()


def make_console(stderr: bool = False, width: int | None = None) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr, width=width)
    return Console(file=_AsciiBoxes(stream), width=width or 80, no_color=True, highlight=False,
                   color_system=None, force_terminal=False, force_interactive=False, soft_wrap=False)
