"""Parser of ``ibstat`` output (pure), the fallback when sysfs is not readable (e.g. a pasted log)."""

from __future__ import annotations

import re

from ddpdoctor.model.topology import IbPort, Nic

_CA_RE = re.compile(r"^CA '([^']+)'")
_PORT_RE = re.compile(r"^\s+Port (\d+):\s*$")
_KV_RE = re.compile(r"^\s+([A-Za-z][A-Za-z ]*?):\s*(.*)$")


class IbstatParseError(ValueError):
    """Text that holds no ``CA '...'`` block."""


def parse_ibstat(text: str) -> list[Nic]:
    nics: list[Nic] = []
    port: IbPort | None = None
    for line in text.splitlines():
        if m := _CA_RE.match(line):
            nics.append(Nic(name=m.group(1), rdma=True))
            port = None
            continue
        if not nics:
            continue
        if m := _PORT_RE.match(line):
            port = IbPort(port=int(m.group(1)))
            nics[-1].ports.append(port)
            continue
        m = _KV_RE.match(line)
        if not m:
            continue
        key, value = m.group(1).strip(), m.group(2).strip()
        if port is None:
            if key == "CA type":
                nics[-1].hca_type = value
            elif key == "Firmware version":
                nics[-1].fw_ver = value
        elif key == "State":
            port.state = value.upper()
        elif key == "Physical state":
            port.phys_state = value
        elif key == "Rate":
            port.rate_text = f"{value} Gb/sec"
            port.rate_gbps = float(value) if re.fullmatch(r"[\d.]+", value) else None
        elif key == "Link layer":
            port.link_layer = value
    if not nics:
        raise IbstatParseError("no \"CA '<name>'\" block: not ibstat output")
    return nics
