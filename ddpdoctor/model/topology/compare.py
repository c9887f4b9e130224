"""Compare nodes' topology facts and name the odd node (pure).

Each check reduces a node to a few comparable facts (GPU count, model, driver, NIC rates, peer memory…);
the value most nodes share is the norm and a node that differs is named. With no majority (e.g. two
nodes that disagree) every node is named, since there is no telling which one is wrong.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ddpdoctor.core.report import Finding, Severity
from ddpdoctor.model.topology.analysis import gdr_verdicts, nvlink_matrix
from ddpdoctor.model.topology.node import NodeTopology


def node_facts(node: NodeTopology, concern: str) -> dict[str, Any]:
    """The facts one concern compares across nodes. JSON-able scalars/strings only."""
    if concern == "gpu":
        return {
            "GPU count": len(node.gpus),
            "GPU models": ", ".join(sorted({g.name for g in node.gpus})),
            "driver": node.driver_version,
            "CUDA driver": node.cuda_driver_version,
        }
    if concern == "nvlink":
        m = nvlink_matrix(node)
        return {"NVLinks per GPU": ",".join(str(sum(v or 0 for v in row)) for row in m["values"])}
    if concern == "pcie":
        # Widths only: GPUs lower their PCIe generation when idle, so generations differ by load.
        return {
            "GPU PCIe widths": ",".join(
                sorted({f"x{g.pcie.cur_width}/x{g.pcie.max_width}" for g in node.gpus})
            )
        }
    if concern == "numa":
        return {"NUMA nodes": len(node.numa_cpus)}
    if concern == "ib":
        rates = Counter(f"{n.rate_gbps:g}" for n in node.nics if n.rate_gbps and any(p.up for p in n.ports))
        return {
            "RDMA NICs": len([n for n in node.nics if n.rdma or n.ports]),
            "active NIC rates (Gb/s)": ", ".join(f"{k}×{v}" for k, v in sorted(rates.items())),
        }
    if concern == "gdr":
        on = [v for v in gdr_verdicts(node) if v.enabled]
        return {
            "peer memory": "present" if node.peermem.present else "missing",
            "GPUs with GPUDirect RDMA": len(on),
        }
    if concern == "nccl":
        return {k: v for k, v in node.env.items()}
    raise ValueError(f"unknown concern {concern!r}")


def odd_node_findings(
    facts: dict[str, dict[str, Any]], code: str, severity: dict[str, Severity] | None = None
) -> list[Finding]:
    """facts: hostname -> that node's facts. A finding per fact on which nodes disagree."""
    if len(facts) < 2:
        return []
    severity = severity or {}
    keys = sorted({k for f in facts.values() for k in f})
    out: list[Finding] = []
    for key in keys:
        values = {host: f.get(key) for host, f in facts.items()}
        counts = Counter(map(_freeze, values.values()))
        if len(counts) < 2:
            continue
        (norm, n_norm), *rest = counts.most_common()
        sev = severity.get(key, Severity.WARNING)
        if rest and rest[0][1] == n_norm:  # no majority
            out.append(
                Finding(
                    code,
                    sev,
                    f"nodes disagree on {key}: "
                    + "; ".join(f"{h} has {_show(v)}" for h, v in sorted(values.items())),
                    where={"nodes": sorted(values)},
                    evidence={"fact": key, "values": values},
                )
            )
            continue
        for host, v in sorted(values.items()):
            if _freeze(v) != norm:
                out.append(
                    Finding(
                        code,
                        sev,
                        f"odd node {host}: {key} is {_show(v)} where {n_norm} other node(s) have "
                        f"{_show(norm)}",
                        where={"node": host},
                        evidence={"fact": key, "value": v, "majority": norm, "majority_nodes": n_norm},
                    )
                )
    return out


def fold_explained(odd: list[Finding], per_node: dict[str, list[Finding]], explained: tuple[str, ...]):
    """Odd-node findings on facts that a node's own findings already explain (GDR off on every pair and
    "peer memory: missing" are one cause) are dropped; returns the kept ones and the nodes they named."""
    kept, odd_hosts = [], set()
    for f in odd:
        host = f.where.get("node")
        if host and per_node.get(host) and f.evidence.get("fact") in explained:
            odd_hosts.add(host)
            continue
        kept.append(f)
    return kept, odd_hosts


def name_nodes(per_node: dict[str, list[Finding]], odd_hosts: set[str] = frozenset()) -> list[Finding]:
    """Each node's findings with the node named ("hgx-c: …", "odd node hgx-c: …"); the same finding on
    several nodes becomes one finding naming them all. With one node there is nothing to name."""
    if len(per_node) < 2:
        return [f for fs in per_node.values() for f in fs]
    groups: dict[tuple, list[tuple[str, Finding]]] = {}
    for host, fs in sorted(per_node.items()):
        for f in fs:
            key = (f.code, f.severity, f.message, f.hint, host if host in odd_hosts else None)
            groups.setdefault(key, []).append((host, f))
    out: list[Finding] = []
    for (code, sev, message, hint, odd_host), members in groups.items():
        hosts = [h for h, _ in members]
        first = members[0][1]
        if odd_host:
            label = f"odd node {odd_host}"
        elif len(hosts) == len(per_node) and len(hosts) > 3:
            label = f"all {len(hosts)} nodes"
        else:
            label = ", ".join(hosts)
        text = message if len(hosts) == 1 and hosts[0] in message else f"{label}: {message}"
        if len(hosts) == 1:
            out.append(Finding(code, sev, text, where=first.where, evidence=first.evidence, hint=hint))
            continue
        where = {k: v for k, v in first.where.items() if k != "node" and all(g.where.get(k) == v for _, g in members)}
        out.append(Finding(code, sev, text, where={"nodes": hosts, **where},
                           evidence={"per_node": {h: g.evidence for h, g in members}}, hint=hint))
    return out


def _freeze(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _show(v: Any) -> str:
    return "unset" if v is None or v == "" else str(v)
