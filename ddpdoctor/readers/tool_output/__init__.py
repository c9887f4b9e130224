"""Parsers of what users already measured: nccl-tests, nvbandwidth, p2pBandwidthLatencyTest, perftest.

``parse_file(path)`` reads one file and returns a ``Parsed`` with every run it found; a log may mix
several tools (each parser reads only its own lines). Pure apart from reading the file: the parsers
take text. Bad input raises ToolOutputError naming the file and, where it can, the line.
"""

from __future__ import annotations

import json
from pathlib import Path

from ddpdoctor.model.imported.tool_runs import (
    BwMatrix,
    Device,
    Half,
    NcclRow,
    NcclRun,
    Parsed,
    RdmaRow,
    RdmaRun,
    ToolOutputError,
)
from ddpdoctor.readers.tool_output import cuda_p2p, nccl_tests, nvbandwidth, perftest

__all__ = [
    "BwMatrix",
    "Device",
    "Half",
    "NcclRow",
    "NcclRun",
    "Parsed",
    "RdmaRow",
    "RdmaRun",
    "ToolOutputError",
    "parse_file",
    "parse_text",
]

KNOWN = "nccl-tests (*_perf, text or -J JSON), nvbandwidth (text or -j JSON), p2pBandwidthLatencyTest, perftest (ib_*_bw)"


def _parse_json(text: str, path: str) -> Parsed:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ToolOutputError(path, e.lineno, f"looks like JSON but is not valid: {e.msg}") from None
    out = Parsed(path)
    if nccl_tests.looks_like_json(data):
        out.nccl.append(nccl_tests.parse_json(text, path))
        out.tools.append("nccl-tests")
    elif nvbandwidth.looks_like_json(data):
        out.matrices, out.versions = nvbandwidth.parse_json(text, path)
        out.tools.append("nvbandwidth")
    else:
        raise ToolOutputError(path, None, f"JSON, but not from a tool ddpdoctor imports ({KNOWN})")
    return out


def parse_text(text: str, path: str) -> Parsed:
    """Every measurement in ``text``; ``path`` names it in errors."""
    if text.lstrip().startswith("{"):
        return _parse_json(text, path)
    out = Parsed(path)
    out.nccl = nccl_tests.parse_text(text, path)
    if out.nccl:
        out.tools.append("nccl-tests")
    if nvbandwidth.signature(text):
        mats, devs, vers = nvbandwidth.parse_text(text, path)
        out.matrices += mats
        out.devices += devs
        out.versions.update(vers)
        out.tools.append("nvbandwidth")
    if cuda_p2p.signature(text):
        mats, devs = cuda_p2p.parse_text(text, path)
        out.matrices += mats
        out.devices += devs
        out.tools.append("p2pBandwidthLatencyTest")
    if perftest.signature(text):
        out.rdma = perftest.parse_text(text, path)
        out.tools.append("perftest")
    if out.empty:
        raise ToolOutputError(path, None, f"no measurements found; ddpdoctor imports the output of {KNOWN}")
    return out


def parse_file(path: str | Path) -> Parsed:
    p = Path(path)
    from ddpdoctor.boundary.inputs import InputError, read_bytes

    try:  # the input boundary: regular files only (a FIFO never blocks), bounded
        data = read_bytes(p, "benchmark log", 256 << 20)
    except InputError as e:
        raise ToolOutputError(str(p), None, f"{e.problem}; {e.todo}") from None
    if b"\x00" in data[:4096]:
        raise ToolOutputError(str(p), None, "a binary file, expected the text or JSON output of a benchmark")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")  # tool output is ASCII; a stray byte must not cost the import
    if not text.strip():
        raise ToolOutputError(str(p), None, "the file is empty")
    return parse_text(text, str(p))
