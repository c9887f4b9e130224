"""NVL001 — the NVLink matrix.

What it does: reads each GPU's NVLinks through NVML (state per link and the PCI address at its far
end) and builds the matrix of links between each GPU pair; links ending at an NVSwitch count for
every pair of switch-connected GPUs, as ``nvidia-smi topo -m`` shows NV18 on an HGX H100.

Findings (error): a link NVML reports down ("NVLink 3 between GPU 2 and GPU 5 is down"), or a GPU
with fewer NVLinks to its peers than the others; across nodes, a node whose per-GPU link counts
differ. A ring runs at the speed of its slowest link, so one missing link slows the whole job.
"""

from ddpdoctor.report.model import Severity

from ._topology import SYSFS_ROOT, topology_check

CODE = "NVL001"
TITLE = "NVLink matrix"
KIND = "cluster"
ORDER = 6
BUDGET_S = 20.0
SUITES = ("quick", "full")
OPTIONS = (SYSFS_ROOT,)


def _matrix(node):
    from ddpdoctor.model.topo_analysis import nvlink_matrix

    return {"matrix": nvlink_matrix(node)}


payload, run, summarize = topology_check(
    CODE,
    "nvlink",
    "ddpdoctor.model.topo_analysis:nvlink_findings",
    extra=_matrix,
    severity={"NVLinks per GPU": Severity.ERROR},
    explained=("NVLinks per GPU",),
)
