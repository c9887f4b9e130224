"""The hardware topology of one node, as plain data (pure: no torch, no NVML, no file I/O).

A ``NodeTopology`` is what a probe (NVML + sysfs) or a parser (``nvidia-smi topo -m``, NCCL topology
XML) produces and what ``ddpdoctor topo --save`` writes. Analysis lives in
:mod:`ddpdoctor.model.topology.analysis`; this module only holds the shapes and their JSON round-trip.

Path types between two devices use the ``nvidia-smi topo -m`` vocabulary (DESIGN.md §5), ordered from
closest to farthest: X < NV# < PIX < PXB < PHB < NODE < SYS.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

SNAPSHOT_SCHEMA = "ddpdoctor.topology/1"

# Closest first. NV# (any bonded NVLink count) ranks as "NV".
PATH_ORDER = ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS")
_NV_RE = re.compile(r"^NV(\d+)$")
_OLD_NAMES = {"SOC": "SYS"}  # nvidia-smi before 2017 wrote SOC for SYS


def path_rank(path: str) -> int:
    """Position of a path type in PATH_ORDER (NV12 -> NV). Unknown types raise ValueError."""
    p = path.strip().upper()
    if _NV_RE.match(p):
        p = "NV"
    p = _OLD_NAMES.get(p, p)
    try:
        return PATH_ORDER.index(p)
    except ValueError:
        raise ValueError(
            f"unknown topology path type {path!r}; expected one of X, NV#, PIX, PXB, PHB, NODE, SYS"
        ) from None


def nvlink_count(path: str) -> int:
    """Bonded NVLinks in a path type ("NV18" -> 18, anything else -> 0)."""
    m = _NV_RE.match(path.strip().upper())
    return int(m.group(1)) if m else 0


def parse_cpulist(text: str) -> list[int]:
    """A Linux cpulist ("0-31,64-95") as sorted CPU ids. Empty or N/A -> []."""
    text = (text or "").strip()
    if text in ("", "N/A"):
        return []
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"bad CPU list {text!r} (expected e.g. 0-31,64-95)")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return sorted(cpus)


def format_cpulist(cpus: list[int]) -> str:
    """Sorted CPU ids back to the compact "0-31,64-95" form."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


_GT_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def pcie_gen(link_speed: str) -> int | None:
    """PCIe generation from a transfer rate as sysfs and NCCL write it ("32.0 GT/s PCIe", "16 GT/s",
    "32 GT/s PCIe/s") -> 5, 4, 5; unknown -> None."""
    try:
        gt = float(link_speed.strip().split()[0])
    except (IndexError, ValueError):
        return None
    return _GT_TO_GEN.get(gt)


def normalize_busid(busid: str) -> str:
    """PCI addresses in one form, ``dddd:bb:dd.f`` lower case (NVML writes 00000000:53:00.0)."""
    b = busid.strip().lower()
    m = re.match(r"^(?:([0-9a-f]+):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])$", b)
    if not m:
        raise ValueError(f"bad PCI bus id {busid!r}")
    dom = int(m.group(1) or "0", 16)
    return f"{dom:04x}:{int(m.group(2), 16):02x}:{int(m.group(3), 16):02x}.{m.group(4)}"


@dataclass
class PcieLink:
    """Negotiated (current) vs capable (max) PCIe generation and width. None: not known."""

    cur_gen: int | None = None
    max_gen: int | None = None
    cur_width: int | None = None
    max_width: int | None = None


@dataclass
class NvLink:
    """One NVLink of a GPU: its index, whether it is up, and the PCI bus id at its other end."""

    link: int
    active: bool
    remote_busid: str | None = None


@dataclass
class Gpu:
    index: int
    name: str = ""
    uuid: str = ""
    busid: str = ""
    memory_MiB: int | None = None
    numa_node: int | None = None
    cpu_affinity: list[int] = field(default_factory=list)
    compute_capability: str = ""  # "9.0"
    pcie: PcieLink = field(default_factory=PcieLink)
    nvlinks: list[NvLink] = field(default_factory=list)
    ecc_enabled: bool | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    retired_pages: int | None = None  # double-bit retired pages (pre-Ampere) or remapped rows
    retired_pending: bool | None = None
    remap_failure: bool | None = None
    throttle_reasons: list[str] = field(default_factory=list)
    gdr_supported: bool | None = None  # CUDA GPUDirect RDMA attribute; None: not probed
    dmabuf_supported: bool | None = None  # CUDA DMA_BUF_SUPPORTED attribute; None: not probed
    nvml_error: str = ""  # NVML could not read this GPU (e.g. "GPU is lost")

    @property
    def label(self) -> str:
        return f"GPU{self.index}"


@dataclass
class IbPort:
    port: int
    state: str = ""  # ACTIVE, DOWN, INIT, ARMED
    phys_state: str = ""  # LinkUp, Disabled, Polling, ...
    rate_gbps: float | None = None
    rate_text: str = ""  # "400 Gb/sec (4X NDR)"
    link_layer: str = ""  # InfiniBand or Ethernet (RoCE)

    @property
    def up(self) -> bool:
        return self.state.upper() == "ACTIVE" and self.phys_state.lower() == "linkup"


