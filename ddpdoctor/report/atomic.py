"""Writing an output file so a reader never sees half of it: ``NAME.tmp`` beside it, then a rename
(what node_exporter's textfile collector asks for: it reads only ``*.prom``, never the ``.tmp``).

An existing path that is not a regular file (a folder, a FIFO, a device) is refused, never replaced.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class OutputError(OSError):
    """An output path that cannot or must not be written; the message names it."""


def check_output_path(path: str | os.PathLike[str], flag: str) -> Path:
    """Before any work: the folder exists and the path is absent or a regular file."""
    p = Path(path)
    if not p.parent.is_dir():
        raise OutputError(f"{flag} {p}: folder {p.parent} does not exist")
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        return p
    except OSError as e:
        raise OutputError(f"{flag} {p}: {e.strerror or e}") from None
    if not stat.S_ISREG(mode):
        raise OutputError(f"{flag} {p}: exists and is not a regular file; not replacing it")
    return p


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    p = Path(path)
    check_output_path(p, "output")
    tmp = p.with_name(p.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
