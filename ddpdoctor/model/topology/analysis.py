"""What one node's topology means (pure): its NVLink matrix, NIC rails, GPUDirect RDMA paths, NCCL's
GDR levels. The topology checks (checks/gpu001 ... nccl001) hold their own findings and read these;
comparison across nodes is :mod:`ddpdoctor.model.topology.compare`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.model.nodes.spread import fmt_ranks
from ddpdoctor.model.topology.node import (
    Gpu,
    NodeTopology,
    normalize_busid,
    nvlink_count,
    path_rank,
)

# -- NVLink ----------------------------------------------------------------------------------------


def nvlink_matrix(node: NodeTopology) -> dict:
    """Active NVLinks between each GPU pair (row = GPU, column = peer), the report's matrix shape.

    From NVML's per-link remote ends when known, else from the NV# entries of a parsed matrix.
    """
    n = len(node.gpus)
    labels = [g.label for g in node.gpus]
    values: list[list[int | None]] = [[None if i == j else 0 for j in range(n)] for i in range(n)]
    if any(g.nvlinks for g in node.gpus):
        pos_of_bus = {normalize_busid(g.busid): pos for pos, g in enumerate(node.gpus) if g.busid}
        # An active link whose far end is not one of our GPUs goes to an NVSwitch: through the
        # switches every such GPU reaches every other, as nvidia-smi's NV18 on an HGX board shows.
        via_switch = [0] * n
        for i, g in enumerate(node.gpus):
            for link in g.nvlinks:
                if not link.active:
                    continue
                peer = pos_of_bus.get(_bus_key(link.remote_busid))
                if peer is None:
                    via_switch[i] += 1
                elif peer != i:
                    values[i][peer] += 1
        for i in range(n):
            for j in range(n):
                if i != j and via_switch[i] and via_switch[j]:
                    values[i][j] += min(via_switch[i], via_switch[j])
    else:
        for i, a in enumerate(node.gpus):
            for j, b in enumerate(node.gpus):
                if i != j:
                    values[i][j] = nvlink_count(node.path(a.label, b.label) or "")
    return {"unit": "links", "labels": labels, "values": values}


def _bus_key(busid: str | None) -> str | None:
    try:
        return normalize_busid(busid) if busid else None
    except ValueError:
        return None



# -- GPU health ------------------------------------------------------------------------------------


def gpus_phrase(indices: list[int]) -> str:
    """[3] -> "GPU 3"; [0, 1, 2, 5] -> "GPUs 0-2,5"."""
    return f"GPU {indices[0]}" if len(indices) == 1 else f"GPUs {fmt_ranks(indices)}"


# -- PCIe ------------------------------------------------------------------------------------------


# -- NUMA ------------------------------------------------------------------------------------------


# -- NICs and rails --------------------------------------------------------------------------------


@dataclass
class Rail:
    gpu: int
    nic: str | None
    path: str | None  # PIX, PXB, ... or None when the distance is unknown


def rails(node: NodeTopology) -> list[Rail]:
    """Each GPU's nearest NIC by PCIe distance, taking a free NIC first so that a rail-optimized node
    pairs 1:1 (ties go to the lower NIC index)."""
    # NCCL uses its RDMA devices when it has any; sockets NICs only otherwise.
    pool = [n for n in node.nics if n.rdma or n.ports] or node.nics
    nics = [n.name for n in pool if any(node.path(g.label, n.name) for g in node.gpus)]
    taken: set[str] = set()
    out: list[Rail] = []
    for g in node.gpus:
        dists = [(path_rank(p), k, name, p) for k, name in enumerate(nics) if (p := node.path(g.label, name))]
        if not dists:
            out.append(Rail(g.index, None, None))
            continue
        best = min(d[0] for d in dists)
        nearest = [d for d in dists if d[0] == best]
        free = [d for d in nearest if d[2] not in taken] or nearest
        _, _, name, p = min(free)
        taken.add(name)
        out.append(Rail(g.index, name, p))
    return out


# -- GPUDirect RDMA --------------------------------------------------------------------------------

# NCCL_NET_GDR_LEVEL: path names, or legacy integers (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4+ SYS).
_LEGACY_LEVELS = ["X", "PIX", "PXB", "PHB", "SYS"]
_LEVEL_ALIASES = {"LOC": "X", "NVL": "NV", "NVB": "NV", "C2C": "NV", "P2C": "PXB", "PXN": "PHB"}
DEFAULT_GDR_LEVEL = "PXB"  # NCCL's default: GDR when GPU and NIC share a PCIe switch


def parse_gdr_level(value: str) -> str:
    v = value.strip().upper()
    if v.isdigit():
        return _LEGACY_LEVELS[min(int(v), 4)]
    v = _LEVEL_ALIASES.get(v, v)
    path_rank(v)  # raises on junk
    return v


def _nccl_rank(path: str) -> int:
    # NCCL has no NODE: crossing host bridges inside a NUMA node is its PHB.
    return path_rank("PHB" if path == "NODE" else path)


def kernel_at_least(release: str, major: int, minor: int) -> bool:
    parts = release.split(".")
    try:
        return (int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)) >= (major, minor)
    except (IndexError, ValueError):
        return False


@dataclass
class GdrVerdict:
    gpu: int
    nic: str | None
    path: str | None
    enabled: bool | None  # None: cannot tell from what was probed
    mechanism: str  # "peermem", "dmabuf", ""
    reason: str
    cause: str = ""  # the reason without this pair's names, so pairs off for one cause share a finding


def gdr_mechanism(node: NodeTopology, gpu: Gpu) -> tuple[str, str]:
    """("peermem" | "dmabuf" | "" | "unknown", why) — can the NIC driver reach GPU memory at all."""
    pm = node.peermem
    if pm.present:
        return "peermem", f"peer memory module present ({pm.found[0]})"
    if not pm.probed:
        return "unknown", "peer memory was not probed (topology read from a file)"
    why_not = []
    if gpu.dmabuf_supported is False:
        why_not.append("the GPU/driver reports no DMA-BUF support")
    if pm.kernel and not kernel_at_least(pm.kernel, 5, 12):
        why_not.append(f"kernel {pm.kernel} predates RDMA DMA-BUF (5.12)")
    if pm.open_kernel_module is False:
        why_not.append("the proprietary NVIDIA kernel module is loaded, DMA-BUF needs the open one")
    if not why_not and (gpu.dmabuf_supported or pm.open_kernel_module):
        return "dmabuf", "nvidia_peermem is not loaded, but DMA-BUF is possible"
    detail = "; ".join(why_not) or "DMA-BUF support could not be confirmed"
    return "", f"nvidia_peermem is not loaded and DMA-BUF is not available: {detail}"


def gdr_verdicts(node: NodeTopology) -> list[GdrVerdict]:
    """Per GPU, whether NCCL would use GPUDirect RDMA with its nearest NIC (src/graph/paths.cc,
    ncclTopoCheckGdr): the NIC and the GPU must support it, and their PCIe distance must not exceed
    NCCL_NET_GDR_LEVEL (default PXB)."""
    level_env = node.env.get("NCCL_NET_GDR_LEVEL")
    try:
        level = parse_gdr_level(level_env) if level_env else DEFAULT_GDR_LEVEL
    except ValueError:
        level = DEFAULT_GDR_LEVEL  # NCCL001 reports the bad value
    by_index = {g.index: g for g in node.gpus}
    out: list[GdrVerdict] = []
    rdma = {n.name for n in node.nics if n.ports or n.rdma}
    for r in rails(node):
        g = by_index[r.gpu]
        if r.nic is None:
            out.append(GdrVerdict(r.gpu, None, None, None, "", "no NIC with a known PCIe distance"))
            continue
        if r.nic not in rdma:
            out.append(GdrVerdict(r.gpu, r.nic, r.path, False, "", f"{r.nic} is not an RDMA device",
                                  "the nearest NIC is not an RDMA device"))
            continue
        if node.env.get("NCCL_IB_DISABLE", "0").strip() not in ("", "0"):
            out.append(
                GdrVerdict(r.gpu, r.nic, r.path, False, "", "NCCL_IB_DISABLE is set: NCCL uses sockets")
            )
            continue
        if g.gdr_supported is False:
            out.append(
                GdrVerdict(r.gpu, r.nic, r.path, False, "", f"GPU {g.index} does not support GPUDirect RDMA",
                           "the GPU does not support GPUDirect RDMA")
            )
            continue
        mech, why = gdr_mechanism(node, g)
        if _nccl_rank(r.path) > path_rank(level):
            src = f"NCCL_NET_GDR_LEVEL={level_env}" if level_env else f"NCCL's default level {level}"
            out.append(
                GdrVerdict(
                    r.gpu,
                    r.nic,
                    r.path,
                    False,
                    mech,
                    f"GPU {g.index} and {r.nic} are {r.path} apart, farther than {src}",
                    f"GPU and NIC are {r.path} apart, farther than {src}",
                )
            )
        elif mech == "":
            out.append(GdrVerdict(r.gpu, r.nic, r.path, False, "", why))
        elif mech == "unknown":
            out.append(
                GdrVerdict(r.gpu, r.nic, r.path, None, "", f"close enough ({r.path} ≤ {level}); {why}")
            )
        else:
            out.append(GdrVerdict(r.gpu, r.nic, r.path, True, mech, f"{r.path} ≤ {level}; {why}"))
    return out


