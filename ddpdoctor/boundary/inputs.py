"""The input boundary: every file a user names is read here.

Only regular files are read: a FIFO, a device (/dev/zero), a socket or a folder is refused before a
byte is read. The file is opened with O_NONBLOCK and judged by fstat on the open descriptor, so a FIFO
never blocks the open and nothing can be swapped in between the check and the read. Reads are
bounded (the limit is named in the message), and JSON/YAML parsing turns every parser failure —
syntax, nesting deeper than the parser's recursion limit, integers past Python's 4,300-digit limit —
into one InputError line ``PATH[:LINE]: what is wrong; what to do``.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

MiB = 1 << 20
# Defaults by kind of file. A report of a 1,000-rank run with every P2P pair is ~100 MiB of JSON.
JSON_LIMIT = 512 * MiB
TEXT_LIMIT = 64 * MiB


class InputError(ValueError):
    """A file that cannot be used as input. ``str()`` is ``PATH[:LINE]: problem; what to do``."""

    def __init__(self, path: str | os.PathLike[str], problem: str, todo: str = "", line: int | None = None):
        self.path = str(path)
        self.problem = problem
        self.todo = todo
        self.line = line
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {problem}{'; ' + todo if todo else ''}")


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, word in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return word
    return "not a regular file"


def _size_words(n: int) -> str:
    return f"{n / MiB:g} MiB" if n >= MiB else f"{n} bytes"


def read_bytes(path: str | os.PathLike[str], what: str = "file", limit: int = TEXT_LIMIT) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``), or an InputError saying why not."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputError(path, f"cannot read {what}: no such file", "check the path") from None
    except OSError as e:
        raise InputError(path, f"cannot read {what}: {e.strerror or e}", "check the path and its permissions") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(path, f"is {file_kind(st.st_mode)}, not a regular file",
                             f"give the {what} itself (ddpdoctor reads only regular files)")
        if st.st_size > limit:
            raise InputError(path, f"{_size_words(st.st_size)}, larger than the {_size_words(limit)} limit "
                             f"for a {what}", f"is this really a {what}?")
        chunks, got = [], 0
        while got <= limit:  # a file that grows while read is still bounded
            chunk = os.read(fd, min(8 * MiB, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise InputError(path, f"larger than the {_size_words(limit)} limit for a {what}",
                             f"is this really a {what}?")
        return b"".join(chunks)
    except OSError as e:
        raise InputError(path, f"cannot read the {what}: {e.strerror or e}", "check the file") from None
    finally:
        os.close(fd)


def decode_text(data: bytes, path: str | os.PathLike[str], what: str = "file") -> str:
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        hint = " (UTF-16?)" if b"\x00" in data[:4096] else ""
        raise InputError(path, f"not UTF-8 text{hint}: byte {e.start} cannot be decoded",
                         f"give the {what} as UTF-8 text") from None


def read_text(path: str | os.PathLike[str], what: str = "file", limit: int = TEXT_LIMIT) -> str:
    return decode_text(read_bytes(path, what, limit), path, what)


def _int(text: str) -> int:
    if len(text.lstrip("-")) > 4300:  # Python's own int-from-string limit, said as such
        raise _TooLong(len(text))
    return int(text)


class _TooLong(ValueError):
    def __init__(self, digits: int) -> None:
        super().__init__(digits)
        self.digits = digits


def parse_json(text: str, path: str | os.PathLike[str], what: str = "file") -> Any:
    """JSON from ``text`` (read from ``path``), with every parser failure as an InputError."""
    try:
        return json.loads(text, parse_int=_int)
    except json.JSONDecodeError as e:
        raise InputError(path, f"not valid JSON: {e.msg} (column {e.colno})", f"give a {what} in JSON",
                         line=e.lineno) from None
    except _TooLong as e:
        raise InputError(path, f"a number with {e.digits} digits (more than 4,300)",
                         f"not a ddpdoctor {what}") from None
    except RecursionError:
        raise InputError(path, "JSON nested too deeply to read", f"not a ddpdoctor {what}") from None
    except ValueError as e:  # anything else the number parsers refuse
        raise InputError(path, f"not valid JSON: {e}", f"give a {what} in JSON") from None


def read_json(path: str | os.PathLike[str], what: str = "file", limit: int = JSON_LIMIT) -> Any:
    """The JSON in the regular file ``path``, or an InputError saying why not."""
    return parse_json(read_text(path, what, limit), path, what)


def parse_yaml(text: str, path: str | os.PathLike[str], what: str = "file") -> Any:
    """YAML (PyYAML's safe loader: no objects built from tags) with every failure as an InputError."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise InputError(path, f"not valid YAML: {e.problem or e.context}", f"fix the {what}",
                         line=mark.line + 1 if mark else None) from None
    except yaml.YAMLError as e:
        raise InputError(path, f"not valid YAML: {e}", f"fix the {what}") from None
    except RecursionError:
        raise InputError(path, "YAML nested too deeply to read", f"not a {what}") from None
    except ValueError as e:  # e.g. an integer past the 4,300-digit limit
        raise InputError(path, f"not usable YAML: {e}", f"fix the {what}") from None


def plain(text: object):
    """User or machine text as a rich Text: shown as written, never read as markup (``[/red]`` in a
    check's title, torch's ``[enforce fail at …]`` in a summary). Works in rich and in Textual."""
    from rich.text import Text

    return text if isinstance(text, Text) else Text(str(text))
