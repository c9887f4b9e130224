"""GPU001 — NVIDIA GPUs and their health.

What it does: on each node's local rank 0, reads every GPU through NVML (model, UUID, PCI bus id,
memory, ECC mode and uncorrectable errors, retired pages / remapped rows, clock throttle reasons),
then compares nodes: GPU count, models, driver and CUDA driver versions.

Findings: uncorrectable ECC errors or a failed row remap (error), pending retirement or hardware
throttling (warning), mixed models on a node (warning), and the odd node (different GPU count or
model: error; different driver: warning). No NVIDIA GPU or driver: skipped.
"""

from ddpdoctor.report.model import Severity

from ._topology import SYSFS_ROOT, topology_check

CODE = "GPU001"
TITLE = "GPUs and health"
KIND = "cluster"
ORDER = 5
BUDGET_S = 20.0
SUITES = ("quick", "full")
OPTIONS = (SYSFS_ROOT,)
_SEVERITY = {"GPU count": Severity.ERROR, "GPU models": Severity.ERROR}


def _snapshot(node):
    return {"topology": node.to_dict()}


payload, run, summarize = topology_check(
    CODE, "gpu", "ddpdoctor.model.topo_analysis:gpu_findings", extra=_snapshot, severity=_SEVERITY
)
