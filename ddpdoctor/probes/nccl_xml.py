"""Parser of NCCL's topology XML (``NCCL_TOPO_FILE`` / ``NCCL_TOPO_DUMP_FILE``), pure.

The file nests ``<cpu numaid affinity>`` → ``<pci busid class link_speed link_width>`` (bridges nest
further ``<pci>``) → ``<gpu dev sm gdr>`` with ``<nvlink target count tclass>``, and ``<nic>`` →
``<net name speed gdr>``. Static vendor files may omit ``<gpu>``/``<nic>`` and only give PCI classes
(0x0302 3D controller = GPU, 0x0207 InfiniBand, 0x0200 Ethernet), or omit classes entirely.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from ddpdoctor.model.topology.node import Gpu, Nic, NodeTopology, PcieLink, normalize_busid, pcie_gen
from ddpdoctor.model.topology.pci_path import PciPlace, pci_path_type

NVSWITCH_CLASS = "0x068000"
AMAZON_EFA_VENDOR = "0x1d0f"  # EFA: an Ethernet-class PCI device that is an RDMA NIC to NCCL (aws-ofi-nccl)


class NcclTopoParseError(ValueError):
    """Not an NCCL topology XML file; the message says why."""


@dataclass
class XmlCpu:
    numa: int | None
    cpus: list[int]
    arch: str = ""
    vendor: str = ""


@dataclass
class XmlPci:
    busid: str
    pci_class: str
    vendor: str
    link_speed: str
    link_width: int | None
    place: PciPlace
    gpu: dict | None = None  # <gpu> attributes
    nvlinks: list[dict] = field(default_factory=list)
    nets: list[dict] = field(default_factory=list)

    @property
    def is_gpu(self) -> bool:
        return self.gpu is not None or self.pci_class.startswith(("0x0302", "0x0300"))

    @property
    def is_nic(self) -> bool:
        return bool(self.nets) or self.pci_class.startswith(("0x0207", "0x0200"))

    @property
    def is_bridge(self) -> bool:
        return self.pci_class.startswith("0x0604")


@dataclass
class NcclTopo:
    cpus: list[XmlCpu]
    pcis: list[XmlPci]
    loose_nets: list[tuple[dict, PciPlace]] = field(default_factory=list)  # <nic> straight under <cpu>

    @property
    def gpus(self) -> list[XmlPci]:
        return [p for p in self.pcis if p.is_gpu]

    @property
    def nics(self) -> list[XmlPci]:
        return [p for p in self.pcis if p.is_nic]


def affinity_cpus(mask: str) -> list[int]:
    """NCCL's affinity mask ("ffffffff,ffff0000,00000000", most significant word first) as CPU ids."""
    if not mask:
        return []
    try:
        value = int(mask.replace(",", ""), 16)
    except ValueError:
        raise NcclTopoParseError(f"bad cpu affinity mask {mask!r}") from None
    return [i for i in range(value.bit_length()) if value >> i & 1]


def parse_nccl_topo(text: str) -> NcclTopo:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise NcclTopoParseError(f"not well-formed XML: {e}") from None
    if root.tag == "graphs":
        raise NcclTopoParseError("this is an NCCL graph file (NCCL_GRAPH_FILE), not a topology file")
    if root.tag != "system":
        raise NcclTopoParseError(f"root element is <{root.tag}>, expected <system>")
    topo = NcclTopo(cpus=[], pcis=[])
    for cpu in root.iter("cpu"):
        numa = int(cpu.get("numaid")) if (cpu.get("numaid") or "").lstrip("-").isdigit() else None
        numa = numa if numa is None or numa >= 0 else None  # -1: NCCL could not tell (a VM's dump)
        topo.cpus.append(
            XmlCpu(numa, affinity_cpus(cpu.get("affinity", "")), cpu.get("arch", ""), cpu.get("vendor", ""))
        )
        root_id = f"cpu{numa}"
        for child in cpu:
            if child.tag == "pci":
                _walk_pci(child, numa, root_id, (), topo)
            elif child.tag == "nic":
                for net in child.iter("net"):
                    topo.loose_nets.append((dict(net.attrib), PciPlace(numa, root_id, ())))
    return topo


