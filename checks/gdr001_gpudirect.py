"""GDR001 — GPUDirect RDMA, decided the way NCCL decides it.

What it does: for each GPU and its nearest RDMA NIC, NCCL uses GPUDirect RDMA when (1) the NIC side
can reach GPU memory — a peer-memory client is present (``/sys/kernel/mm/memory_peers/nv_mem/version``,
``…/nv_mem_nc/version`` or ``/sys/module/nvidia_peermem/version``), or else DMA-BUF works (the GPU's
CUDA attribute DMA_BUF_SUPPORTED, Linux ≥ 5.12, NVIDIA's open kernel module); (2) the GPU supports it;
(3) their PCIe distance is within NCCL_NET_GDR_LEVEL (default PXB: same PCIe switch).

Findings (warning), one per node and cause: "GPUDirect RDMA is off for all 8 GPU↔NIC pairs: nvidia_peermem
is not loaded and DMA-BUF is not available", "…for GPU 3 ↔ mlx5_3: GPU 3 and mlx5_3 are SYS apart, farther
than NCCL's default level PXB"; across nodes the node is named ("odd node hgx-c: …" when the others differ).
"""

from dataclasses import asdict

from ddpdoctor.core.report import Finding, Severity
from ddpdoctor.model.topology.analysis import GdrVerdict, gdr_verdicts
from ddpdoctor.model.topology.node import NodeTopology

from ._topology import SYSFS_ROOT, topology_check, without_rdma

CODE = "GDR001"
TITLE = "GPUDirect RDMA"
KIND = "cluster"
ORDER = 10
BUDGET_S = 20.0
SUITES = ("quick", "full")
OPTIONS = (SYSFS_ROOT,)


def _verdicts(node):


    return {"verdicts": [asdict(v) for v in gdr_verdicts(node)], "peermem": node.peermem.found}


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


payload, run, summarize = topology_check(
    CODE,
    "gdr",
    gdr_findings,
    extra=_verdicts,
    skip_if=without_rdma("skipped: no InfiniBand/RoCE NIC (GPUDirect RDMA does not apply)"),
    explained=("peer memory", "GPUs with GPUDirect RDMA"),
)
