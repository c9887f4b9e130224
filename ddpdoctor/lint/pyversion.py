"""Syntax newer than the running Python: a file that uses it is not broken, it needs a newer Python.

ast.parse reads only the running version's grammar, so under 3.11 PEP 695 generics give a bare
"invalid syntax". Type parameters say nothing about how ranks behave, so the engine erases them
(``def f[T](x)`` reads as ``def f(x)``, ``type A = B`` as ``A = B``) and lints the rest, every line
where it was. Other syntax a later Python added (PEP 701 f-strings, PEP 758 ``except A, B``) cannot
be erased that way: there the engine says which version the file needs instead of calling it broken.
Older code is read as its Python read it where that costs nothing: ``async`` was a plain name before
3.7, and PyTorch < 0.4 code passes ``.cuda(async=True)``; the engine renames it in place and lints
the file."""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
import warnings
from dataclasses import dataclass

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


@dataclass(frozen=True)
class NewerSyntax:
    version: str  # "3.12"
    what: str  # "nested f-string quotes (PEP 701)"
    line: int  # where it is (the parser may have blamed a later line of the statement)


def needs_newer_python(text: str, lineno: int | None, running=sys.version_info) -> NewerSyntax | None:
    """What newer syntax, and where, when the SyntaxError at ``lineno`` is syntax of a newer Python
    than ``running``; None for a plain syntax error."""
    lines = text.splitlines()
    if not lineno or not 0 < lineno <= len(lines):
        return None
    # the parser may blame the end of the statement (the `)` of a call that spans lines) rather than
    # the line with the new syntax: look at the few lines before it too, nearest first
    for at in range(lineno, max(0, lineno - _LOOKBACK), -1):
        for pattern, version, what in _NEWER:
            if tuple(running[:2]) < version and pattern.search(lines[at - 1]):
                return NewerSyntax(f"{version[0]}.{version[1]}", what, at)
    return None


_LOOKBACK = 4


# (pattern on the failing line, what it is): syntax that a later Python removed, so no Python the
# linter runs on can read the file
_REMOVED: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"[(,]\s*async\s*="),
        "`async=`, a keyword since Python 3.7 (PyTorch renamed it `non_blocking=`)",
    ),
    (re.compile(r"\b(async|await)\s*=[^=]|\.(async|await)\b|\bdef\s+(async|await)\b"),
     "`async`/`await` as a name, keywords since Python 3.7"),
    (re.compile(r"^\s*print\s+[^\s(=]"), "a Python 2 `print` statement"),
    (re.compile(r"^\s*exec\s+[\"'\w]"), "a Python 2 `exec` statement"),
)


def removed_syntax(text: str, lineno: int | None) -> str | None:
    """What the line of a SyntaxError uses that only an older Python accepted (Python 2, or ``async``
    as a name before 3.7); None when it is not such a line."""
    lines = text.splitlines()
    if not lineno or not 0 < lineno <= len(lines):
        return None
    for pattern, what in _REMOVED:
        if pattern.search(lines[lineno - 1]):
            return what
    return None


_STARTS = (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)


def erase_type_params(text: str) -> str | None:
    """``text`` with its PEP 695 type parameters blanked out and ``type`` alias keywords dropped, the
    lines unchanged in number; None when it has none, or when a parameter list spans lines (blanking
    it would leave a broken line) or the text does not tokenize."""
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    lines = text.splitlines(keepends=True)
    cuts: list[tuple[int, int, int]] = []  # (row, start col, end col) to blank or drop
    drops: set[tuple[int, int]] = set()  # (row, col) of a `type` keyword
    for i, tok in enumerate(toks[:-2]):
        name, after = toks[i + 1], toks[i + 2]
        if tok.type != tokenize.NAME or name.type != tokenize.NAME or after.type != tokenize.OP:
            continue
        if tok.string == "type" and (i == 0 or toks[i - 1].type in _STARTS) and after.string in ("=", "["):
            drops.add(tok.start)
        elif tok.string not in ("def", "class") or after.string != "[":
            continue
        if after.string != "[":
            continue
        depth, j = 0, i + 2
        while j < len(toks):
            if toks[j].type == tokenize.OP and toks[j].string in "([{":
                depth += 1
            elif toks[j].type == tokenize.OP and toks[j].string in ")]}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if j == len(toks) or toks[j].end[0] != after.start[0]:
            return None
        cuts.append((after.start[0], after.start[1], toks[j].end[1]))
    if not cuts and not drops:
        return None
    for row, a, b in cuts:
        line = lines[row - 1]
        lines[row - 1] = line[:a] + " " * (b - a) + line[b:]
    for row, col in drops:  # `type A = B` -> `A = B` (the name moves left; columns there are off by 5)
        line = lines[row - 1]
        rest = line[col + 4 :]
        lines[row - 1] = line[:col] + rest.lstrip(" \t")
    return "".join(lines)


def rename_old_async(text: str) -> str | None:
    """``text`` with ``async`` used as a keyword argument or a name (``x.cuda(async=True)``, the
    PyTorch < 0.4 spelling, valid before Python 3.7) renamed to ``_asyn``, same length, so lines and
    columns stay where they were; None when there is none or the text does not tokenize."""
    if "async" not in text:
        return None
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    spots = [
        tok.start
        for tok, after in zip(toks, toks[1:])
        if tok.type == tokenize.NAME and tok.string == "async" and after.type == tokenize.OP and after.string == "="
    ]
    if not spots:
        return None
    lines = text.splitlines(keepends=True)
    for row, col in spots:
        line = lines[row - 1]
        lines[row - 1] = line[:col] + "_asyn" + line[col + 5 :]
    return "".join(lines)


def parse_source(text: str, path: str) -> ast.Module:
    """``ast.parse``, and on a Python older than 3.12 a second try with the PEP 695 type parameters
    erased (see erase_type_params); then a try with an old ``async=`` keyword argument renamed (see
    rename_old_async); the first SyntaxError when that does not parse either."""
    try:
        return _parse(text, path)
    except SyntaxError:
        erased = erase_type_params(text) if sys.version_info < (3, 12) else None
        for retry in (erased, rename_old_async(erased or text)):
            if retry is None:
                continue
            try:
                return _parse(retry, path)
            except SyntaxError:
                pass
        raise


def _parse(text: str, path: str) -> ast.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences etc. are not ours to report
        return ast.parse(text, filename=path)
