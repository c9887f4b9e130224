"""NUMA001 — CPU/NUMA affinity of each rank against its GPU.

What it does: the node leader reads each GPU's CPU affinity (NVML, else its NUMA node's CPUs from
sysfs); every rank reports the CPUs it may run on (psutil ``cpu_affinity``) and, on NCCL, the PCI bus
id of its CUDA device, which names its GPU even under CUDA_VISIBLE_DEVICES. Without that (gloo), local
rank i is taken to drive GPU i, as torchrun and DDP do by default.

Findings: a rank whose CPUs are all far from its GPU (warning: every host↔device copy and kernel
launch crosses the socket); a rank not bound to its GPU's CPUs at all (info).
"""

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
    from ddpdoctor.model.topo_analysis import numa_findings
    from ddpdoctor.model.topology import Gpu, NodeTopology

    node = NodeTopology(hostname=leader["node"])
    node.gpus = [
        Gpu(index=g["index"], numa_node=g["numa_node"], cpu_affinity=g["cpu_affinity"])
        for g in (leader.get("data") or {}).get("gpus", [])
    ]
    node.rank_affinity = {r["local_rank"]: r["cpus"] for r in ranks if r.get("cpus")}
    by_bus = {g["busid"]: g["index"] for g in (leader.get("data") or {}).get("gpus", []) if g.get("busid")}
    rank_gpu = {r["local_rank"]: by_bus[r["gpu_busid"]] for r in ranks if r.get("gpu_busid") in by_bus}
    return numa_findings(node, CODE, rank_gpu)


# The verdict needs every local rank's CPUs, so it is made in summarize (per node), not in payload.
payload, run, summarize = topology_check(CODE, "numa", None, extra=_gpu_affinity, per_node=_per_node)
