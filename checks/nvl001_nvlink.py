"""NVL001 — the NVLink matrix.

What it does: reads each GPU's NVLinks through NVML (state per link and the PCI address at its far
end) and builds the matrix of links between each GPU pair; links ending at an NVSwitch count for
every pair of switch-connected GPUs, as ``nvidia-smi topo -m`` shows NV18 on an HGX H100.

Findings (error): a link NVML reports down ("NVLink 3 between GPU 2 and GPU 5 is down"), or a GPU
with fewer NVLinks to its peers than the others; across nodes, a node whose per-GPU link counts
differ. A ring runs at the speed of its slowest link, so one missing link slows the whole job.
"""

from ddpdoctor.report.model import Severity

from ._topology import node_payload, run_concern, summarize_concern

CODE = "NVL001"
TITLE = "NVLink matrix"
KIND = "cluster"
ORDER = 6
BUDGET_S = 20.0
SUITES = ("quick", "full")


def payload(node) -> dict:
    from ddpdoctor.model.topo_analysis import nvlink_findings, nvlink_matrix

    return node_payload(node, "nvlink", nvlink_findings, extra=lambda n: {"matrix": nvlink_matrix(n)})


def run(ctx) -> dict:
    return run_concern(ctx, payload)


def summarize(results, world):
    return summarize_concern(results, world, CODE, "nvlink", {"NVLinks per GPU": Severity.ERROR})
