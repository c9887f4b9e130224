"""NVL001 — the NVLink matrix.

What it does: reads each GPU's NVLinks through NVML (state per link and the PCI address at its far
end) and builds the matrix of links between each GPU pair; links ending at an NVSwitch count for
every pair of switch-connected GPUs, as ``nvidia-smi topo -m`` shows NV18 on an HGX H100.

Findings (error): a link NVML reports down ("NVLink 3 between GPU 2 and GPU 5 is down"), or a GPU
with fewer NVLinks to its peers than the others; across nodes, a node whose per-GPU link counts
differ. A ring runs at the speed of its slowest link, so one missing link slows the whole job.
"""


from ddpdoctor.core.report import Finding, Severity
from ddpdoctor.model.topology.analysis import nvlink_matrix
from ddpdoctor.model.topology.node import NodeTopology

from ._topology import SYSFS_ROOT, topology_check

CODE = "NVL001"
TITLE = "NVLink matrix"
KIND = "cluster"
ORDER = 6
BUDGET_S = 20.0
SUITES = ("quick", "full")
OPTIONS = (SYSFS_ROOT,)


def _matrix(node):

    return {"matrix": nvlink_matrix(node)}


def _nvlink_totals(matrix: dict) -> list[int]:
    return [sum(v or 0 for v in row) for row in matrix["values"]]



def nvlink_findings(node: NodeTopology, code: str = "NVL001") -> list[Finding]:
    """Links NVML reports down, and GPUs with fewer NVLinks to their peers than the other GPUs."""
    out: list[Finding] = []
    for g in node.gpus:
        for link in g.nvlinks:
            if link.active:
                continue
            peer = node.gpu_by_busid(link.remote_busid) if link.remote_busid else None
            between = f"between GPU {g.index} and GPU {peer.index}" if peer else f"of GPU {g.index}"
            out.append(
                Finding(
                    code,
                    Severity.ERROR,
                    f"NVLink {link.link} {between} is down",
                    where={
                        "node": node.hostname,
                        "gpu": g.index,
                        "link": link.link,
                        **({"peer_gpu": peer.index} if peer else {}),
                    },
                    evidence={"active_links": sum(x.active for x in g.nvlinks), "links": len(g.nvlinks)},
                    hint="check `nvidia-smi nvlink --status`; a down link usually means drain and reseat",
                )
            )
    for i, a in enumerate(node.gpus):
        for b in node.gpus[i + 1 :]:
            path = node.path(a.label, b.label) or ""
            if path.startswith("NV") and (node.p2p.get(a.label) or {}).get(b.label) is False:
                # NCCL stops with "P2P is disabled between NVLINK connected GPUs" (src/graph/paths.cc).
                out.append(
                    Finding(
                        code,
                        Severity.ERROR,
                        f"P2P is disabled between NVLink-connected GPU {a.index} and GPU {b.index}",
                        where={"node": node.hostname, "gpu": a.index, "peer_gpu": b.index},
                        evidence={"path": path, "p2p": False},
                        hint="NCCL refuses such a pair unless NCCL_IGNORE_DISABLED_P2P=1; "
                        "usually a hardware or fabric-manager fault",
                    )
                )
    matrix = nvlink_matrix(node)
    totals = _nvlink_totals(matrix)
    if not totals or max(totals) == 0:
        return out
    top = max(totals)
    # A GPU NVML could not read has no link data: GPU001 reports it, not a link fault here.
    deficit = {i: top - t for i, t in enumerate(totals) if t < top and not node.gpus[i].nvml_error}
    flagged = {f.where.get("gpu") for f in out}
    values = matrix["values"]
    # Two GPUs short by the same count: the links between them are the missing ones.
    pairs = [(i, j) for i in deficit for j in deficit if i < j and deficit[i] == deficit[j]]
    paired = {k for p in pairs for k in p} if len(deficit) == 2 else set()
    for i, j in pairs if paired else []:
        a, b = node.gpus[i].index, node.gpus[j].index
        if a not in flagged and b not in flagged:
            out.append(
                Finding(
                    code,
                    Severity.ERROR,
                    f"NVLink between GPU {a} and GPU {b} is degraded: NV{values[i][j]} where the other GPUs "
                    f"suggest NV{values[i][j] + deficit[i]}",
                    where={"node": node.hostname, "gpu": a, "peer_gpu": b},
                    evidence={"links": values[i][j], "expected_links": values[i][j] + deficit[i]},
                )
            )
    for i in sorted(set(deficit) - paired):
        g = node.gpus[i]
        if g.index not in flagged:
            out.append(
                Finding(
                    code,
                    Severity.ERROR,
                    f"GPU {g.index} has {totals[i]} NVLink connections to its peers where other GPUs have "
                    f"{top}: one of its NVLinks is down",
                    where={"node": node.hostname, "gpu": g.index},
                    evidence={"total_links": totals[i], "expected_total": top},
                )
            )
    return out


payload, run, summarize = topology_check(
    CODE,
    "nvlink",
    nvlink_findings,
    extra=_matrix,
    severity={"NVLinks per GPU": Severity.ERROR},
    explained=("NVLinks per GPU",),
)
