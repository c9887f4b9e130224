"""NUMA001 — CPU/NUMA affinity of each rank against its GPU.

What it does: the node leader reads each GPU's CPU affinity (NVML, else its NUMA node's CPUs from
sysfs); every rank reports the CPUs it may run on (psutil ``cpu_affinity``) and, on NCCL, the PCI bus
id of its CUDA device, which names its GPU even under CUDA_VISIBLE_DEVICES. Without that (gloo), local
rank i is taken to drive GPU i, as torchrun and DDP do by default.

Findings: a rank whose CPUs are all far from its GPU (warning: every host↔device copy and kernel
launch crosses the socket); a rank not bound to its GPU's CPUs at all (info).
"""

from ddpdoctor.core.report import Finding, Severity
from ddpdoctor.model.topology.node import Gpu, NodeTopology, format_cpulist

from ._topology import SYSFS_ROOT, topology_check

CODE = "NUMA001"
TITLE = "NUMA affinity"
KIND = "cluster"
ORDER = 8
BUDGET_S = 20.0
SUITES = ("quick", "full")
OPTIONS = (SYSFS_ROOT,)


def _gpu_affinity(node):
    return {
        "gpus": [
            {"index": g.index, "busid": g.busid, "numa_node": g.numa_node, "cpu_affinity": g.cpu_affinity}
            for g in node.gpus
        ]
    }


def _per_node(leader: dict, ranks: list[dict]):
    node = NodeTopology(hostname=leader["node"])
    node.gpus = [
        Gpu(index=g["index"], numa_node=g["numa_node"], cpu_affinity=g["cpu_affinity"])
        for g in (leader.get("data") or {}).get("gpus", [])
    ]
    node.rank_affinity = {r["local_rank"]: r["cpus"] for r in ranks if r.get("cpus")}
    by_bus = {g["busid"]: g["index"] for g in (leader.get("data") or {}).get("gpus", []) if g.get("busid")}
    rank_gpu = {r["local_rank"]: by_bus[r["gpu_busid"]] for r in ranks if r.get("gpu_busid") in by_bus}
    return numa_findings(node, CODE, rank_gpu)


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


# The verdict needs every local rank's CPUs, so it is made in summarize (per node), not in payload.
payload, run, summarize = topology_check(CODE, "numa", None, extra=_gpu_affinity, per_node=_per_node)
