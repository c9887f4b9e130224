"""PCI001 — PCIe link degradation.

What it does: compares each GPU's (NVML) and NIC's (sysfs ``current_link_width`` /
``max_link_width``, ``current_link_speed`` / ``max_link_speed``) negotiated PCIe link with what it
is capable of.

Findings: a link narrower than its maximum, e.g. x8 on an x16 card (warning: host↔device bandwidth
halved); a NIC below its maximum generation (warning); a GPU below its maximum generation (info only:
GPUs drop the generation when idle to save power — re-check under load).
"""

from ._topology import SYSFS_ROOT, topology_check

CODE = "PCI001"
TITLE = "PCIe links"
KIND = "cluster"
ORDER = 7
BUDGET_S = 20.0
SUITES = ("quick", "full")
OPTIONS = (SYSFS_ROOT,)


payload, run, summarize = topology_check(
    CODE, "pcie", "ddpdoctor.model.topo_analysis:pcie_findings", explained=("GPU PCIe widths",)
)
