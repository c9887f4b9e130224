"""Readers of Linux sysfs/procfs under a root path (``/`` on a machine, a fixture tree in tests).

InfiniBand/RoCE devices (``sys/class/infiniband``), PCI devices (``sys/bus/pci/devices``: link speed
and width, NUMA node, bridge chain), NUMA nodes' CPU lists, the peer-memory files NCCL looks for
(DESIGN.md §5), and network interfaces (``sys/class/net``). Missing files give ``None``/empty, never an
exception: a probe reports what it could read.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ddpdoctor.model.topology.node import (
    IbPort,
    NetIface,
    Nic,
    PcieLink,
    PeerMemory,
    normalize_busid,
    parse_cpulist,
    pcie_gen,
)
from ddpdoctor.model.topology.pci_path import PciPlace

# Where NCCL's IB transport looks for the peer-memory client (net_ib.cc, ncclIbGdrSupport).
PEERMEM_FILES = (
    "sys/kernel/mm/memory_peers/nv_mem/version",
    "sys/kernel/mm/memory_peers/nv_mem_nc/version",
    "sys/module/nvidia_peermem/version",
)
_BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def _text_or_empty(path: Path) -> str:
    return read_text(path) or ""


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _state_word(text: str | None) -> str:
    """ "4: ACTIVE" -> "ACTIVE", "5: LinkUp" -> "LinkUp"."""
    return (text or "").split(":", 1)[-1].strip()


def parse_rate_gbps(text: str | None) -> float | None:
    """ "400 Gb/sec (4X NDR)" -> 400.0."""
    m = re.match(r"^\s*([\d.]+)\s*Gb/sec", text or "")
    return float(m.group(1)) if m else None


def read_infiniband(root: str | Path = "/") -> list[Nic]:
    """Every device in ``<root>/sys/class/infiniband`` with its ports, PCI address and netdevs."""
    base = Path(root) / "sys/class/infiniband"
    nics: list[Nic] = []
    if not base.is_dir():
        return nics
    for dev in sorted(base.iterdir(), key=lambda p: p.name):
        nic = Nic(
            name=dev.name,
            hca_type=read_text(dev / "hca_type") or "",
            fw_ver=read_text(dev / "fw_ver") or "",
            rdma=True,
        )
        ports_dir = dev / "ports"
        for port in sorted(
            ports_dir.iterdir() if ports_dir.is_dir() else [], key=lambda p: _int(p.name) or 0
        ):
            rate = read_text(port / "rate")
            nic.ports.append(
                IbPort(
                    port=_int(port.name) or 0,
                    state=_state_word(read_text(port / "state")),
                    phys_state=_state_word(read_text(port / "phys_state")),
                    rate_gbps=parse_rate_gbps(rate),
                    rate_text=rate or "",
                    link_layer=read_text(port / "link_layer") or "",
                )
            )
        pci = dev / "device"
        if pci.exists():
            bdf = os.path.basename(os.path.realpath(pci))
            if _BDF_RE.match(bdf):
                nic.busid = bdf
                dev_dir = Path(root) / "sys/bus/pci/devices" / bdf
                nic.pcie = read_pcie_link(root, bdf)
                nic.numa_node = read_numa_node(root, bdf)
                net = dev_dir / "net"
                if not net.is_dir():
                    net = pci / "net"
                nic.netdevs = sorted(p.name for p in net.iterdir()) if net.is_dir() else []
        nics.append(nic)
    return nics


def _pci_dir(root: str | Path, busid: str) -> Path:
    return Path(root) / "sys/bus/pci/devices" / normalize_busid(busid)


def read_pcie_link(root: str | Path, busid: str) -> PcieLink:
    d = _pci_dir(root, busid)
    return PcieLink(
        cur_gen=pcie_gen(_text_or_empty(d / "current_link_speed")),
        max_gen=pcie_gen(_text_or_empty(d / "max_link_speed")),
        cur_width=_int(read_text(d / "current_link_width")),
        max_width=_int(read_text(d / "max_link_width")),
    )


def read_numa_node(root: str | Path, busid: str) -> int | None:
    n = _int(read_text(_pci_dir(root, busid) / "numa_node"))
    return n if n is not None and n >= 0 else None  # -1: the platform does not say


def read_pci_class(root: str | Path, busid: str) -> str:
    return (read_text(_pci_dir(root, busid) / "class") or "").lower()


def pci_place(root: str | Path, busid: str) -> PciPlace | None:
    """A device's host bridge and bridge chain from its resolved sysfs path
    (``…/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0``)."""
    link = _pci_dir(root, busid)
    if not link.exists():
        return None
    parts = Path(os.path.realpath(link)).parts
    try:
        host = next(i for i, p in enumerate(parts) if p.startswith("pci") and ":" in p)
    except StopIteration:
        return None
    chain = [p for p in parts[host + 1 :] if _BDF_RE.match(p)]
    return PciPlace(numa=read_numa_node(root, busid), root=parts[host], bridges=tuple(chain[:-1]))


def read_numa_cpus(root: str | Path = "/") -> dict[int, list[int]]:
    base = Path(root) / "sys/devices/system/node"
    out: dict[int, list[int]] = {}
    for d in sorted(base.glob("node[0-9]*")) if base.is_dir() else []:
        cpus = read_text(d / "cpulist")
        if cpus is not None:
            out[int(d.name[4:])] = parse_cpulist(cpus)
    return out


def read_peermem(root: str | Path = "/") -> PeerMemory:
    found = ["/" + f for f in PEERMEM_FILES if (Path(root) / f).exists()]
    release = read_text(Path(root) / "proc/sys/kernel/osrelease") or ""
    version = read_text(Path(root) / "proc/driver/nvidia/version")
    open_module = None if version is None else "Open Kernel Module" in version
    return PeerMemory(found=found, probed=True, kernel=release, open_kernel_module=open_module)


def read_interfaces(root: str | Path = "/") -> list[NetIface]:
    """Network interfaces and whether they are up (``operstate`` up, or unknown with IFF_UP set,
    as loopback and some virtual devices report)."""
    base = Path(root) / "sys/class/net"
    out: list[NetIface] = []
    for d in sorted(base.iterdir(), key=lambda p: p.name) if base.is_dir() else []:
        state = (read_text(d / "operstate") or "").lower()
        flags = _int_hex(read_text(d / "flags"))
        up = state == "up" or (state == "unknown" and bool(flags and flags & 0x1))
        out.append(NetIface(name=d.name, up=up))
    return out


def _int_hex(text: str | None) -> int | None:
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None