@dataclass
class Nic:
    """An RDMA device (mlx5_0, rdmap79s0) or an Ethernet NIC that NCCL may use."""

    name: str
    busid: str = ""
    numa_node: int | None = None
    hca_type: str = ""
    fw_ver: str = ""
    netdevs: list[str] = field(default_factory=list)
    ports: list[IbPort] = field(default_factory=list)
    speed_Mbps: int | None = None  # NCCL XML net speed / ethtool-like speed
    rdma: bool | None = None  # an RDMA device (IB or RoCE) NCCL's IB transport can use
    pcie: PcieLink = field(default_factory=PcieLink)

    @property
    def kind(self) -> str:
        layers = {p.link_layer.lower() for p in self.ports}
        if "infiniband" in layers:
            return "InfiniBand"
        if "ethernet" in layers:
            return "RoCE"
        return "RDMA" if self.rdma else "Ethernet"

    @property
    def rate_gbps(self) -> float | None:
        rates = [p.rate_gbps for p in self.ports if p.rate_gbps is not None]
        if rates:
            return max(rates)
        return self.speed_Mbps / 1000.0 if self.speed_Mbps else None


@dataclass
class PeerMemory:
    """What NCCL looks for before it offers GPUDirect RDMA (DESIGN.md §5)."""

    found: list[str] = field(default_factory=list)  # which of the peer-memory files exist
    probed: bool = False  # False: unknown (e.g. built from a file, not from the machine)
    kernel: str = ""  # uname release: DMA-BUF needs Linux >= 5.12
    open_kernel_module: bool | None = None  # NVIDIA's open GPU kernel module (needed for DMA-BUF)

    @property
    def present(self) -> bool:
        return bool(self.found)


@dataclass
class NetIface:
    name: str
    up: bool
    addresses: list[str] = field(default_factory=list)


@dataclass
class NodeTopology:
    """One node's hardware as seen by one probe run or parsed file."""

    hostname: str = ""
    source: str = ""  # "nvml+sysfs", "nvidia-smi topo -m: FILE", "nccl-xml: FILE", ...
    driver_version: str = ""
    cuda_driver_version: str = ""
    gpus: list[Gpu] = field(default_factory=list)
    nics: list[Nic] = field(default_factory=list)
    # Path type between devices, keyed by label: "GPU0" and NIC names ("mlx5_0").
    paths: dict[str, dict[str, str]] = field(default_factory=dict)
    # GPU pairs NVML reports P2P-capable (read and write): {"GPU0": {"GPU1": true}}
    p2p: dict[str, dict[str, bool]] = field(default_factory=dict)
    numa_cpus: dict[int, list[int]] = field(default_factory=dict)
    peermem: PeerMemory = field(default_factory=PeerMemory)
    interfaces: list[NetIface] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # NCCL_* variables of the probing process
    rank_affinity: dict[int, list[int]] = field(default_factory=dict)  # local rank -> CPUs it may run on
    notes: list[str] = field(default_factory=list)  # what could not be read, and why
    no_gpu_reason: str = ""  # set when no NVIDIA GPU could be seen: "no NVIDIA GPU: ..."

    # -- lookups ---------------------------------------------------------------------------------
    def path(self, a: str, b: str) -> str | None:
        if a == b:
            return "X"
        return (self.paths.get(a) or {}).get(b) or (self.paths.get(b) or {}).get(a)

    def set_path(self, a: str, b: str, value: str) -> None:
        path_rank(value)  # validate
        self.paths.setdefault(a, {})[b] = value
        self.paths.setdefault(b, {})[a] = value

    def gpu_by_busid(self, busid: str) -> Gpu | None:
        try:
            key = normalize_busid(busid)
        except ValueError:
            return None
        return next((g for g in self.gpus if g.busid and normalize_busid(g.busid) == key), None)

    # -- JSON --------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["schema"] = SNAPSHOT_SCHEMA
        d["numa_cpus"] = {str(k): v for k, v in self.numa_cpus.items()}
        d["rank_affinity"] = {str(k): v for k, v in self.rank_affinity.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NodeTopology:
        if not isinstance(d, dict) or d.get("schema") != SNAPSHOT_SCHEMA:
            raise ValueError(f"not a ddpdoctor topology snapshot (expected schema {SNAPSHOT_SCHEMA!r})")
        try:
            return cls(
                hostname=str(d.get("hostname", "")),
                source=str(d.get("source", "")),
                driver_version=str(d.get("driver_version", "")),
                cuda_driver_version=str(d.get("cuda_driver_version", "")),
                gpus=[_gpu_from(g) for g in d.get("gpus", [])],
                nics=[_nic_from(n) for n in d.get("nics", [])],
                paths={k: dict(v) for k, v in (d.get("paths") or {}).items()},
                p2p={k: dict(v) for k, v in (d.get("p2p") or {}).items()},
                numa_cpus={int(k): list(v) for k, v in (d.get("numa_cpus") or {}).items()},
                peermem=_build(PeerMemory, d.get("peermem") or {}),
                interfaces=[_build(NetIface, i) for i in d.get("interfaces", [])],
                env=dict(d.get("env") or {}),
                rank_affinity={int(k): list(v) for k, v in (d.get("rank_affinity") or {}).items()},
                notes=list(d.get("notes") or []),
                no_gpu_reason=str(d.get("no_gpu_reason", "")),
            )
        except (TypeError, KeyError, AttributeError) as e:
            raise ValueError(f"malformed topology snapshot: {e}") from None


def _build(cls, d: dict[str, Any]):
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in names})


def _gpu_from(d: dict[str, Any]) -> Gpu:
    g = _build(Gpu, d)
    g.pcie = _build(PcieLink, d.get("pcie") or {})
    g.nvlinks = [_build(NvLink, x) for x in d.get("nvlinks", [])]
    return g


def _nic_from(d: dict[str, Any]) -> Nic:
    n = _build(Nic, d)
    n.pcie = _build(PcieLink, d.get("pcie") or {})
    n.ports = [_build(IbPort, p) for p in d.get("ports", [])]
    return n
