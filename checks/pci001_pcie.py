"""PCI001 — PCIe link degradation.

What it does: compares each GPU's (NVML) and NIC's (sysfs ``current_link_width`` /
``max_link_width``, ``current_link_speed`` / ``max_link_speed``) negotiated PCIe link with what it
is capable of.

Findings: a link narrower than its maximum, e.g. x8 on an x16 card (warning: host↔device bandwidth
halved); a NIC below its maximum generation (warning); a GPU below its maximum generation (info only:
GPUs drop the generation when idle to save power — re-check under load).
"""

from dataclasses import asdict

from ddpdoctor.core.report import Finding, Severity
from ddpdoctor.model.topology.analysis import gpus_phrase
from ddpdoctor.model.topology.node import NodeTopology

from ._topology import SYSFS_ROOT, topology_check

CODE = "PCI001"
TITLE = "PCIe links"
KIND = "cluster"
ORDER = 7
BUDGET_S = 20.0
SUITES = ("quick", "full")
OPTIONS = (SYSFS_ROOT,)


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


payload, run, summarize = topology_check(
    CODE, "pcie", pcie_findings, explained=("GPU PCIe widths",)
)
