"""Source lines around a lint finding, read from disk where the file can be found."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.core.report import Finding


def find_source(path: str, bases: tuple[Path, ...]) -> Path | None:
    """The file as given, else relative to each base (a saved report's folder, the cwd)."""
    p = Path(path)
    candidates = [p] if p.is_absolute() else [p, *[b / p for b in bases]]
    return next((c for c in candidates if c.is_file()), None)


def context_lines(f: Finding, bases: tuple[Path, ...], around: int = 3) -> tuple[str, int] | None:
    """(text, first line number) of the lines around the finding, or None if the file is not here."""
    if f.location is None:
        return None
    src = find_source(f.location.path, bases)
    if src is None:
        return None
    try:
        lines = src.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    first = max(1, f.location.line - around)
    last = min(len(lines), (f.location.end_line or f.location.line) + around)
    if first > last:
        return None
    return "\n".join(lines[first - 1 : last]), first
