"""Reading and writing report files, with errors a user can act on."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ddpdoctor.core.report import Report


class ReportError(Exception):
    """A report file that cannot be read; the message names the file and the problem."""


class JsonFileError(ValueError):
    """A JSON file that cannot be read; the message starts with the file's name."""


def read_json(path: str | os.PathLike[str], what: str = "file") -> object:
    """The JSON in ``path``, or a JsonFileError saying why not (unreadable, not text, not JSON, nested
    too deeply for the parser) — every CLI input file goes through here, so none ends in a traceback."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise JsonFileError(f"{p}: cannot read {what}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise JsonFileError(f"{p}: not a text file") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise JsonFileError(f"{p}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
    except RecursionError:
        raise JsonFileError(f"{p}: JSON nested too deeply to read (not a ddpdoctor {what})") from None


def load_report(path: str | os.PathLike[str]) -> Report:
    p = Path(path)
    try:
        data = read_json(p, "report")
    except JsonFileError as e:
        raise ReportError(str(e)) from None
    try:
        return Report.from_dict(data)
    except (KeyError, TypeError, ValueError) as e:
        raise ReportError(f"{p}: not a ddpdoctor report: {e}") from None
    except RecursionError:
        raise ReportError(f"{p}: not a ddpdoctor report: nested too deeply") from None


def write_json_atomic(path: str | os.PathLike[str], data: dict) -> None:
    """Write JSON so that a reader never sees half a file (temp file + rename)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, default=str)
            f.write("\n")
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def save_report(report: Report, path: str | os.PathLike[str]) -> None:
    write_json_atomic(path, report.to_dict())
