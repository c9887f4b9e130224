"""Synthetic P2P matrices for the layout tests: nodes × ranks with a speed per link class, and
matrices built from real topology snapshots (tests/topo/data, tests/fixtures)."""

from __future__ import annotations

import random
from pathlib import Path

from ddpdoctor.model.topology.analysis import nvlink_matrix, rails
from ddpdoctor.model.topology.node import NodeTopology, nvlink_count

# Per-link speeds for matrices built from topology. NVLink: 25 GB/s per link and direction (18 links
# = the H100's 450 GB/s line rate, DESIGN.md §5) at 80% efficiency; PCIe Gen4 x16 ≈ 25 GB/s practical
# (DESIGN.md §5) for GPUs under one switch, less through the host bridge and across sockets; the
# network at 90% of the NIC rate. Synthetic figures: the tests need the classes, not exact values.
NVLINK_GBPS = 25.0 * 0.8
PCIE_GBPS = {"PIX": 22.0, "PXB": 22.0, "PHB": 18.0, "NODE": 18.0, "SYS": 12.0}


def ranks_for(nodes: int, per: int, interleave: bool = False, prefix: str = "node") -> list[dict]:
    """torchrun numbering (node after node), or interleaved (rank r on node r % nodes)."""
    out = []
    for r in range(nodes * per):
        node, local = (r % nodes, r // nodes) if interleave else (r // per, r % per)
        out.append({"rank": r, "node_rank": node, "local_rank": local, "hostname": f"{prefix}{node}"})
    return out


def matrix(ranks: list[dict], intra: float = 2.0, inter: float = 0.025, noise: float = 0.05,
           missing: float = 0.0, seed: int = 0) -> list[list[float | None]]:  # fmt: skip
    """Directed GB/s: intra for ranks on one node, inter across, each cell ±noise; a share of cells
    left null (not measured)."""
    rnd = random.Random(seed)
    n = len(ranks)
    out: list[list[float | None]] = []
    for i in range(n):
        row: list[float | None] = []
        for j in range(n):
            if i == j or rnd.random() < missing:
                row.append(None)
                continue
            base = intra if ranks[i]["node_rank"] == ranks[j]["node_rank"] else inter
            row.append(base * (1 + rnd.uniform(-noise, noise)))
        out.append(row)
    return out


def set_link(values: list, a: int, b: int, gbps: float | None) -> None:
    values[a][b] = values[b][a] = gbps


def from_topology(nodes: list[NodeTopology], noise: float = 0.03, seed: int = 0,
                  rails_only: bool = False) -> tuple[list[list[float | None]], list[dict]]:  # fmt: skip
    """A P2P matrix for one rank per GPU on each node (GPU = local rank). Inside a node: NVLink count ×
    NVLINK_GBPS where linked, else the PCIe path class; across nodes: 90% of the slower NIC of the two
    ranks' rails. rails_only: measure only rail-aligned pairs across nodes (P2P001's plan "rails")."""
    rnd = random.Random(seed)
    ranks, speed_of = [], []
    for node_rank, node in enumerate(nodes):
        links = nvlink_matrix(node)["values"]
        nic_rate = {n.name: n.rate_gbps or 100.0 for n in node.nics}
        rail = {r.gpu: nic_rate.get(r.nic or "", 100.0) for r in rails(node)}
        for k, g in enumerate(node.gpus):
            ranks.append(
                {"rank": len(ranks), "node_rank": node_rank, "local_rank": k, "hostname": node.hostname}
            )
            speed_of.append((node, k, g, links, rail.get(g.index, 100.0)))
    n = len(ranks)
    out: list[list[float | None]] = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            node_i, ki, gi, links, rate_i = speed_of[i]
            node_j, kj, gj, _, rate_j = speed_of[j]
            if node_i is node_j:
                count = links[ki][kj] or nvlink_count(node_i.path(gi.label, gj.label) or "")
                base = count * NVLINK_GBPS if count else PCIE_GBPS.get(node_i.path(gi.label, gj.label), 12.0)
            elif rails_only and ki != kj:
                continue
            else:
                base = min(rate_i, rate_j) / 8 * 0.9
            out[i][j] = base * (1 + rnd.uniform(-noise, noise))
    return out, ranks


def fixture(rel: str) -> Path:
    """A file under tests/fixtures."""
    from tests.helpers import fixture as find

    return find(rel)
