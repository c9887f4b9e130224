"""perftest bandwidth output (``ib_write_bw``, ``ib_read_bw``, ``ib_send_bw``; one size or ``-a``). Pure.

A run prints a banner (``RDMA_Write BW Test``, ``RDMA_Read BW Test``, ``Send BW Test``), settings as
``Key : value`` pairs (``Device : mlx5_0``, ``Link type : IB``, ``Connection type : RC``), then
``#bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]`` and one row per size. MB/sec
is 2^20 B/s and Gb/sec (``--report_gbits``) 1.25e8 B/s (format_factor in perftest_resources.c); we
report GB/s = 1e9 B/s. The server and the client of a loopback run may interleave their lines in
one log: identical rows count once.
"""

from __future__ import annotations

import re

from ddpdoctor.model.imported.tool_runs import RdmaRow, RdmaRun, ToolOutputError
from ddpdoctor.readers.tool_output.common import to_float

_BANNER_RE = re.compile(r"^\s*(RDMA_Write|RDMA_Read|Send|Atomic \w+)\s+BW Test\s*$")
_TESTS = {"RDMA_Write": "ib_write_bw", "RDMA_Read": "ib_read_bw", "Send": "ib_send_bw"}
_HEADER_RE = re.compile(r"^\s*#bytes\s+#iterations\s+BW peak\[(\w+)/sec\]\s+BW average\[(\w+)/sec\]")
_SETTING_RE = re.compile(r"([A-Za-z][\w .*]*?)\s*:\s*(\S+)")
_ROW_RE = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)(?:\s+(\S+))?\s*$")
UNITS_B = {"MB": 2**20, "Gb": 1.25e8, "GB": 1e9}


def signature(text: str) -> bool:
    return bool(re.search(r"BW Test\s*$", text, re.MULTILINE)) and "#bytes" in text


def parse_text(text: str, path: str) -> list[RdmaRun]:
    runs: dict[tuple[str, str | None], RdmaRun] = {}
    current: RdmaRun | None = None
    settings: dict[str, str] = {}
    scale: float | None = None
    seen: set[tuple] = set()
    for no, line in enumerate(text.splitlines(), 1):
        if m := _BANNER_RE.match(line):
            test = _TESTS.get(m.group(1), m.group(1).lower().replace(" ", "_") + "_bw")
            current, settings, scale = RdmaRun(test, f"{path}:{no}"), {}, None
            continue
        if current is None:
            continue
        if m := _HEADER_RE.match(line):
            unit = m.group(2)
            if unit not in UNITS_B:
                raise ToolOutputError(
                    path, no, f"perftest bandwidth in {unit}/sec, expected MB/sec or Gb/sec"
                )
            scale = UNITS_B[unit] / 1e9
            current.device = settings.get("Device")
            current.link_type = settings.get("Link type")
            current.connection = settings.get("Connection type")
            current = runs.setdefault((current.test, current.device), current)
            continue
        if scale is None:
            for k, v in _SETTING_RE.findall(line):
                settings[k.strip()] = v
            continue
        if m := _ROW_RE.match(line):
            peak, avg, rate = (to_float(x) if x else None for x in m.group(3, 4, 5))
            if peak is None or avg is None:
                raise ToolOutputError(path, no, "a perftest row whose bandwidth is not a number")
            key = (current.test, current.device, m.group(0).split())
            row = RdmaRow(int(m.group(1)), int(m.group(2)), peak * scale, avg * scale, rate, no)
            if (current.test, current.device, tuple(key[2])) not in seen:
                seen.add((current.test, current.device, tuple(key[2])))
                current.rows.append(row)
        elif line.strip() and line.lstrip()[0].isdigit():
            raise ToolOutputError(
                path, no, "a perftest row cut short (expected #bytes #iterations peak average)"
            )
    out = [r for r in runs.values() if r.rows]
    if runs and not out:
        first = next(iter(runs.values()))
        raise ToolOutputError(
            path,
            int(first.source.rsplit(":", 1)[1]),
            f"{first.test}: a header without rows: the log is cut short",
        )
    return out