def _walk_pci(el: ET.Element, numa: int | None, root_id: str, above: tuple[str, ...], topo: NcclTopo) -> None:
    busid = el.get("busid", "")
    width = el.get("link_width", "")
    gpu_el = el.find("gpu")
    pci = XmlPci(
        busid=busid,
        pci_class=(el.get("class") or "").lower(),
        vendor=(el.get("vendor") or "").lower(),
        link_speed=el.get("link_speed", ""),
        link_width=int(width) if width.isdigit() else None,
        place=PciPlace(numa, root_id, above),
        gpu=dict(gpu_el.attrib) if gpu_el is not None else None,
        nvlinks=[dict(n.attrib) for n in gpu_el.iter("nvlink")] if gpu_el is not None else [],
        nets=[dict(n.attrib) for nic in el.findall("nic") for n in nic.iter("net")],
    )
    topo.pcis.append(pci)
    for child in el.findall("pci"):
        _walk_pci(child, numa, root_id, above + (busid,), topo)


def nccl_to_node(t: NcclTopo, hostname: str = "", source: str = "nccl-topo-xml") -> NodeTopology:
    node = NodeTopology(hostname=hostname, source=source)
    for c in t.cpus:
        if c.numa is not None and c.cpus:
            node.numa_cpus[c.numa] = c.cpus
    cpus_of = {c.numa: c.cpus for c in t.cpus}
    places: dict[str, PciPlace] = {}
    for k, p in enumerate(t.gpus):
        index = int(p.gpu["dev"]) if p.gpu and str(p.gpu.get("dev", "")).isdigit() else k
        gdr = p.gpu.get("gdr") if p.gpu else None
        sm = p.gpu.get("sm", "") if p.gpu else ""
        gpu = Gpu(
            index=index,
            busid=_busid(p.busid),
            numa_node=p.place.numa,
            cpu_affinity=list(cpus_of.get(p.place.numa, [])),
            compute_capability=f"{int(sm) // 10}.{int(sm) % 10}" if sm.isdigit() else "",
            pcie=PcieLink(max_gen=pcie_gen(p.link_speed), max_width=p.link_width or None),
            gdr_supported=None if gdr is None else gdr == "1",
        )
        node.gpus.append(gpu)
        places[gpu.label] = p.place
    node.gpus.sort(key=lambda g: g.index)
    for k, p in enumerate(t.nics):
        names = [n.get("name") for n in p.nets if n.get("name")] or [f"NIC{k}"]
        speed = next((int(n["speed"]) for n in p.nets if str(n.get("speed", "")).isdigit()), None)
        for name in names:
            rdma = (
                p.pci_class.startswith("0x0207")
                or p.vendor == AMAZON_EFA_VENDOR
                or any(n.get("gdr") == "1" for n in p.nets)
            )
            node.nics.append(
                Nic(
                    name=name,
                    busid=_busid(p.busid),
                    numa_node=p.place.numa,
                    speed_Mbps=speed,
                    rdma=rdma,
                    pcie=PcieLink(max_gen=pcie_gen(p.link_speed), max_width=p.link_width or None),
                )
            )
            places[name] = p.place
    for net, place in t.loose_nets:
        name = net.get("name") or f"NIC{len(node.nics)}"
        speed = int(net["speed"]) if str(net.get("speed", "")).isdigit() else None
        node.nics.append(Nic(name=name, numa_node=place.numa, speed_Mbps=speed, rdma=net.get("gdr") == "1"))
        places[name] = place
    labels = list(places)
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            node.set_path(a, b, pci_path_type(places[a], places[b]))
    _set_nvlink_paths(t, node)
    return node


def _busid(b: str) -> str:
    try:
        return normalize_busid(b)
    except ValueError:
        return b


def _set_nvlink_paths(t: NcclTopo, node: NodeTopology) -> None:
    """NV# between GPUs: direct links by target bus id; through NVSwitches, the smaller of the two
    GPUs' switch link counts (every GPU reaches every other through the switches)."""
    by_bus = {g.busid: g for g in node.gpus}
    switch_links: dict[str, int] = {}
    direct: dict[tuple[str, str], int] = {}
    for p, g in ((p, by_bus.get(_busid(p.busid))) for p in t.gpus):
        if g is None:
            continue
        for nv in p.nvlinks:
            count = int(nv.get("count", "1")) if str(nv.get("count", "1")).isdigit() else 1
            if (nv.get("tclass") or "").lower() == NVSWITCH_CLASS:
                switch_links[g.label] = switch_links.get(g.label, 0) + count
                continue
            peer = by_bus.get(_busid(nv.get("target", "")))
            if peer is not None and peer is not g:  # some cloud files point a GPU's links at itself
                key = tuple(sorted((g.label, peer.label)))
                direct[key] = max(direct.get(key, 0), count)
    for (a, b), count in direct.items():
        node.set_path(a, b, f"NV{count}")
    sw = sorted(switch_links)
    for i, a in enumerate(sw):
        for b in sw[i + 1 :]:
            node.set_path(a, b, f"NV{min(switch_links[a], switch_links[b])}")
