"""GPU001 — NVIDIA GPUs and their health.

What it does: on each node's local rank 0, reads every GPU through NVML (model, UUID, PCI bus id,
memory, ECC mode and uncorrectable errors, retired pages / remapped rows, clock throttle reasons),
then compares nodes: GPU count, models, driver and CUDA driver versions.

Findings: uncorrectable ECC errors or a failed row remap (error), pending retirement or hardware
throttling (warning), mixed models on a node (warning), and the odd node (different GPU count or
model: error; different driver: warning). No NVIDIA GPU or driver: skipped.
"""


from collections import Counter

from ddpdoctor.core.report import Finding, Severity
from ddpdoctor.model.topology.analysis import gpus_phrase
from ddpdoctor.model.topology.node import Gpu, NodeTopology

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


_BAD_THROTTLE = {
    "hw_slowdown": "hardware slowdown (power or thermal emergency)",
    "hw_thermal_slowdown": "hardware thermal slowdown",
    "hw_power_brake_slowdown": "external power brake",
    "sw_thermal_slowdown": "software thermal slowdown",
}


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


payload, run, summarize = topology_check(
    CODE, "gpu", gpu_findings, extra=_snapshot, severity=_SEVERITY
)
