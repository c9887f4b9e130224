"""Verdicts on one node's topology (pure): NVLink matrix, PCIe, NUMA, NICs and rails, GPUDirect RDMA.

Every function takes a :class:`NodeTopology` and returns plain data or ``Finding`` objects whose code is
the check that owns the concern (GPU001, NVL001, PCI001, NUMA001, IB001, GDR001). NCCL environment
sanity lives in :mod:`ddpdoctor.model.topology.nccl_env`; comparison across nodes in
:mod:`ddpdoctor.model.topology.compare`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

from ddpdoctor.core.report import Finding, Severity
from ddpdoctor.model.nodes.spread import fmt_ranks
from ddpdoctor.model.topology.node import (
    Gpu,
    NodeTopology,
    format_cpulist,
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


def _nvlink_totals(matrix: dict) -> list[int]:
    return [sum(v or 0 for v in row) for row in matrix["values"]]


def nvlink_findings(node: NodeTopology, code: str = "NVL001") -> list[Finding]:
    """Links NVML reports down, and GPUs with fewer NVLinks to their peers than the other GPUs."""
    out: list[Finding] = []
    for g in node.gpus:
        for link in g.nvlinks:
            if link.active:
                continue
            peer = node.gpu_by_busid(link.remote_busid) if link.remote_busid else None
            between = f"between GPU {g.index} and GPU {peer.index}" if peer else f"of GPU {g.index}"
            out.append(
                Finding(
                    code,
                    Severity.ERROR,
                    f"NVLink {link.link} {between} is down",
                    where={
                        "node": node.hostname,
                        "gpu": g.index,
                        "link": link.link,
                        **({"peer_gpu": peer.index} if peer else {}),
                    },
                    evidence={"active_links": sum(x.active for x in g.nvlinks), "links": len(g.nvlinks)},
                    hint="check `nvidia-smi nvlink --status`; a down link usually means drain and reseat",
                )
            )
    for i, a in enumerate(node.gpus):
        for b in node.gpus[i + 1 :]:
            path = node.path(a.label, b.label) or ""
            if path.startswith("NV") and (node.p2p.get(a.label) or {}).get(b.label) is False:
                # NCCL stops with "P2P is disabled between NVLINK connected GPUs" (src/graph/paths.cc).
                out.append(
                    Finding(
                        code,
                        Severity.ERROR,
                        f"P2P is disabled between NVLink-connected GPU {a.index} and GPU {b.index}",
                        where={"node": node.hostname, "gpu": a.index, "peer_gpu": b.index},
                        evidence={"path": path, "p2p": False},
                        hint="NCCL refuses such a pair unless NCCL_IGNORE_DISABLED_P2P=1; "
                        "usually a hardware or fabric-manager fault",
                    )
                )
    matrix = nvlink_matrix(node)
    totals = _nvlink_totals(matrix)
    if not totals or max(totals) == 0:
        return out
    top = max(totals)
    # A GPU NVML could not read has no link data: GPU001 reports it, not a link fault here.
    deficit = {i: top - t for i, t in enumerate(totals) if t < top and not node.gpus[i].nvml_error}
    flagged = {f.where.get("gpu") for f in out}
    values = matrix["values"]
    # Two GPUs short by the same count: the links between them are the missing ones.
    pairs = [(i, j) for i in deficit for j in deficit if i < j and deficit[i] == deficit[j]]
    paired = {k for p in pairs for k in p} if len(deficit) == 2 else set()
    for i, j in pairs if paired else []:
        a, b = node.gpus[i].index, node.gpus[j].index
        if a not in flagged and b not in flagged:
            out.append(
                Finding(
                    code,
                    Severity.ERROR,
                    f"NVLink between GPU {a} and GPU {b} is degraded: NV{values[i][j]} where the other GPUs "
                    f"suggest NV{values[i][j] + deficit[i]}",
                    where={"node": node.hostname, "gpu": a, "peer_gpu": b},
                    evidence={"links": values[i][j], "expected_links": values[i][j] + deficit[i]},
                )
            )
    for i in sorted(set(deficit) - paired):
        g = node.gpus[i]
        if g.index not in flagged:
            out.append(
                Finding(
                    code,
                    Severity.ERROR,
                    f"GPU {g.index} has {totals[i]} NVLink connections to its peers where other GPUs have "
                    f"{top}: one of its NVLinks is down",
                    where={"node": node.hostname, "gpu": g.index},
                    evidence={"total_links": totals[i], "expected_total": top},
                )
            )
    return out


# -- GPU health ------------------------------------------------------------------------------------

_BAD_THROTTLE = {
    "hw_slowdown": "hardware slowdown (power or thermal emergency)",
    "hw_thermal_slowdown": "hardware thermal slowdown",
    "hw_power_brake_slowdown": "external power brake",
    "sw_thermal_slowdown": "software thermal slowdown",
}


def gpus_phrase(indices: list[int]) -> str:
    """[3] -> "GPU 3"; [0, 1, 2, 5] -> "GPUs 0-2,5"."""
    return f"GPU {indices[0]}" if len(indices) == 1 else f"GPUs {fmt_ranks(indices)}"


def gpu_findings(node: NodeTopology, code: str = "GPU001") -> list[Finding]:
    out: list[Finding] = []
    models = Counter(g.name for g in node.gpus if g.name)
    if len(models) > 1:
        out.append(
            Finding(
                code,
                Severity.WARNING,
                f"mixed GPU models on one node: {', '.join(f'{n}× {m}' for m, n in models.items())}",
                where={"node": node.hostname},
                evidence={"models": dict(models)},
                hint="DDP runs at the pace of the slowest GPU",
            )
        )
    throttled: dict[str, list[Gpu]] = {}
    for g in node.gpus:
        where = {"node": node.hostname, "gpu": g.index, "busid": g.busid}
        if g.nvml_error:
            out.append(
                Finding(
                    code,
                    Severity.ERROR,
                    f"GPU {g.index} cannot be read through NVML: {g.nvml_error}",
                    where=where,
                    hint="check dmesg for Xid errors; a lost GPU needs a reset or a reboot",
                )
            )
            continue
        if g.ecc_uncorrected_volatile:
            out.append(
                Finding(
                    code,
                    Severity.ERROR,
                    f"GPU {g.index} has {g.ecc_uncorrected_volatile} uncorrectable ECC errors "
                    "since the driver loaded",
                    where=where,
                    evidence={"ecc_uncorrected_volatile": g.ecc_uncorrected_volatile},
                    hint="drain the node and reset the GPU (nvidia-smi -r)",
                )
            )
        if g.retired_pending:
            out.append(
                Finding(
                    code,
                    Severity.WARNING,
                    f"GPU {g.index} has a page retirement or row remap pending until the next GPU reset",
                    where=where,
                    evidence={"retired_pages": g.retired_pages},
                )
            )
        if g.remap_failure:
            out.append(
                Finding(
                    code,
                    Severity.ERROR,
                    f"GPU {g.index} ran out of spare rows (row remapping failed)",
                    where=where,
                    hint="the GPU needs replacement",
                )
            )
        bad = [r for r in g.throttle_reasons if r in _BAD_THROTTLE]
        if bad:
            throttled.setdefault(", ".join(_BAD_THROTTLE[r] for r in bad), []).append(g)
    for why, gpus in throttled.items():  # one finding per cause, naming every GPU it holds down
        out.append(
            Finding(
                code,
                Severity.WARNING,
                f"{gpus_phrase([g.index for g in gpus])} clocks held down by {why}",
                where={"node": node.hostname, "gpus": [g.index for g in gpus]}
                if len(gpus) > 1
                else {"node": node.hostname, "gpu": gpus[0].index, "busid": gpus[0].busid},
                evidence={"throttle_reasons": {g.index: g.throttle_reasons for g in gpus}},
            )
        )
    return out


# -- PCIe ------------------------------------------------------------------------------------------


def pcie_findings(node: NodeTopology, code: str = "PCI001") -> list[Finding]:
    """A link narrower than it can be is a finding; a GPU at a lower generation is only a note, since
    GPUs drop their PCIe generation when idle to save power (NICs do not)."""
    out: list[Finding] = []
    devices = [(f"GPU {g.index}", g.pcie, {"gpu": g.index, "busid": g.busid}, True) for g in node.gpus]
    devices += [(f"NIC {n.name}", n.pcie, {"nic": n.name, "busid": n.busid}, False) for n in node.nics]
    idle: dict[tuple[int, int], list[int]] = {}
    for name, link, where, is_gpu in devices:
        where = {"node": node.hostname, **where}
        ev = {k: v for k, v in asdict(link).items() if v is not None}
        if link.cur_width and link.max_width and link.cur_width < link.max_width:
            out.append(
                Finding(
                    code,
                    Severity.WARNING,
                    f"{name} PCIe link runs at x{link.cur_width}, capable of x{link.max_width}: "
                    f"host↔device bandwidth cut to {link.cur_width / link.max_width:.0%}",
                    where=where,
                    evidence=ev,
                    hint="reseat the card or riser; check the slot in the BIOS",
                )
            )
        if link.cur_gen and link.max_gen and link.cur_gen < link.max_gen:
            if is_gpu:  # idle GPUs all downclock alike: one note for all of them
                idle.setdefault((link.cur_gen, link.max_gen), []).append(where["gpu"])
                continue
            out.append(
                Finding(
                    code,
                    Severity.WARNING,
                    f"{name} PCIe link at Gen{link.cur_gen}, capable of Gen{link.max_gen}",
                    where=where,
                    evidence=ev,
                )
            )
    for (cur, top), gpus in idle.items():
        out.append(
            Finding(
                code,
                Severity.INFO,
                f"{gpus_phrase(gpus)} PCIe link{'s' if len(gpus) > 1 else ''} at Gen{cur}, capable of Gen{top} "
                "(normal while the GPU is idle; re-check under load)",
                where={"node": node.hostname, "gpus": gpus} if len(gpus) > 1 else {"node": node.hostname, "gpu": gpus[0]},
            )
        )
    return out


# -- NUMA ------------------------------------------------------------------------------------------


def numa_findings(
    node: NodeTopology, code: str = "NUMA001", rank_gpu: dict[int, int] | None = None
) -> list[Finding]:
    """Each local rank against the CPUs close to its GPU. ``rank_gpu`` maps local rank -> GPU index
    where the ranks said which GPU they drive; otherwise local rank i drives GPU i (torchrun's habit)."""
    out: list[Finding] = []
    by_index = {g.index: g for g in node.gpus}
    for local_rank, cpus in sorted(node.rank_affinity.items()):
        g = by_index.get((rank_gpu or {}).get(local_rank, local_rank))
        if g is None or not g.cpu_affinity or not cpus:
            continue
        near = set(g.cpu_affinity)
        mine = set(cpus)
        where = {"node": node.hostname, "local_rank": local_rank, "gpu": g.index}
        ev = {
            "rank_cpus": format_cpulist(cpus),
            "gpu_cpus": format_cpulist(g.cpu_affinity),
            "gpu_numa_node": g.numa_node,
        }
        if not mine & near:
            out.append(
                Finding(
                    code,
                    Severity.WARNING,
                    f"local rank {local_rank} runs on CPUs {format_cpulist(cpus)}, all far from "
                    f"GPU {g.index} (NUMA node {g.numa_node}, CPUs {format_cpulist(g.cpu_affinity)})",
                    where=where,
                    evidence=ev,
                    hint="bind each rank to its GPU's NUMA node (numactl --cpunodebind)",
                )
            )
        elif not mine <= near:
            out.append(
                Finding(
                    code,
                    Severity.INFO,
                    f"local rank {local_rank} is not bound to GPU {g.index}'s CPUs "
                    f"({format_cpulist(g.cpu_affinity)}); it may run across the socket",
                    where=where,
                    evidence=ev,
                )
            )
    return out


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


def ib_findings(node: NodeTopology, code: str = "IB001") -> list[Finding]:
    """Ports not ACTIVE/LinkUp, a NIC slower than its siblings, and GPUs whose nearest NIC is far."""
    out: list[Finding] = []
    for n in node.nics:
        for p in n.ports:
            if not p.up:
                out.append(
                    Finding(
                        code,
                        Severity.ERROR,
                        f"{n.kind} port {n.name}/{p.port} is {p.state or '?'} "
                        f"(physical state {p.phys_state or '?'})",
                        where={"node": node.hostname, "nic": n.name, "port": p.port},
                        evidence={"state": p.state, "phys_state": p.phys_state, "rate": p.rate_text},
                        hint="check the cable and the switch port (ibstat, ibportstate)",
                    )
                )
    groups: dict[tuple[str, str], list] = {}
    for n in node.nics:
        if n.rate_gbps and any(p.up for p in n.ports):
            groups.setdefault((n.hca_type, n.kind), []).append(n)
    for (hca, kind), members in groups.items():
        top = max(m.rate_gbps for m in members)
        for m in members:
            if m.rate_gbps < top:
                out.append(
                    Finding(
                        code,
                        Severity.WARNING,
                        f"{m.name} links at {m.rate_gbps:g} Gb/s where its sibling {hca or kind} "
                        f"NICs run at {top:g} Gb/s",
                        where={"node": node.hostname, "nic": m.name},
                        evidence={"rate_Gbps": m.rate_gbps, "expected_Gbps": top},
                    )
                )
    rdma = {n.name for n in node.nics if n.rdma or n.ports}
    far = [r for r in rails(node) if r.path == "SYS" and r.nic in rdma]
    if len(far) == 1:
        r = far[0]
        what, where = f"GPU {r.gpu}'s nearest NIC ({r.nic}) is", {"gpu": r.gpu, "nic": r.nic}
    else:  # one cause (the slot layout), one finding
        pairs = ", ".join(f"GPU {r.gpu} → {r.nic}" for r in far)
        what = f"{gpus_phrase([r.gpu for r in far])}: the nearest NIC ({pairs}) is"
        where = {"gpus": [r.gpu for r in far], "nics": [r.nic for r in far]}
    if far:
        out.append(
            Finding(
                code,
                Severity.WARNING,
                f"{what} across the socket (SYS)",
                where={"node": node.hostname, **where},
                evidence={"path": "SYS"},
                hint="its network traffic crosses the CPU interconnect and cannot use GPUDirect "
                "RDMA; check the slot placement",
            )
        )
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


def gdr_findings(node: NodeTopology, code: str = "GDR001") -> list[Finding]:
    """One finding per cause: pairs off for the same reason (peer memory missing: all of them) share one."""
    out: list[Finding] = []
    verdicts = gdr_verdicts(node)
    off = [v for v in verdicts if v.enabled is False and v.nic is not None]
    by_cause: dict[str, list[GdrVerdict]] = {}
    for v in off:
        by_cause.setdefault(v.cause or v.reason, []).append(v)
    paired = len([v for v in verdicts if v.nic is not None])
    for cause, vs in by_cause.items():
        pairs = [f"GPU {v.gpu} ↔ {v.nic}" for v in vs]
        if len(vs) == 1:
            what, reason = pairs[0], vs[0].reason
        else:
            what = f"all {len(vs)} GPU↔NIC pairs" if len(vs) == paired else f"{len(vs)} GPU↔NIC pairs"
            what += f" ({', '.join(pairs)})" if len(vs) < paired else ""
            reason = cause
        out.append(
            Finding(
                code,
                Severity.WARNING,
                f"GPUDirect RDMA is off for {what}: {reason}",
                where={"node": node.hostname, "gpus": [v.gpu for v in vs], "nics": [v.nic for v in vs]}
                if len(vs) > 1
                else {"node": node.hostname, "gpu": vs[0].gpu, "nic": vs[0].nic},
                evidence={"paths": {f"GPU {v.gpu}": v.path for v in vs}, "peermem": node.peermem.found},
                hint="inter-node traffic is staged through host memory, costing bandwidth and "
                "CPU; load nvidia_peermem (modprobe nvidia_peermem) or use DMA-BUF"
                if "peermem" in cause
                else None,
            )
        )
    return out
