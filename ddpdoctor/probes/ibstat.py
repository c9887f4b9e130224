"""Parsers of ``ibstat`` and ``ibstatus`` output (pure), the fallback when sysfs is not readable
(e.g. a pasted log). ``parse_ib_tool_output`` tells the two apart."""

from __future__ import annotations

import re

from ddpdoctor.model.topology.node import IbPort, Nic

_CA_RE = re.compile(r"^CA '([^']+)'")
_PORT_RE = re.compile(r"^\s+Port (\d+):\s*$")
_KV_RE = re.compile(r"^\s+([A-Za-z][A-Za-z ]*?):\s*(.*)$")


class IbstatParseError(ValueError):
    """Text that is neither ibstat nor ibstatus output."""


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


_STATUS_HEAD = re.compile(r"^Infiniband device '([^']+)' port (\d+) status:")
_STATUS_KV = re.compile(r"^\s+([a-z_ ]+?):\s*(.*)$")


def parse_ibstatus(text: str) -> list[Nic]:
    """``ibstatus``: one block per port, "Infiniband device 'mlx5_0' port 1 status:" then
    ``state: 4: ACTIVE``, ``phys state: 5: LinkUp``, ``rate: 200 Gb/sec (4X HDR)``, ``link_layer: …``."""
    nics: dict[str, Nic] = {}
    port: IbPort | None = None
    for line in text.splitlines():
        if m := _STATUS_HEAD.match(line):
            nic = nics.setdefault(m.group(1), Nic(name=m.group(1), rdma=True))
            port = IbPort(port=int(m.group(2)))
            nic.ports.append(port)
            continue
        m = _STATUS_KV.match(line)
        if port is None or not m:
            continue
        key, value = m.group(1).strip(), m.group(2).strip()
        if key == "state":
            port.state = value.split(":", 1)[-1].strip().upper()
        elif key == "phys state":
            port.phys_state = value.split(":", 1)[-1].strip()
        elif key == "rate":
            port.rate_text = value
            rate = re.match(r"([\d.]+)\s*Gb/sec", value)
            port.rate_gbps = float(rate.group(1)) if rate else None
        elif key == "link_layer":
            port.link_layer = value
    if not nics:
        raise IbstatParseError("no \"Infiniband device '<name>' port N status:\" block: not ibstatus output")
    return list(nics.values())


def parse_ib_tool_output(text: str) -> list[Nic]:
    """ibstat or ibstatus output, whichever this is."""
    return parse_ibstatus(text) if "Infiniband device '" in text else parse_ibstat(text)
