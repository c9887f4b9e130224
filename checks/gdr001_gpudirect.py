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

from ._topology import SYSFS_ROOT, topology_check, without_rdma

CODE = "GDR001"
TITLE = "GPUDirect RDMA"
KIND = "cluster"
ORDER = 10
BUDGET_S = 20.0
SUITES = ("quick", "full")
OPTIONS = (SYSFS_ROOT,)


def _verdicts(node):
    from dataclasses import asdict

    from ddpdoctor.model.topo_analysis import gdr_verdicts

    return {"verdicts": [asdict(v) for v in gdr_verdicts(node)], "peermem": node.peermem.found}


payload, run, summarize = topology_check(
    CODE,
    "gdr",
    "ddpdoctor.model.topo_analysis:gdr_findings",
    extra=_verdicts,
    skip_if=without_rdma("skipped: no InfiniBand/RoCE NIC (GPUDirect RDMA does not apply)"),
    explained=("peer memory", "GPUs with GPUDirect RDMA"),
)
