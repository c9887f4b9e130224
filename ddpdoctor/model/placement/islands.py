"""Islands: groups of ranks with high mutual bandwidth, found in the measured link matrix (pure).

Link classes differ by large factors (NVLink4 ≈ 370 GB/s ring busbw, NDR IB ≈ 50 GB/s, PCIe Gen4 ≈
25 GB/s, 10 GbE ≈ 1.2 GB/s — DESIGN.md §5), while one link's figure varies by tens of percent. So:

1. The threshold sits in the widest gap (as a ratio) between consecutive measured link figures, if that
   gap is clear (``GAP_MIN``); no clear gap means uniform links: one island.
2. Links at or above it are *fast*. A fast link between two ranks that each have at least two other
   fast partners, none shared, is dropped as a stray (two dense groups are not one island because of
   a single link); then islands are the connected components, so a slow or unmeasured link inside a
   group does not split it.
3. A rank with no measured link at all joins the island holding most of its node (the node map).

Then the islands are cross-checked with the node map (hostnames) and, where known, NVLink domains
(GPU = local rank, torchrun's habit).
"""

from __future__ import annotations

import heapq
import itertools
import math
import operator
import statistics
from collections import Counter
from dataclasses import dataclass, field

from ddpdoctor.core.world import WorldInfo
from ddpdoctor.model.bandwidth.p2p_links import Links

# Smallest ratio between the slowest fast link and the fastest slow one that counts as a clear gap
# (our choice: above run-to-run noise of one link, below the 2x+ steps between link classes).
GAP_MIN = 1.5
EXACT_GAP_LIMIT = 32768  # figures sorted whole: all links of up to 256 ranks
_CANDIDATES = 2  # sample gaps checked against all figures


@dataclass
class Gap:
    below_GBps: float  # fastest link under the threshold
    above_GBps: float  # slowest link over it
    threshold_GBps: float

    @property
    def ratio(self) -> float:
        return self.above_GBps / self.below_GBps if self.below_GBps > 0 else math.inf

    def to_dict(self) -> dict:
        return {
            "below_GBps": round(self.below_GBps, 4),
            "above_GBps": round(self.above_GBps, 4),
            "threshold_GBps": round(self.threshold_GBps, 4),
            "ratio": None if math.isinf(self.ratio) else round(self.ratio, 2),
        }


@dataclass
class Islands:
    groups: list[list[int]]  # ordered by lowest rank; members by (node, local rank)
    island_of: list[int]  # rank -> index into groups
    gap: Gap | None  # None: no clear gap (uniform links) or nothing measured
    source: str  # "matrix", "uniform" (no clear gap) or "node map" (nothing measured)
    placed_by_node_map: list[int] = field(default_factory=list)
    dropped_links: list[tuple[int, int]] = field(default_factory=list)  # stray fast links ignored
    notes: list[str] = field(default_factory=list)  # where islands disagree with nodes or NVLink
    agrees_with_nodes: bool = True
    agrees_with_nvlink: bool | None = None  # None: no NVLink information

    @property
    def sizes(self) -> list[int]:
        return [len(g) for g in self.groups]

    def to_dict(self) -> dict:
        return {
            "groups": self.groups,
            "gap": self.gap.to_dict() if self.gap else None,
            "source": self.source,
            "placed_by_node_map": self.placed_by_node_map,
            "dropped_links": [list(p) for p in self.dropped_links],
            "notes": self.notes,
            "agrees_with_nodes": self.agrees_with_nodes,
            "agrees_with_nvlink": self.agrees_with_nvlink,
        }


