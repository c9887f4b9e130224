"""IB001 — InfiniBand / RoCE ports and rails.

What it does: reads ``/sys/class/infiniband`` (devices, ports, state, physical state, rate, link
layer, netdev, PCI address) and pairs each GPU with its nearest NIC by PCIe distance — the rails. A
healthy rail-optimized node pairs GPUs and NICs 1:1 at PIX or PXB.

Findings: a port not ACTIVE/LinkUp (error); a NIC linked slower than its siblings of the same type
(warning); a GPU whose nearest RDMA NIC is across the socket, SYS (warning); across nodes, a different
NIC count or rate. Runs without a GPU too (then without rails); no RDMA device: nothing to check.
"""

from ._topology import SYSFS_ROOT, topology_check, without_rdma

CODE = "IB001"
TITLE = "InfiniBand/RoCE ports and rails"
KIND = "cluster"
ORDER = 9
BUDGET_S = 20.0
SUITES = ("quick", "full")
OPTIONS = (SYSFS_ROOT,)


def _rails(node):
    from dataclasses import asdict

    from ddpdoctor.model.topo_analysis import rails

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


payload, run, summarize = topology_check(
    CODE,
    "ib",
    "ddpdoctor.model.topo_analysis:ib_findings",
    needs_gpu=False,
    extra=_rails,
    skip_if=without_rdma("skipped: no InfiniBand/RoCE device"),
    explained=("active NIC rates (Gb/s)",),
)
