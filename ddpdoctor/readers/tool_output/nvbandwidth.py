"""nvbandwidth output: the text report and the ``-j`` JSON. Pure.

Text (output.cpp, common.h in NVIDIA/nvbandwidth): ``nvbandwidth Version: v0.6``, driver lines, the
GPUs as ``Device 0: NVIDIA H100 80GB HBM3 (00000000:1b:00)`` (multi-node builds: ``Process 0 (host):
device 0: NAME (bus)``), then per test ``Running NAME.``, a description such as ``memcpy CE GPU(row)
<- GPU(column) bandwidth (GB/s)``, the matrix (column labels, then ``row v v …``, ``N/A`` where a pair
was not measured) and ``SUM NAME total``. Waived tests print ``Waived:`` and no matrix.

JSON: ``{"nvbandwidth": {"version", "Driver Version", "testcases": [{"name", "status",
"bandwidth_description", "bandwidth_matrix": [["276.07", "N/A", …]], "sum"}]}}`` (json_output.cpp);
the cells are strings. The JSON lists no GPU names.
"""

from __future__ import annotations

import json
import re

from ddpdoctor.model.imported.tool_runs import BwMatrix, Device, ToolOutputError
from ddpdoctor.readers.tool_output.common import read_grid, to_float

_VERSION_RE = re.compile(r"^nvbandwidth Version:\s*(\S+)")
_DRIVER_RE = re.compile(r"^Driver Version:\s*(\S+)")
_DEVICE_RE = re.compile(r"^Device (\d+): (.+?)(?: \(([0-9a-fA-F:.]+)\))?\s*$")
_PROCESS_RE = re.compile(
    r"^Process\s+\d+\s+\((\S+)\):\s*device\s+(\d+):\s*(.+?)(?: \(([0-9a-fA-F:.]+)\))?\s*$"
)
_RUNNING_RE = re.compile(r"^Running (\w+)\.\s*$")
_SUM_RE = re.compile(r"^SUM (\w+) (\S+)")
_DESC_RE = re.compile(r"(GPU|CPU)\(row\)\s*(<->|<-|->)\s*(GPU|CPU)\(column\)")
_UNIT_RE = re.compile(r"\((GB/s|ns|us)\)\s*$")


def signature(text: str) -> bool:
    return "nvbandwidth Version" in text or bool(re.search(r"^Running \w+_(ce|sm)\.", text, re.MULTILINE))


def _shape(description: str) -> tuple[str, str, str, str]:
    """(row kind, direction, column kind, unit) from a description line."""
    m = _DESC_RE.search(description)
    u = _UNIT_RE.search(description)
    if not m:
        return "GPU", "->", "GPU", u.group(1) if u else "GB/s"
    return m.group(1), m.group(2), m.group(3), u.group(1) if u else "GB/s"


def _matrix(name: str, desc: str, rows: list[str], cols: list[str], values, source: str) -> BwMatrix:
    row_kind, direction, col_kind, unit = _shape(desc)
    return BwMatrix(
        "nvbandwidth", name, desc, unit, row_kind, col_kind, direction, rows, cols, values, source
    )


def parse_text(text: str, path: str) -> tuple[list[BwMatrix], list[Device], dict[str, str]]:
    lines = text.splitlines()
    matrices: list[BwMatrix] = []
    devices: list[Device] = []
    versions: dict[str, str] = {}
    i = 0
    while i < len(lines):
        s = lines[i].strip()
        if m := _VERSION_RE.match(s):
            versions["nvbandwidth"] = m.group(1)
        elif m := _DRIVER_RE.match(s):
            versions["driver"] = m.group(1)
        elif m := _DEVICE_RE.match(s):
            devices.append(Device(int(m.group(1)), m.group(2), None, m.group(3)))
        elif m := _PROCESS_RE.match(s):
            devices.append(Device(int(m.group(2)), m.group(3), m.group(1), m.group(4)))
        elif m := _RUNNING_RE.match(s):
            name, start = m.group(1), i + 1
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j >= len(lines):
                raise ToolOutputError(path, i + 1, f"{name} started but the log ends before its result")
            desc = lines[j].strip()
            if _RUNNING_RE.match(desc) or desc.startswith(("Waived", "SUM ")) or not _UNIT_RE.search(desc):
                i = j  # waived, failed or a message: no matrix for this test
                continue
            if j + 1 >= len(lines):
                raise ToolOutputError(path, j + 1, f"{name}: the log ends before its matrix")
            cols, rows, values, end = read_grid(lines, j + 1, path)
            mat = _matrix(name, desc, rows, cols, values, f"{path}:{start}")
            k = end
            while k < len(lines) and not lines[k].strip():
                k += 1
            if k < len(lines) and (sm := _SUM_RE.match(lines[k].strip())) and sm.group(1) == name:
                mat.total = to_float(sm.group(2))
                end = k + 1
            matrices.append(mat)
            i = end
            continue
        i += 1
    return matrices, devices, versions


def looks_like_json(data: object) -> bool:
    return isinstance(data, dict) and isinstance(data.get("nvbandwidth"), dict)


def parse_json(text: str, path: str) -> tuple[list[BwMatrix], dict[str, str]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ToolOutputError(path, e.lineno, f"not valid JSON: {e.msg}") from None
    if not looks_like_json(data):
        raise ToolOutputError(path, None, "JSON, but not nvbandwidth -j output (no 'nvbandwidth' object)")
    root = data["nvbandwidth"]
    versions = {
        k: str(root[j]) for k, j in (("nvbandwidth", "version"), ("driver", "Driver Version")) if j in root
    }
    out = []
    for k, tc in enumerate(root.get("testcases") or []):
        if not isinstance(tc, dict) or "bandwidth_matrix" not in tc:
            continue  # waived or failed: no matrix
        grid = tc["bandwidth_matrix"]
        name = str(tc.get("name") or f"testcase {k}")
        if not isinstance(grid, list) or not grid or not all(isinstance(r, list) for r in grid):
            raise ToolOutputError(
                path, None, f"nvbandwidth JSON: {name}: bandwidth_matrix is not a list of rows"
            )
        values = []
        for r in grid:
            cells = [to_float(str(c)) for c in r]
            if any(v is None and str(c) != "N/A" for v, c in zip(cells, r)):
                raise ToolOutputError(
                    path, None, f"nvbandwidth JSON: {name}: a cell that is neither a number nor N/A"
                )
            values.append(cells)
        width = max(len(r) for r in values)
        desc = str(tc.get("bandwidth_description") or "")
        total = tc.get("sum")
        rows = [str(i) for i in range(len(values))]
        padded = [r + [None] * (width - len(r)) for r in values]
        mat = _matrix(name, desc, rows, [str(j) for j in range(width)], padded, f"{path} ({name})")
        mat.total = float(total) if isinstance(total, (int, float)) else None
        out.append(mat)
    return out, versions
