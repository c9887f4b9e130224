"""Reading and writing report files, with errors a user can act on."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ddpdoctor.boundary.inputs import InputError
from ddpdoctor.boundary.inputs import read_json as read_json_input
from ddpdoctor.boundary.outputs import write_output
from ddpdoctor.core.report import Report


class ReportError(Exception):
    """A report file that cannot be read; the message names the file and the problem."""


# A JSON file that cannot be read; the message starts with the file's name (boundary/inputs.py).
JsonFileError = InputError


def read_json(path: str | os.PathLike[str], what: str = "file") -> object:
    """The JSON in ``path``, or a JsonFileError saying why not (not a regular file, too big, not
    text, not JSON, nested too deeply, numbers too long) — every CLI input file goes through the
    input boundary, so none ends in a traceback or blocks on a FIFO."""
    return read_json_input(path, what)


def load_report(path: str | os.PathLike[str]) -> Report:
    p = Path(path)
    try:
        data = read_json(p, "report")
    except JsonFileError as e:
        raise ReportError(str(e)) from None
    try:
        return Report.from_dict(data)
    except (KeyError, TypeError, ValueError) as e:
        raise ReportError(f"{p}: not a ddpdoctor report: {e}; give a report written by "
                          "`ddpdoctor check --json`") from None
    except RecursionError:
        raise ReportError(f"{p}: not a ddpdoctor report: nested too deeply") from None


def write_json_atomic(path: str | os.PathLike[str], data: dict, flag: str = "report") -> None:
    """Write JSON so that a reader never sees half a file (boundary/outputs.py: temp file + rename,
    only over a regular file or nothing, no folder created). Raises OutputError naming the path."""
    write_output(path, json.dumps(data, indent=1, default=str) + "\n", flag)


def save_report(report: Report, path: str | os.PathLike[str], flag: str = "--json") -> None:
    write_json_atomic(path, report.to_dict(), flag)
