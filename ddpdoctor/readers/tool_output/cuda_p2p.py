"""cuda-samples ``p2pBandwidthLatencyTest`` output. Pure.

It prints ``[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]``, the GPUs as ``Device: 0, NVIDIA H100
80GB HBM3, pciBusID: 18, pciDeviceID: 0, pciDomainID:0``, then titled matrices: ``P2P Connectivity
Matrix``, ``Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)``, ``Unidirectional P2P=Enabled
Bandwidth (P2P Writes) Matrix (GB/s)`` (older samples: no "(P2P Writes)"), the bidirectional pair,
and latency matrices in µs with a ``GPU`` and a ``CPU`` part. Rows are ``D\\D``-headed, row = the
sending GPU. The diagonal is a copy inside one GPU, not a link, so it is dropped (None).
"""

from __future__ import annotations

import re

from ddpdoctor.model.imported.tool_runs import BwMatrix, Device, ToolOutputError
from ddpdoctor.readers.tool_output.common import read_grid

_DEVICE_RE = re.compile(r"^Device:\s*(\d+),\s*(.+?),\s*pciBusID:\s*(\w+)")
_TITLE_RE = re.compile(r"^(.*Matrix)\s*\((GB/s|us)\)\s*$")
SIGNATURE = "P2P (Peer-to-Peer) GPU Bandwidth Latency Test"


def signature(text: str) -> bool:
    return SIGNATURE in text or "P2P=Enabled Bandwidth" in text


def parse_text(text: str, path: str) -> tuple[list[BwMatrix], list[Device]]:
    lines = text.splitlines()
    devices: list[Device] = []
    out: list[BwMatrix] = []
    i = 0
    while i < len(lines):
        s = lines[i].strip()
        if m := _DEVICE_RE.match(s):
            devices.append(Device(int(m.group(1)), m.group(2), None, m.group(3)))
        elif (m := _TITLE_RE.match(s)) and "Connectivity" not in s:
            title, unit = m.group(1), m.group(2)
            j = i + 1
            parts = 0
            while j < len(lines) and lines[j].split()[:1] in (["D\\D"], ["GPU"], ["CPU"]):
                corner = lines[j].split()[0]
                cols, rows, values, end = read_grid(lines, j, path, corner=corner)
                for k in range(min(len(rows), len(cols))):
                    values[k][k] = None  # a GPU's copy to itself is not a link
                short = title.replace(" Bandwidth", "").replace(" Matrix", "")  # fits 80 columns
                name = short if corner != "CPU" else f"{short} (CPU-initiated)"
                bidir = title.startswith("Bidirectional")
                out.append(
                    BwMatrix(
                        "p2pBandwidthLatencyTest",
                        name,
                        f"{title} ({unit})",
                        unit,
                        "GPU",
                        "GPU",
                        "<->" if bidir else "->",
                        rows,
                        cols,
                        values,
                        f"{path}:{i + 1}",
                    )
                )
                parts += 1
                j = end
                while j < len(lines) and not lines[j].strip():
                    j += 1
            if parts == 0:
                raise ToolOutputError(
                    path, i + 1, f"{title}: no matrix follows the title (the log is cut short?)"
                )
            i = j
            continue
        i += 1
    return out, devices