def find_gap(values: list[float]) -> Gap | None:
    """The widest ratio between consecutive link figures, if it is a clear gap.

    Up to ``EXACT_GAP_LIMIT`` figures are sorted whole. Beyond (a 1024-rank matrix has half a million
    links, and sorting them costs more than everything else), the widest gaps of an even sample are
    the candidates, and each candidate's edges are then found exactly among all figures: the result is
    a true gap with exact edges, though a class of fewer links than the sample's stride may go unseen."""
    if not values:
        return None
    positive = values if min(values) > 0 else list(filter((0.0).__lt__, values))
    if not positive:
        return None
    if len(positive) < len(values):  # a dead link (0 GB/s) against working ones: the widest gap
        low = min(positive)
        return Gap(0.0, low, low / 2)
    stride = -(-len(positive) // EXACT_GAP_LIMIT)
    s = sorted(positive[::stride])
    if len(s) < 2:
        return None
    ratios = list(map(operator.truediv, itertools.islice(s, 1, None), s))
    if stride == 1:
        k = ratios.index(max(ratios))
        gap = Gap(s[k], s[k + 1], math.sqrt(s[k] * s[k + 1]))
        return gap if gap.ratio >= GAP_MIN else None
    best = None
    for k in heapq.nlargest(_CANDIDATES, range(len(ratios)), key=ratios.__getitem__):
        if ratios[k] < GAP_MIN:
            break
        t = math.sqrt(s[k] * s[k + 1])
        below, above = max(filter(t.__gt__, positive)), min(filter(t.__le__, positive))
        if above / below >= GAP_MIN and (best is None or above / below > best.ratio):
            best = Gap(below, above, math.sqrt(below * above))
    return best


def find_islands(links: Links, world: WorldInfo, nvlink: dict[str, list[list[int]]] | None = None) -> Islands:
    """Islands of ``links`` (one per rank of ``world``). ``nvlink``: hostname -> NVLink domains (lists
    of GPU indices joined by NVLink, see :func:`nvlink_domains`), for the cross-check."""
    n = links.n
    if world.world_size != n:
        raise ValueError(f"the P2P matrix has {n} rows but the run has {world.world_size} ranks")
    gap = find_gap(links.known_values())
    measured = [links.measured(r) for r in range(n)]
    dropped: list[tuple[int, int]] = []
    if gap is None:
        source = "uniform" if any(measured) else "node map"
        comp = [0 if measured[r] else -1 for r in range(n)]
    else:
        source = "matrix"
        nbrs: list[set[int]] = [set() for _ in range(n)]
        for i, j in links.pairs(at_least=gap.threshold_GBps):
            nbrs[i].add(j)
            nbrs[j].add(i)
        for i in range(n):
            for j in [j for j in nbrs[i] if j > i]:
                if len(nbrs[i]) >= 3 and len(nbrs[j]) >= 3 and nbrs[i].isdisjoint(nbrs[j]):
                    dropped.append((i, j))
        for i, j in dropped:
            nbrs[i].discard(j)
            nbrs[j].discard(i)
        comp = _components(nbrs, measured)
    placed = _place_unmeasured(comp, world)
    groups = _ordered_groups(comp, world)
    island_of = [0] * n
    for k, g in enumerate(groups):
        for r in g:
            island_of[r] = k
    out = Islands(groups, island_of, gap, source, placed, dropped)
    _cross_check_nodes(out, links, world)
    if nvlink:
        _cross_check_nvlink(out, world, nvlink)
    return out


def _components(nbrs: list[set[int]], measured: list[bool]) -> list[int]:
    comp = [-1] * len(nbrs)
    label = 0
    for start in range(len(nbrs)):
        if comp[start] != -1 or not measured[start]:
            continue
        comp[start] = label
        stack = [start]
        while stack:
            v = stack.pop()
            for u in nbrs[v]:
                if comp[u] == -1:
                    comp[u] = label
                    stack.append(u)
        label += 1
    return comp


def _place_unmeasured(comp: list[int], world: WorldInfo) -> list[int]:
    """Ranks with no measured link join their node's main island, or one island per node."""
    placed = [r for r, c in enumerate(comp) if c == -1]
    fresh = max(comp, default=-1) + 1
    by_node: dict[int, int] = {}
    for r in placed:
        node = world.node_of(r)
        mates = Counter(comp[m] for m in world.ranks_on_node(node) if comp[m] != -1)
        if mates:
            comp[r] = mates.most_common(1)[0][0]
        else:
            if node not in by_node:
                by_node[node], fresh = fresh, fresh + 1
            comp[r] = by_node[node]
    return placed


def _ordered_groups(comp: list[int], world: WorldInfo) -> list[list[int]]:
    groups: dict[int, list[int]] = {}
    for r, c in enumerate(comp):
        groups.setdefault(c, []).append(r)

    def key(r: int) -> tuple[int, int, int]:
        return world.ranks[r].node_rank, world.ranks[r].local_rank, r

    return sorted((sorted(g, key=key) for g in groups.values()), key=min)


def _ranks_of_host(world: WorldInfo, host: str) -> list[int]:
    # by name, not by node_rank: a lost rank's entry carries node_rank -1
    return [r.rank for r in world.ranks if r.hostname == host]


def _fmt(v: float | None) -> str:
    return "unmeasured" if v is None else f"{v:.3g} GB/s"


def _cross_check_nodes(isl: Islands, links: Links, world: WorldInfo) -> None:
    for g in isl.groups:
        hosts = sorted({world.host_of(r) for r in g}, key=lambda h: world.nodes.index(h))
        if len(hosts) > 1 and isl.source == "uniform":
            isl.agrees_with_nodes = False
            isl.notes.append(
                f"no clear gap between link figures (none {GAP_MIN}× wider than the rest): links across "
                f"nodes {', '.join(hosts)} measure like links inside a node"
            )
        elif len(hosts) > 1:
            isl.agrees_with_nodes = False
            isl.notes.append(
                f"island {_ranks(g)} spans nodes {', '.join(hosts)}: links between them measure as fast "
                "as inside a node (a multi-node NVLink domain, or intra-node links as slow as the network)"
            )
    for host in world.nodes:
        mine = _ranks_of_host(world, host)
        parts = [g for g in isl.groups if set(g) & set(mine)]
        if len(parts) > 1 and isl.source == "matrix":
            isl.agrees_with_nodes = False
            inside = statistics.median(
                [v for g in parts for v in [links.median_between(g, g)] if v is not None] or [0.0]
            )
            across = links.median_between(parts[0], [r for g in parts[1:] for r in g])
            isl.notes.append(
                f"node {host} holds {len(parts)} islands {', '.join(_ranks(g) for g in parts)}: links "
                f"between them {_fmt(across)} vs {_fmt(inside)} inside (a link down, or GPUs in "
                "separate NVLink/PCIe domains)"
            )


def _cross_check_nvlink(isl: Islands, world: WorldInfo, nvlink: dict[str, list[list[int]]]) -> None:
    isl.agrees_with_nvlink = True
    for host in world.nodes:
        domains = nvlink.get(host)
        if not domains or all(len(d) < 2 for d in domains):
            continue  # no NVLink on this node: nothing to compare
        mine = _ranks_of_host(world, host)
        by_gpu = {world.ranks[r].local_rank: r for r in mine}
        expected = sorted(sorted(by_gpu[g] for g in d if g in by_gpu) for d in domains)
        expected = [e for e in expected if e]
        covered = {r for e in expected for r in e}
        found = sorted(sorted(r for r in g if r in covered) for g in isl.groups)
        found = [f for f in found if f]
        if found != expected:
            isl.agrees_with_nvlink = False
            isl.notes.append(
                f"node {host}: NVLink joins ranks {', '.join(_ranks(e) for e in expected)} but the "
                f"measured islands there are {', '.join(_ranks(f) for f in found)}"
            )


def nvlink_domains(matrix: dict) -> list[list[int]]:
    """GPU indices joined by NVLink (connected components), from NVL001's per-node matrix
    ({"labels": ["GPU0", ...], "values": [[null, 18], ...]}); GPUs without NVLink stand alone."""
    labels = matrix.get("labels") or []
    values = matrix.get("values") or []
    try:
        gpus = [int(str(label).removeprefix("GPU")) for label in labels]
    except ValueError:
        raise ValueError(f"NVLink matrix labels {labels!r}; expected GPU0, GPU1, ...") from None
    nbrs = [{j for j, v in enumerate(row) if j != i and v} for i, row in enumerate(values)]
    comp = _components(nbrs, [True] * len(nbrs))
    out: dict[int, list[int]] = {}
    for i, c in enumerate(comp):
        out.setdefault(c, []).append(gpus[i])
    return sorted(out.values())


def _ranks(group: list[int]) -> str:
    return "[" + ",".join(str(r) for r in sorted(group)) + "]"
