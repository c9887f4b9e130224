"""nccl-tests ``*_perf`` output: the text table and the ``-J`` JSON file. Pure.

Text (src/util.cu in NVIDIA/nccl-tests): a run starts with ``# nThread …`` (newer versions first print
``# nccl-tests version …`` and ``# Collective test starting: all_reduce_perf``), lists its GPUs as
``#  Rank  0 Group  0 Pid 123 on host device  0 [0000:1b:00] NVIDIA H100 80GB HBM3`` (older: no
Group, ``[0x1b]``), then a header naming the columns, one row per size and the footer
``# Out of bounds values : N OK|FAILED`` / ``# Avg bus bandwidth : X``. The columns after size, count
and type are read from the header: ``redop`` and ``root`` when the test has them, then out-of-place
and in-place ``time algbw busbw #wrong`` (older versions: ``error``, the largest error rather than a
count of wrong elements; newer: optional per-iteration columns and a timestamp). A blank ``redop``
cell prints no token, so a row is read from the right. NCCL INFO/WARN lines between rows are skipped.
Several runs may follow each other in one log.

Which collective a table measured: the ``Collective test starting`` line, else a ``*_perf`` command
line before it in the log, else the file's name (``nccl_allreduce.log``), else busbw/algbw =
2(n−1)/n means all_reduce; otherwise the file is refused with a message saying how to name it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ddpdoctor.model.imported.tool_runs import Device, Half, NcclRow, NcclRun, ToolOutputError
from ddpdoctor.readers.tool_output.common import to_float

# program stem without "_perf", underscores dropped -> our collective names (model/bandwidth/busbw.py)
_OPS = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "sendrecv": "send_recv",
    "broadcast": "broadcast",
    "hypercube": "hypercube",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
}
_BY_LENGTH = sorted(_OPS, key=len, reverse=True)  # "allreduce" before "reduce"

_DEVICE_RE = re.compile(
    r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_START_RE = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_VERSION_RE = re.compile(r"^#\s*nccl-tests version\s+(.*?)\s*$")
_OOB_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)")
_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_ROW_RE = re.compile(r"^\s*\d+\s+\d+\s+[A-Za-z_]\w*\s")
_PROGRAM_RE = re.compile(r"\b(\w+?)_perf(?:_mpi)?\b")
_STAMP_RE = re.compile(r"^\d{4}-\d\d-\d\d$")
_BLANK_HALF = " " * 20  # in-place-only rows print 32 spaces where out-of-place would be
_TIME_COLS = ("time", "cputime")
_WRONG_COLS = ("#wrong", "error")


def op_from_program(name: str) -> str | None:
    """all_reduce_perf, ./build/alltoall_perf_mpi -> all_reduce, all_to_all; None if not a *_perf name."""
    m = _PROGRAM_RE.search(Path(name).name)
    if not m:
        return None
    key = m.group(1).lower().replace("_", "")
    return _OPS.get(key, m.group(1).lower())


def op_from_filename(path: str) -> str | None:
    stem = re.sub(r"[^a-z]", "", Path(path).name.lower())
    return next((_OPS[k] for k in _BY_LENGTH if k in stem), None)


def op_from_ratio(rows: list[NcclRow], nranks: int | None) -> str | None:
    """busbw/algbw is 2(n−1)/n only for all_reduce (nccl-tests doc/PERFORMANCE.md)."""
    if not nranks or nranks < 2:
        return None
    big = [r.main for r in rows if r.main.algbw_GBps > 0]
    if not big:
        return None
    h = max(big, key=lambda h: h.algbw_GBps)
    return "all_reduce" if abs(h.busbw_GBps / h.algbw_GBps - 2 * (nranks - 1) / nranks) < 0.02 else None


def nranks_from_ratio(op: str, rows: list[NcclRow]) -> int | None:
    """The GPU count a table without device lines implies: busbw/algbw is 2(n−1)/n for all_reduce and
    (n−1)/n for all_gather, reduce_scatter and all_to_all (nccl-tests doc/PERFORMANCE.md)."""
    halves = [r.main for r in rows if r.main.algbw_GBps >= 1]  # 2-decimal figures: big ones are exact enough
    if not halves:
        return None
    h = max(halves, key=lambda h: h.algbw_GBps)
    r = h.busbw_GBps / h.algbw_GBps
    scale = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}.get(op)
    if scale is None or not 0 < r < scale:
        return None
    n = round(scale / (scale - r))
    return n if 2 <= n <= 1_000_000 and abs(scale * (n - 1) / n - r) < 0.01 else None


@dataclass
class _Columns:
    """Where the figures sit in a row, from the header line."""

    pre: int  # columns between type and the first time column (redop, root)
    half: list[str]  # names of one half: time, algbw, busbw, #wrong (+ per-iteration columns)
    halves: int  # 2 (out-of-place + in-place) or 1
    timestamp: bool

    @classmethod
    def from_header(cls, names: list[str]) -> _Columns | None:
        starts = [i for i, n in enumerate(names) if n in _TIME_COLS]
        if not starts or names[:3] != ["size", "count", "type"]:
            return None
        stamp = names[-1] == "timestamp"
        metric = names[starts[0] : len(names) - stamp]
        half = metric[: starts[1] - starts[0]] if len(starts) > 1 else metric
        if not {"algbw", "busbw"} <= set(half):
            return None
        return cls(pre=starts[0] - 3, half=half, halves=len(starts[:2]), timestamp=stamp)

    def __post_init__(self) -> None:
        h = self.half
        # positions in a half of time, algbw, busbw, and the wrong/error column (or None)
        self._at = (h.index("time" if "time" in h else "cputime"), h.index("algbw"), h.index("busbw"))
        self._wrong = next((h.index(c) for c in _WRONG_COLS if c in h), None)

    def make_half(self, toks: list[str], where: str) -> Half:
        try:
            t, alg, bus = (float(toks[i]) for i in self._at)
            if not math.isfinite(t + alg + bus):
                raise ValueError("nan or inf")
        except ValueError:
            key, tok = next(
                (k, toks[i])
                for k, i in zip(("time", "algbw", "busbw"), self._at)
                if to_float(toks[i]) is None
            )
            raise ValueError(f"{key} is {tok!r}, not a number ({where})") from None
        wrong = to_float(toks[self._wrong]) if self._wrong is not None else None
        return Half(time_us=t, algbw_GBps=alg, busbw_GBps=bus, wrong=wrong)

    def row(self, line: str) -> NcclRow:
        toks = line.split()
        size, count, dtype, rest = int(toks[0]), int(toks[1]), toks[2], toks[3:]
        if self.timestamp and len(rest) >= 2 and _STAMP_RE.match(rest[-2]):
            rest = rest[:-2]
        n = len(self.half)
        if len(rest) >= n * self.halves and len(rest) <= n * self.halves + self.pre:
            figures = rest[len(rest) - n * self.halves :]
            halves = [
                self.make_half(figures[k * n : (k + 1) * n], f)
                for k, f in enumerate(("out-of-place", "in-place")[: self.halves])
            ]
            out, inp = (halves[0], halves[1]) if self.halves == 2 else (halves[0], None)
        elif self.halves == 2 and _BLANK_HALF in line and n <= len(rest) <= n + self.pre:
            out, inp = None, self.make_half(rest[-n:], "in-place")
        else:
            raise ValueError(
                f"a row of {len(toks)} fields where the header promises {3 + self.pre + n * self.halves}: "
                "the line is cut short or is not an nccl-tests row"
            )
        return NcclRow(size, count, dtype, out, inp)


@dataclass
class _Block:
    line: int
    program: str | None = None  # from "Collective test starting"
    hint: str | None = None  # a *_perf command line seen before the block
    version: str | None = None
    devices: list[Device] = field(default_factory=list)
    devices_cut: bool = False
    cols: _Columns | None = None
    header_line: int = 0
    wrong_column: str = "#wrong"
    rows: list[NcclRow] = field(default_factory=list)
    oob: int | None = None
    oob_line: int | None = None
    avg: float | None = None


def _finish(b: _Block, path: str, single: bool) -> NcclRun | None:
    if b.cols is None:
        return None  # a preamble without a table (the run failed before its first size)
    if b.oob is None:
        last = b.rows[-1].line if b.rows else b.header_line
        raise ToolOutputError(
            path,
            last,
            "the nccl-tests table ends here without its footer ('# Out of bounds values'): the log is "
            "cut short or the run died; import a complete log",
        )
    nranks = None if b.devices_cut or not b.devices else len(b.devices)
    op = (
        (op_from_program(b.program) if b.program else None)
        or (op_from_program(b.hint) if b.hint else None)
        or (op_from_filename(path) if single else None)
        or op_from_ratio(b.rows, nranks)
    )
    if op is None:
        raise ToolOutputError(
            path,
            b.header_line,
            "cannot tell which collective this table measured (older nccl-tests do not print it): "
            "name the file after the test, e.g. all_gather_perf.log, or keep the command line in the log",
        )
    if nranks is None:
        nranks = nranks_from_ratio(op, b.rows)
    return NcclRun(
        op=op,
        source=f"{path}:{b.header_line}",
        devices=b.devices,
        rows=b.rows,
        wrong_column=b.wrong_column,
        out_of_bounds=b.oob,
        out_of_bounds_line=b.oob_line,
        avg_busbw_GBps=b.avg,
        nranks=nranks,
        version=b.version,
    )


def parse_text(text: str, path: str) -> list[NcclRun]:
    """Every nccl-tests run in ``text`` (possibly none). ToolOutputError names the line of a bad table."""
    blocks: list[_Block] = []
    block: _Block | None = None
    hint = version = None

    def new(no: int) -> _Block:
        nonlocal block
        block = _Block(line=no, hint=hint, version=version)
        blocks.append(block)
        return block

    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            if m := _START_RE.match(s):
                new(no).program = m.group(1)
            elif m := _VERSION_RE.match(s):
                version = m.group(1)
            elif s[1:].lstrip().startswith("nThread"):
                if block is None or block.cols is not None or block.devices:
                    new(no)
            elif m := _DEVICE_RE.match(s):
                b = block if block is not None and block.cols is None else new(no)
                b.devices.append(Device(int(m.group(3)), m.group(5), m.group(2), m.group(4), int(m.group(1))))
            elif s.rstrip().endswith("...") and block is not None and block.devices and block.cols is None:
                block.devices_cut = True  # nccl-tests cut a long device list
            elif (names := s[1:].split()) and names[0] == "size" and "busbw" in names:
                cols = _Columns.from_header(names)
                if cols is None:
                    raise ToolOutputError(path, no, "an nccl-tests header without time/algbw/busbw columns")
                b = block if block is not None and block.cols is None else new(no)
                b.cols, b.header_line = cols, no
                b.wrong_column = next((c for c in _WRONG_COLS if c in names), "#wrong")
            elif (m := _OOB_RE.match(s)) and block is not None and block.cols is not None:
                block.oob, block.oob_line = int(m.group(1)), no
            elif (m := _AVG_RE.match(s)) and block is not None and block.cols is not None:
                block.avg = to_float(m.group(1))
                block = None  # the run is complete
            continue
        if block is not None and block.cols is not None and _ROW_RE.match(line):
            if block.oob is not None:
                raise ToolOutputError(path, no, "an nccl-tests row after the table's footer")
            try:
                row = block.cols.row(line)
            except ValueError as e:
                raise ToolOutputError(path, no, str(e)) from None
            row.line = no
            block.rows.append(row)
        elif "_perf" in line and (m := _PROGRAM_RE.search(line)):  # a substring test first: logs are long
            hint = m.group(0)
    tables = [b for b in blocks if b.cols is not None]
    return [r for b in blocks if (r := _finish(b, path, len(tables) == 1)) is not None]


# -- the -J JSON file ---------------------------------------------------------------------------------
def looks_like_json(data: object) -> bool:
    return (
        isinstance(data, dict)
        and isinstance(data.get("results"), list)
        and ("config" in data or "nccl_version" in data or "out_of_bounds" in data)
    )


def _json_half(d: object, where: str) -> Half | None:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise TypeError(f"{where} is not an object")
    vals = {}
    for key in ("alg_bw", "bus_bw"):
        v = d.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{where}.{key} is {v!r}, not a number")
        vals[key] = float(v)
    t = d.get("time", d.get("cpu_time"))
    wrong = d.get("nwrong")
    return Half(
        time_us=float(t) if isinstance(t, (int, float)) else 0.0,
        algbw_GBps=vals["alg_bw"],
        busbw_GBps=vals["bus_bw"],
        wrong=float(wrong) if isinstance(wrong, (int, float)) and not isinstance(wrong, bool) else None,
    )


def parse_json(text: str, path: str) -> NcclRun:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ToolOutputError(path, e.lineno, f"not valid JSON: {e.msg}") from None
    if not looks_like_json(data):
        raise ToolOutputError(path, None, "JSON, but not an nccl-tests -J file (no results list)")
    args = data.get("args") if isinstance(data.get("args"), list) else []
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    devices = []
    for d in config.get("devices") or data.get("devices") or []:
        if isinstance(d, dict):
            devices.append(
                Device(
                    int(d.get("device") or 0),
                    str(d.get("device_info") or ""),
                    d.get("hostname"),
                    d.get("device_hex"),
                    d.get("rank"),
                )
            )
    rows = []
    try:
        for k, r in enumerate(data["results"]):
            where = f"results[{k}]"
            if not isinstance(r, dict) or not isinstance(r.get("size"), int):
                raise TypeError(f"{where} has no integer size")
            out = _json_half(r.get("out_of_place"), f"{where}.out_of_place")
            inp = _json_half(r.get("in_place"), f"{where}.in_place")
            if out is None and inp is None:
                raise ValueError(f"{where} has neither out_of_place nor in_place figures")
            rows.append(NcclRow(r["size"], int(r.get("count") or 0), str(r.get("type") or ""), out, inp))
    except (TypeError, ValueError) as e:
        raise ToolOutputError(path, None, f"nccl-tests JSON: {e}") from None
    oob = data.get("out_of_bounds")
    nranks = len(devices) or None
    prog = str(args[0]) if args else ""
    op = op_from_program(prog) or op_from_filename(path) or op_from_ratio(rows, nranks)
    if op is None:
        raise ToolOutputError(
            path, None, "nccl-tests JSON: cannot tell the collective (args[0] names no *_perf)"
        )
    avg = data.get("average_bus_bandwidth")
    nranks = nranks or nranks_from_ratio(op, rows)
    return NcclRun(
        op=op,
        source=path,
        devices=devices,
        rows=rows,
        out_of_bounds=oob.get("count")
        if isinstance(oob, dict) and isinstance(oob.get("count"), int)
        else None,
        avg_busbw_GBps=avg.get("bandwidth") if isinstance(avg, dict) else None,
        nranks=nranks,
        version=str(data.get("nccl_version")) if data.get("nccl_version") is not None else None,
    )
