"""Put one node's topology together: NVML for the GPUs, sysfs for NICs, PCIe, NUMA and peer memory,
the environment for NCCL's settings. Optional user files (``nvidia-smi topo -m`` output, an NCCL
topology XML) stand in for NVML/sysfs where those cannot be read."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

from ddpdoctor.model.topology.analysis import nvlink_matrix
from ddpdoctor.model.topology.node import NodeTopology, normalize_busid
from ddpdoctor.model.topology.pci_path import pci_path_type
from ddpdoctor.probes import sysfs
from ddpdoctor.probes.nvml import NoGpu, read_nvml


def nccl_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_")}


def collect_node(
    root: str | Path = "/",
    env: Mapping[str, str] | None = None,
    nvml=None,
    hostname: str | None = None,
    dmabuf_probe: bool = True,
) -> NodeTopology:
    """This node as NVML and ``<root>/sys`` show it. No GPU: ``no_gpu_reason`` says why, and the NICs,
    NUMA and peer-memory facts are still filled in."""
    env = os.environ if env is None else env
    node = NodeTopology(hostname=hostname or socket.gethostname(), source="nvml+sysfs")
    node.env = nccl_env(env)
    node.numa_cpus = sysfs.read_numa_cpus(root)
    node.peermem = sysfs.read_peermem(root)
    node.interfaces = sysfs.read_interfaces(root)
    if str(root) == "/":
        _add_addresses(node)
    node.nics = sysfs.read_infiniband(root)
    try:
        reading = read_nvml(nvml)
    except NoGpu as e:
        node.no_gpu_reason = str(e)
        return node
    node.driver_version = reading.driver_version
    node.cuda_driver_version = reading.cuda_driver_version
    node.gpus = reading.gpus
    node.notes.extend(reading.notes)
    for g in node.gpus:
        if not g.busid:  # NVML could not read it (nvml_error says why)
            continue
        if g.numa_node is None:
            g.numa_node = sysfs.read_numa_node(root, g.busid)
        if not g.cpu_affinity and g.numa_node is not None:
            g.cpu_affinity = list(node.numa_cpus.get(g.numa_node, []))
        if g.pcie.cur_width is None:
            g.pcie = sysfs.read_pcie_link(root, g.busid)
    for (a, b), p in reading.paths.items():
        node.set_path(a, b, p)
    for (a, b), ok in reading.p2p.items():
        node.p2p.setdefault(a, {})[b] = ok
        node.p2p.setdefault(b, {})[a] = ok
    matrix = nvlink_matrix(node)
    for i, a in enumerate(matrix["labels"]):
        for j, b in enumerate(matrix["labels"]):
            if i < j and matrix["values"][i][j]:
                node.set_path(a, b, f"NV{matrix['values'][i][j]}")
    _set_nic_paths(root, node)
    if dmabuf_probe and str(root) == "/":
        _probe_dmabuf(node)
    return node


def _set_nic_paths(root, node: NodeTopology) -> None:
    places = {g.label: sysfs.pci_place(root, g.busid) for g in node.gpus if g.busid}
    places.update({n.name: sysfs.pci_place(root, n.busid) for n in node.nics if n.busid})
    missing = sorted(k for k, v in places.items() if v is None)
    if missing:
        node.notes.append(f"no sysfs PCI entry for {', '.join(missing)}: their PCIe distances are unknown")
    for g in node.gpus:
        for n in node.nics:
            pg, pn = places.get(g.label), places.get(n.name)
            if pg is not None and pn is not None:
                node.set_path(g.label, n.name, pci_path_type(pg, pn))


def _add_addresses(node: NodeTopology) -> None:
    try:
        import psutil
    except ImportError:
        return
    addrs = psutil.net_if_addrs()
    for iface in node.interfaces:
        iface.addresses = [
            a.address for a in addrs.get(iface.name, []) if a.family in (socket.AF_INET, socket.AF_INET6)
        ]


def _probe_dmabuf(node: NodeTopology) -> None:
    """CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (124 in cuda.h) per GPU through the driver API, as NCCL
    asks before it offers DMA-BUF. Leaves None where libcuda cannot be loaded."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        if cuda.cuInit(0) != 0:
            return
    except OSError:
        return
    by_bus = {g.busid: g for g in node.gpus}
    count = ctypes.c_int()
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return
    for ordinal in range(count.value):
        dev, value, buf = ctypes.c_int(), ctypes.c_int(), ctypes.create_string_buffer(32)
        if cuda.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
            continue
        if cuda.cuDeviceGetPCIBusId(buf, 32, dev) != 0:
            continue
        gpu = by_bus.get(normalize_busid(buf.value.decode()))
        if gpu is not None and cuda.cuDeviceGetAttribute(ctypes.byref(value), 124, dev) == 0:
            gpu.dmabuf_supported = bool(value.value)
