"""``# noqa`` and ``# noqa: DDP101, DDP2`` comments, as ruff reads them (codes or code prefixes)."""

from __future__ import annotations

import re

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]*(?:[\s,]+[A-Z]+[0-9]*)*))?", re.IGNORECASE)


def suppressed(line_text: str, code: str) -> bool:
    for m in _NOQA.finditer(line_text):
        codes = m.group("codes")
        if codes is None:
            return True  # a bare noqa silences everything on the line
        if any(code.startswith(c.upper()) for c in re.split(r"[\s,]+", codes.strip()) if c):
            return True
    return False
