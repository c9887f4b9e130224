"""Helpers for the TUI tests: sample data, the fake check and the screen as text."""

from __future__ import annotations

import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
FAKE_CHECK = DATA / "fake_check.py"
SIZE = (80, 24)  # the size the app must be usable at


def screen_text(app) -> str:
    """What the terminal shows, one line per row, trailing blanks cut (colours dropped)."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(s.text.rstrip() for s in strips)


def fake_command(*extra: str) -> list[str]:
    return [sys.executable, str(FAKE_CHECK), *extra]


def load(name: str):
    from ddpdoctor.report.io import load_report

    return load_report(DATA / name)
