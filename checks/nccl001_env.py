"""NCCL001 — NCCL environment sanity.

What it does: checks the NCCL_* variables of the rank's environment against this node:
NCCL_SOCKET_IFNAME must name interfaces that exist and are up, NCCL_IB_HCA must match real RDMA
devices (both with NCCL's ``^`` exclude / ``=`` exact / prefix syntax); knobs left set are reported
with what they cost — NCCL_P2P_DISABLE (intra-node traffic through host memory), NCCL_IB_DISABLE (TCP
between nodes), NCCL_SHM_DISABLE, NCCL_NET_GDR_LEVEL, NCCL_NET_GDR_READ=0, NCCL_ALGO/NCCL_PROTO
(debugging knobs), NCCL_NVLS_ENABLE=0, NCCL_DEBUG=INFO/TRACE, channel and level overrides. Across
nodes, NCCL variables that differ between nodes are flagged.
"""

from ._topology import SYSFS_ROOT, topology_check

CODE = "NCCL001"
TITLE = "NCCL environment"
KIND = "cluster"
ORDER = 11
BUDGET_S = 10.0
SUITES = ("quick", "full")
OPTIONS = (SYSFS_ROOT,)


def _no_environment(node):
    """A topology file (NCCL XML, nvidia-smi topo -m) carries no variables, interfaces or probed state to
    judge: a pass would mean nothing."""
    if node.interfaces or node.env or node.peermem.probed:
        return None
    return "skipped: no NCCL environment (topology read from a file)"


payload, run, summarize = topology_check(
    CODE, "nccl", "ddpdoctor.model.nccl_env:nccl_env_findings", skip_if=_no_environment
)
