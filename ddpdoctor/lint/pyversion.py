"""Syntax newer than the running Python: a file that uses it is not broken, it needs a newer Python.

ast.parse reads only the running version's grammar, so under 3.11 PEP 695 generics give a bare
"invalid syntax". When a SyntaxError's line uses syntax a later Python added, the engine says which
version the file needs instead of calling it broken."""

from __future__ import annotations

import re
import sys

# (pattern on the failing line, the version that added it, what it is)
_NEWER: tuple[tuple[re.Pattern[str], tuple[int, int], str], ...] = (
    (re.compile(r"^\s*type\s+[A-Za-z_]\w*\s*(\[.*\])?\s*="), (3, 12), "a `type` alias (PEP 695)"),
    (re.compile(r"^\s*(async\s+)?def\s+[A-Za-z_]\w*\s*\["), (3, 12), "a generic function (PEP 695)"),
    (re.compile(r"^\s*class\s+[A-Za-z_]\w*\s*\["), (3, 12), "a generic class (PEP 695)"),
    # an f-string that reuses its own quote inside a replacement field
    (re.compile(r"""\bf(?P<q>["']).*\{[^}]*(?P=q)[^}]*\}"""), (3, 12), "nested f-string quotes (PEP 701)"),
    (re.compile(r"^\s*except\*?\s+[\w.]+(\s*,\s*[\w.]+)+\s*:"), (3, 14), "`except A, B:` (PEP 758)"),
    (re.compile(r"""(?<![\w"'])[tT][rR]?["']"""), (3, 14), "a template string (PEP 750)"),
)


def needs_newer_python(text: str, lineno: int | None, running=sys.version_info) -> tuple[str, str] | None:
    """(``"3.12"``, what) when the SyntaxError at ``lineno`` is syntax of a newer Python than
    ``running``; None for a plain syntax error."""
    lines = text.splitlines()
    if not lineno or not 0 < lineno <= len(lines):
        return None
    line = lines[lineno - 1]
    for pattern, version, what in _NEWER:
        if tuple(running[:2]) < version and pattern.search(line):
            return f"{version[0]}.{version[1]}", what
    return None
