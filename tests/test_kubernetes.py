"""`ddpdoctor check` with no flags in the pods of a Kubernetes training job, emulated by namespace nodes
that get exactly the variables Kubeflow's training operator sets on a PyTorchJob (docs/kubernetes.md)."""

import os
import subprocess

import pytest
from helpers import cli
from support.testbed import NetBed, netns_available

NETNS_OK, NETNS_WHY = netns_available()


def pytorchjob_env(master_addr: str, node_rank: int, nnodes: int, nproc: int = 1) -> dict[str, str]:
    """A PyTorchJob with one Master and nnodes-1 Workers (training operator v1, no elasticPolicy)."""
    return {"MASTER_ADDR": master_addr, "MASTER_PORT": "23456", "WORLD_SIZE": str(nnodes * nproc),
            "RANK": str(node_rank), "PET_NPROC_PER_NODE": str(nproc), "PET_NODE_RANK": str(node_rank),
            "PET_NNODES": str(nnodes), "PYTHONUNBUFFERED": "0"}


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.skipif(not NETNS_OK, reason=NETNS_WHY or "network namespaces unavailable")
def test_pytorchjob_pods_run_check_without_flags():
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PET_", "MASTER_"))}
    with NetBed(2) as bed:
        master = bed.addr(0)
        procs = [bed.popen(i, cli("check"), env={**base, **pytorchjob_env(bed.addr(0), i, 2)},
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in (0, 1)]
        try:
            outs = [p.communicate(timeout=200)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.communicate()
    assert [p.returncode for p in procs] == [0, 0], outs
    for out in outs:  # both pods: 2 nodes x PET_NPROC_PER_NODE=1, rendezvous at MASTER_ADDR:MASTER_PORT
        assert "2 ranks on 2 node(s) [ddpd-node0, ddpd-node1]" in out, out
        assert "OK: nothing failed" in out
        assert "2 node(s) × 1 rank(s)" in out and f"rendezvous {master}:23456" in out
