"""NCCL001 — NCCL environment sanity.

What it does: checks the NCCL_* variables of the rank's environment against this node:
NCCL_SOCKET_IFNAME must name interfaces that exist and are up, NCCL_IB_HCA must match real RDMA
devices (both with NCCL's ``^`` exclude / ``=`` exact / prefix syntax); knobs left set are reported
with what they cost — NCCL_P2P_DISABLE (intra-node traffic through host memory), NCCL_IB_DISABLE (TCP
between nodes), NCCL_SHM_DISABLE, NCCL_NET_GDR_LEVEL, NCCL_NET_GDR_READ=0, NCCL_ALGO/NCCL_PROTO
(debugging knobs), NCCL_NVLS_ENABLE=0, NCCL_DEBUG=INFO/TRACE, channel and level overrides. Across
nodes, NCCL variables that differ between nodes are flagged.
"""

from ._topology import node_payload, run_concern, summarize_concern

CODE = "NCCL001"
TITLE = "NCCL environment"
KIND = "cluster"
ORDER = 11
BUDGET_S = 10.0
SUITES = ("quick", "full")


def payload(node) -> dict:
    from ddpdoctor.model.nccl_env import nccl_env_findings

    return node_payload(node, "nccl", nccl_env_findings)


def run(ctx) -> dict:
    return run_concern(ctx, payload)


def summarize(results, world):
    return summarize_concern(results, world, CODE, "nccl")
