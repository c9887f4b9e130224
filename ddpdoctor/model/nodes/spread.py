"""A value that differs across ranks, said in nodes (pure).

Users think in nodes: "NCCL_ALGO is 'Tree' on node-c (ranks 16-23) where the 3 other nodes have it unset"
tells them where to look; "'Tree' on ranks [16, ..., 23]" makes them map ranks to hosts by hand. When
most nodes agree, the nodes that do not are the odd ones out and are named as such.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from ddpdoctor.model.nodes.hostlist import ranges_text

MIXED = object()  # a node whose own ranks disagree


def fmt_ranks(ranks) -> str:
    """0,1,2,5 -> "0-2,5": short enough for 1000 ranks in a message."""
    return ranges_text(ranks) or "none"


def ranks_phrase(ranks) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {fmt_ranks(ranks)}"


@dataclass
class Spread:
    """How one value is spread over ranks and nodes."""

    groups: dict[Any, dict[str, list[int]]]  # value -> host -> ranks, in order of first rank
    odd_nodes: list[str]  # nodes that differ from the value most nodes share ([] without such a majority)
    norm: Any = None  # that shared value
    norm_nodes: int = 0  # how many nodes share it

    @property
    def nodes(self) -> list[str]:
        return sorted({h for by_host in self.groups.values() for h in by_host})

    def ranks_of(self, hosts) -> list[int]:
        return sorted(r for by_host in self.groups.values() for h, rs in by_host.items() if h in hosts for r in rs)


def spread(values: dict[int, Any], hosts: dict[int, str]) -> Spread | None:
    """values: rank -> value; hosts: rank -> hostname. None when every rank has the same value."""
    groups: dict[Any, dict[str, list[int]]] = {}
    for r in sorted(values):
        groups.setdefault(values[r], {}).setdefault(hosts.get(r, "?"), []).append(r)
    if len(groups) < 2:
        return None
    per_node: dict[str, Any] = {}
    for value, by_host in groups.items():
        for host in by_host:
            per_node[host] = value if per_node.get(host, value) == value else MIXED
    counts = Counter(v for v in per_node.values() if v is not MIXED).most_common()
    if counts and counts[0][1] >= 2 and (len(counts) == 1 or counts[0][1] > counts[1][1]):
        norm, n = counts[0]
        odd = sorted(h for h, v in per_node.items() if v is MIXED or v != norm)
        return Spread(groups, odd, norm, n)
    return Spread(groups, [])


def describe(sp: Spread, what: str, show=repr) -> str:
    """One sentence: the odd node(s) against the rest, or every value with its nodes and ranks."""
    if sp.odd_nodes:
        parts = []
        for host in sp.odd_nodes:
            held = [(v, rs) for v, by_host in sp.groups.items() for h, rs in by_host.items() if h == host]
            parts.append(f"{host} has " + ", ".join(f"{show(v)} ({ranks_phrase(rs)})" for v, rs in held))
        odd = "odd node" if len(sp.odd_nodes) == 1 else "odd nodes"
        norm = show(sp.norm)
        return (f"{what}: {odd} " + "; ".join(parts)
                + f" where the {sp.norm_nodes} other nodes have {'it unset' if norm == 'unset' else norm}")
    groups = "; ".join(
        f"{show(v)} on " + ", ".join(f"{h} ({ranks_phrase(rs)})" for h, rs in by_host.items())
        for v, by_host in sp.groups.items()
    )
    return f"{what} across {'nodes' if len(sp.nodes) > 1 else 'the ranks of ' + sp.nodes[0]}: {groups}"


def where(sp: Spread) -> dict[str, Any]:
    """The finding's where: the odd node(s) and their ranks, or every node involved."""
    if len(sp.odd_nodes) == 1:
        return {"node": sp.odd_nodes[0], "ranks": sp.ranks_of(sp.odd_nodes)}
    nodes = sp.odd_nodes or sp.nodes
    return {"nodes": nodes, "ranks": sp.ranks_of(nodes)}
