"""IB001 — InfiniBand / RoCE ports and rails.

What it does: reads ``/sys/class/infiniband`` (devices, ports, state, physical state, rate, link
layer, netdev, PCI address) and pairs each GPU with its nearest NIC by PCIe distance — the rails. A
healthy rail-optimized node pairs GPUs and NICs 1:1 at PIX or PXB.

Findings: a port not ACTIVE/LinkUp (error); a NIC linked slower than its siblings of the same type
(warning); a GPU whose nearest RDMA NIC is across the socket, SYS (warning); across nodes, a different
NIC count or rate. Runs without a GPU too (then without rails); no RDMA device: nothing to check.
"""

from dataclasses import asdict

from ddpdoctor.core.report import Finding, Severity
from ddpdoctor.model.topology.analysis import gpus_phrase, rails
from ddpdoctor.model.topology.node import NodeTopology

from ._topology import SYSFS_ROOT, topology_check, without_rdma

CODE = "IB001"
TITLE = "InfiniBand/RoCE ports and rails"
KIND = "cluster"
ORDER = 9
BUDGET_S = 20.0
SUITES = ("quick", "full")
OPTIONS = (SYSFS_ROOT,)


def _rails(node):


    return {
        "rails": [asdict(r) for r in rails(node)],
        "nics": [
            {
                "name": n.name,
                "kind": n.kind,
                "rate_Gbps": n.rate_gbps,
                "ports_up": sum(p.up for p in n.ports),
                "ports": len(n.ports),
            }
            for n in node.nics
        ],
    }


def ib_findings(node: NodeTopology, code: str = "IB001") -> list[Finding]:
    """Ports not ACTIVE/LinkUp, a NIC slower than its siblings, and GPUs whose nearest NIC is far."""
    out: list[Finding] = []
    for n in node.nics:
        for p in n.ports:
            if not p.up:
                out.append(
                    Finding(
                        code,
                        Severity.ERROR,
                        f"{n.kind} port {n.name}/{p.port} is {p.state or '?'} "
                        f"(physical state {p.phys_state or '?'})",
                        where={"node": node.hostname, "nic": n.name, "port": p.port},
                        evidence={"state": p.state, "phys_state": p.phys_state, "rate": p.rate_text},
                        hint="check the cable and the switch port (ibstat, ibportstate)",
                    )
                )
    groups: dict[tuple[str, str], list] = {}
    for n in node.nics:
        if n.rate_gbps and any(p.up for p in n.ports):
            groups.setdefault((n.hca_type, n.kind), []).append(n)
    for (hca, kind), members in groups.items():
        top = max(m.rate_gbps for m in members)
        for m in members:
            if m.rate_gbps < top:
                out.append(
                    Finding(
                        code,
                        Severity.WARNING,
                        f"{m.name} links at {m.rate_gbps:g} Gb/s where its sibling {hca or kind} "
                        f"NICs run at {top:g} Gb/s",
                        where={"node": node.hostname, "nic": m.name},
                        evidence={"rate_Gbps": m.rate_gbps, "expected_Gbps": top},
                    )
                )
    rdma = {n.name for n in node.nics if n.rdma or n.ports}
    far = [r for r in rails(node) if r.path == "SYS" and r.nic in rdma]
    if len(far) == 1:
        r = far[0]
        what, where = f"GPU {r.gpu}'s nearest NIC ({r.nic}) is", {"gpu": r.gpu, "nic": r.nic}
    else:  # one cause (the slot layout), one finding
        pairs = ", ".join(f"GPU {r.gpu} → {r.nic}" for r in far)
        what = f"{gpus_phrase([r.gpu for r in far])}: the nearest NIC ({pairs}) is"
        where = {"gpus": [r.gpu for r in far], "nics": [r.nic for r in far]}
    if far:
        out.append(
            Finding(
                code,
                Severity.WARNING,
                f"{what} across the socket (SYS)",
                where={"node": node.hostname, **where},
                evidence={"path": "SYS"},
                hint="its network traffic crosses the CPU interconnect and cannot use GPUDirect "
                "RDMA; check the slot placement",
            )
        )
    return out


payload, run, summarize = topology_check(
    CODE,
    "ib",
    ib_findings,
    needs_gpu=False,
    extra=_rails,
    skip_if=without_rdma("skipped: no InfiniBand/RoCE device"),
    explained=("active NIC rates (Gb/s)",),
)
