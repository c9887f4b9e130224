"""A cluster diagnosis from saved topology snapshots (``ddpdoctor topo --from a.json b.json``).

Runs each topology check's node half (``payload(node)``) on every snapshot and its ``summarize`` over
them, exactly as ``ddpdoctor check`` would with one leader rank per node, so offline and live reports
agree. Pure: no probing.
"""

from __future__ import annotations

from ddpdoctor.core.report import CheckResult
from ddpdoctor.core.world import WorldInfo
from ddpdoctor.model.topology.node import NodeTopology

TOPOLOGY_CODES = ("GPU001", "NVL001", "PCI001", "NUMA001", "IB001", "GDR001", "NCCL001")


def diagnose(nodes: list[NodeTopology]) -> list[CheckResult]:
    from ddpdoctor.registry import discover

    hosts = [n.hostname or f"node{i}" for i, n in enumerate(nodes)]
    dupes = sorted({h for h in hosts if hosts.count(h) > 1})
    if dupes:
        raise ValueError(f"several snapshots from the same host: {', '.join(dupes)}")
    for n, h in zip(nodes, hosts):
        n.hostname = h
    ranks, members = [], []
    for node_rank, node in enumerate(nodes):
        for local in sorted(node.rank_affinity) or [0]:
            ranks.append(
                {"rank": len(ranks), "local_rank": local, "node_rank": node_rank, "hostname": node.hostname}
            )
            members.append((node, local))
    world = WorldInfo.from_dicts(ranks)
    specs = {s.code: s for s in discover(kind="cluster")}
    out: list[CheckResult] = []
    for code in TOPOLOGY_CODES:
        spec = specs[code]
        results: dict[int, dict | None] = {}
        for rank, (node, local) in enumerate(members):
            me = {
                "node": node.hostname,
                "node_rank": world.node_of(rank),
                "local_rank": local,
                "leader": local == 0,
                "cpus": node.rank_affinity.get(local, []),
            }
            results[rank] = {**me, **spec.module.payload(node)} if local == 0 else me
        s = spec.module.summarize(results, world)
        out.append(
            CheckResult(
                code=code,
                title=spec.title,
                status=s.final_status(),
                summary=s.summary,
                findings=s.findings,
                data=s.data,
            )
        )
    return out
