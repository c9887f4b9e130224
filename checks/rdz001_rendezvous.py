"""Rendezvous: how long each node took to join, and the rank -> host -> local rank map.

Reports the time from launch to the worker process starting (the c10d rendezvous plus process start)
and to the process group being ready, per node. Flags ranks that are not node-contiguous (global ranks
of one node should form one range: hierarchical collectives and rank-to-GPU maps assume it), two nodes
that share a hostname (the report could not tell them apart) and a node that joined far later than
the others. Rendezvous failures themselves are diagnosed by `ddpdoctor check` before any rank runs.
"""

from __future__ import annotations

import statistics

from ddpdoctor.core.report import Finding, Severity
from ddpdoctor.core.summary import Summary
from ddpdoctor.core.world import WorldInfo

CODE = "RDZ001"
TITLE = "Rendezvous and rank map"
KIND = "cluster"
ORDER = 1
BUDGET_S = 10.0
SUITES = ("quick", "full")


def run(ctx) -> dict:
    st = ctx.startup or {}
    t0 = st.get("launch_t0")
    return {
        "hostname": ctx.hostname,
        "node_rank": ctx.node_rank,
        "local_rank": ctx.local_rank,
        "join_s": round(st["proc_start"] - t0, 4) if t0 and st.get("proc_start") else None,
        "pg_init_s": st.get("pg_init_s"),
    }


def _contiguous(ranks: list[int]) -> bool:
    return not ranks or sorted(ranks) == list(range(min(ranks), max(ranks) + 1))


def summarize(results: dict[int, dict | None], world: WorldInfo) -> Summary:
    findings: list[Finding] = []
    rank_map = [
        {"rank": r.rank, "node_rank": r.node_rank, "hostname": r.hostname, "local_rank": r.local_rank}
        for r in world.ranks
    ]
    per_node: dict[int, dict] = {}
    for r in world.ranks:
        d = results.get(r.rank) or {}
        node = per_node.setdefault(r.node_rank, {"hostname": r.hostname, "ranks": [], "join_s": [], "pg_init_s": []})
        node["ranks"].append(r.rank)
        if d.get("join_s") is not None:
            node["join_s"].append(d["join_s"])
        if d.get("pg_init_s") is not None:
            node["pg_init_s"].append(d["pg_init_s"])
    nodes = []
    for nr in sorted(per_node):
        n = per_node[nr]
        nodes.append({
            "node_rank": nr,
            "hostname": n["hostname"],
            "ranks": n["ranks"],
            "join_s": max(n["join_s"]) if n["join_s"] else None,
            "pg_init_s": max(n["pg_init_s"]) if n["pg_init_s"] else None,
        })
        if not _contiguous(n["ranks"]):
            findings.append(Finding(CODE, Severity.WARNING,
                                    f"ranks on {n['hostname']} are not contiguous: {n['ranks']}",
                                    where={"node": n["hostname"], "ranks": n["ranks"]},
                                    hint="launch with torchrun's default rank assignment (one agent per node)"))
    hostnames = [n["hostname"] for n in nodes]
    dup = sorted({h for h in hostnames if hostnames.count(h) > 1})
    if dup:
        findings.append(Finding(CODE, Severity.WARNING, f"several nodes report the same hostname: {dup}",
                                where={"nodes": dup},
                                hint="give every node a distinct hostname so reports can tell them apart"))
    joins = [n["join_s"] for n in nodes if n["join_s"] is not None]
    if len(joins) >= 3:
        med = statistics.median(joins)
        for n in nodes:
            if n["join_s"] is not None and n["join_s"] > max(3 * med, med + 10):
                findings.append(Finding(CODE, Severity.INFO,
                                        f"{n['hostname']} joined {n['join_s']:.1f} s after launch (median {med:.1f} s)",
                                        where={"node": n["hostname"]}, evidence={"join_s": n["join_s"], "median_s": med}))
    slowest = max(joins) if joins else None
    text = f"{world.world_size} rank{'' if world.world_size == 1 else 's'} on {len(nodes)} node(s)" + (f", joined within {slowest:.1f} s" if slowest is not None else "")
    return Summary(findings=findings, data={"nodes": nodes, "rank_map": rank_map, "unit": "s"}, summary=text)
