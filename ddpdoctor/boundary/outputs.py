"""The output boundary: every file a user names for ddpdoctor to write goes through here.

``check_output`` runs before any work starts: the path must be a regular file or nothing, in an
existing folder ddpdoctor may write to (no folder is ever created). ``write_output`` writes a temp
file beside the target and renames it over the target, so a reader never sees half a file — and
because rename replaces whatever is at the path, it first refuses anything that is not a regular
file: a device (/dev/full), a link (/proc/self/fd/1, a symlink to someone's file), a folder. A write
that still fails (disk full, permissions changed during the run) keeps the content in a file of the
temp folder and the OutputError says where: nothing measured is lost.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from ddpdoctor.boundary.inputs import file_kind


class OutputError(OSError):
    """An output path that cannot be written. ``str()``: ``FLAG PATH: problem; what to do``;
    ``kept``: where the content went instead (None when nothing was written yet)."""

    def __init__(self, message: str, kept: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kept = kept

    def __str__(self) -> str:
        return self.message


def _problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be written, or None when it can."""
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    except OSError as e:
        return f"cannot look at it: {e.strerror or e}; give another path"
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            return ("is a symbolic link; give the path of a regular file (ddpdoctor never writes through "
                    "a link)")
        if stat.S_ISDIR(st.st_mode):
            return f"is a folder; give a file name, e.g. {p / 'report.json'}"
        if not stat.S_ISREG(st.st_mode):
            return f"is {file_kind(st.st_mode)}, not a regular file; give the path of a regular file"
    parent = p.absolute().parent
    if not parent.is_dir():
        return f"folder {parent} does not exist; create it first (ddpdoctor creates no folders)"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"folder {parent} is not writable; give a path in a folder you can write"
    if st is not None and not os.access(p, os.W_OK):
        return "the file is not writable; give another path"
    return None


def check_output(path: str | os.PathLike[str] | None, flag: str) -> None:
    """Raise OutputError when ``path`` (the value of ``flag``) could not be written. None passes."""
    if path is None:
        return
    if str(path) == "":
        raise OutputError(f"{flag}: empty path; give a file name")
    why = _problem(path)
    if why is not None:
        raise OutputError(f"{flag} {path}: {why}")


def keep_elsewhere(data: bytes, name: str) -> str:
    """Save ``data`` as a new file in the temp folder (named after ``name``); its path."""
    base = Path(name).name or "output"
    stem, dot, ext = base.rpartition(".")
    prefix, suffix = (f"ddpdoctor-kept-{stem}-", f".{ext}") if dot and stem else (f"ddpdoctor-kept-{base}-", "")
    fd, kept = tempfile.mkstemp(prefix=prefix, suffix=suffix)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return kept


def write_output(path: str | os.PathLike[str], content: str | bytes, flag: str) -> None:
    """Write ``content`` to ``path`` atomically (temp file + rename), only over a regular file or
    nothing. On failure: OutputError naming the path, the reason and where the content was kept."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    p = Path(path)
    why = _problem(p)  # again: the run may have lasted an hour
    if why is None:
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.absolute().parent)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644 & ~_umask())
            os.replace(tmp, p)
            return
        except OSError as e:
            why = f"cannot write: {e.strerror or e}"
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
    try:
        kept = keep_elsewhere(data, p.name)
    except OSError as e:
        raise OutputError(f"{flag} {path}: {why}; could not keep it elsewhere either ({e.strerror or e})") from None
    raise OutputError(f"{flag} {path}: {why}; kept in {kept}", kept=kept)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
