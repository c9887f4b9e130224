"""The ring whose slowest link is fastest (bottleneck Hamiltonian cycle), exact or heuristic (pure).

A ring all-reduce runs at the speed of its slowest link (DESIGN.md §5), so a ring is judged by, in
order: its bottleneck (higher is better), its island crossings (fewer is better: each crossing is a
network hop, and the P2P matrix measured links one pair at a time, so hops that share a NIC are slower
together than their figures say), then its other links, slowest first.

* Exact for up to ``EXACT_LIMIT`` ranks: the best bottleneck t* by a threshold search whose
  feasibility test is a Held–Karp style bitmask dynamic program; then, among rings whose bottleneck
  is within the noise of t* (``SIGNIFICANT``), the fewest crossings (t* itself when that costs none).
* Beyond: islands kept contiguous, visited in a "snake" (every other island walked backwards) so that
  each crossing joins ranks at the same position in their islands — the same local rank, so the same
  rail when nodes are alike — then 2-opt moves that replace slow links without adding crossings.
  Both finish with 2-opt moves that replace two links by two links faster, beyond the noise, than
  the slower of the two they replace.

Links come from a *link source*: ``bw(i, j)`` (GB/s, measured or estimated, None when unknown),
``estimated(i, j)``, ``typical(a, b)`` between islands a and b, and ``island_of[rank]``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

EXACT_LIMIT = 12  # 2^11 masks x 12 ends: a few ms per feasibility test in pure Python
# Figures closer than this factor are one figure: P2P bandwidth varies from run to run, and a ring
# order is only worth changing for a difference larger than that (our choice, not a measured law).
SIGNIFICANT = 1.2
_MAX_PASSES = 64  # one 2-opt move per pass; bounds the work on a pathological matrix


class LinkSource(Protocol):
    island_of: Sequence[int]

    def bw(self, i: int, j: int) -> float | None: ...

    def estimated(self, i: int, j: int) -> bool: ...

    def typical(self, a: int, b: int) -> float | None: ...  # between islands a and b


@dataclass
class Ring:
    order: list[int]
    bottleneck_GBps: float | None  # slowest link with a figure; None: no link has one
    bottleneck_link: tuple[int, int] | None
    crossings: int  # links between islands
    estimated_links: int = 0  # links whose figure is an estimate, not a measurement
    unknown_links: int = 0  # links with no figure at all
    exact: bool = False  # proven best (small worlds) rather than found by the heuristic
    links_GBps: list[float | None] = field(default_factory=list)  # link k joins order[k] and order[k+1]
    bound_GBps: float | None = None  # exact searches: the fastest bottleneck any ring reaches

    def to_dict(self) -> dict:
        return {
            "order": self.order,
            "bottleneck_GBps": _round(self.bottleneck_GBps),
            "bottleneck_link": list(self.bottleneck_link) if self.bottleneck_link else None,
            "crossings": self.crossings,
            "estimated_links": self.estimated_links,
            "unknown_links": self.unknown_links,
            "exact": self.exact,
            "bound_GBps": _round(self.bound_GBps),
        }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def ring_of(order: Sequence[int], links: LinkSource, exact: bool = False, bound: float | None = None) -> Ring:
    """Judge a given ring order (the last rank links back to the first)."""
    n = len(order)
    order = list(order)
    if n < 2:
        return Ring(order, None, None, 0, exact=True)
    island = links.island_of
    pairs = [(order[k], order[(k + 1) % n]) for k in range(n if n > 2 else 1)]
    figures = [links.bw(a, b) for a, b in pairs]
    known = [(f, p) for f, p in zip(figures, pairs) if f is not None]
    slowest = min(known, key=lambda x: x[0]) if known else None
    return Ring(
        order=order,
        bottleneck_GBps=slowest[0] if slowest else None,
        bottleneck_link=slowest[1] if slowest else None,
        crossings=sum(island[a] != island[b] for a, b in pairs),
        estimated_links=sum(1 for a, b in pairs if links.estimated(a, b)),
        unknown_links=len(figures) - len(known),
        exact=exact,
        links_GBps=figures,
        bound_GBps=bound,
    )


def better(a: Ring, b: Ring) -> bool:
    """Is ring a clearly better than ring b: a bottleneck faster by more than the noise, or as fast
    within the noise with fewer crossings."""
    fa, fb = a.bottleneck_GBps or 0.0, b.bottleneck_GBps or 0.0
    if fa > fb * SIGNIFICANT:
        return True
    if fb > fa * SIGNIFICANT:
        return False
    return a.crossings < b.crossings


def best_ring(members: Sequence[int], links: LinkSource, exact_limit: int = EXACT_LIMIT) -> Ring:
    """The best ring over ``members`` (ranks listed island by island in the order to prefer)."""
    members = list(members)
    heuristic = ring_of(_improve(_snake(members, links), links), links)
    if len(members) > exact_limit:
        found = heuristic
    elif len(members) <= 3:  # every order of three or fewer is the same ring
        found = ring_of(members, links, exact=True)
        found.bound_GBps = found.bottleneck_GBps
    else:
        found = _exact(members, links, heuristic)
    return ring_of(_canonical(found.order, links.island_of), links, exact=found.exact, bound=found.bound_GBps)


def _canonical(order: list[int], island: Sequence[int]) -> list[int]:
    """The same ring written from its lowest rank, first through that rank's island, else towards the
    lower of its two neighbours."""
    if len(order) < 3:
        return sorted(order)
    k = order.index(min(order))
    rot = order[k:] + order[:k]
    back = [rot[0]] + rot[1:][::-1]
    home = island[rot[0]]
    if (island[rot[1]] == home) != (island[rot[-1]] == home):
        return rot if island[rot[1]] == home else back
    return rot if rot[1] <= rot[-1] else back


# -- heuristic -------------------------------------------------------------------------------------


def _groups(members: list[int], island: Sequence[int]) -> list[list[int]]:
    out: dict[int, list[int]] = {}
    for r in members:
        out.setdefault(island[r], []).append(r)
    return list(out.values())


def _snake(members: list[int], links: LinkSource) -> list[int]:
    groups = _groups(members, links.island_of)
    if 3 <= len(groups) <= EXACT_LIMIT:
        isl = [links.island_of[g[0]] for g in groups]
        w = [[(links.typical(a, b) or 0.0) if a != b else 0.0 for b in isl] for a in isl]
        groups = [groups[k] for k in _exact_order(len(groups), lambda i, j: w[i][j])]
    out: list[int] = []
    for k, g in enumerate(groups):
        out.extend(g if k % 2 == 0 else reversed(g))
    return out


def _improve(order: list[int], links: LinkSource) -> list[int]:
    """2-opt moves on notably slow links: replace links (a,b),(c,d) by (a,c),(b,d) — reversing the
    path b..c — when both new links beat the slower old one by more than the noise and the move adds
    no island crossing. c is sought among a's island mates (where fast partners of a are)."""
    n = len(order)
    if n < 4:
        return order
    island = links.island_of

    def w(x: int, y: int) -> float:
        f = links.bw(x, y)
        return 0.0 if f is None else f

    mates: dict[int, list[int]] = {}
    for r in order:
        mates.setdefault(island[r], []).append(r)
    for _ in range(_MAX_PASSES):
        figures = [w(order[k], order[(k + 1) % n]) for k in range(n)]
        typical = statistics.median(figures)
        where = {r: k for k, r in enumerate(order)}
        moved = False
        for _f, p in sorted((f, k) for k, f in enumerate(figures) if f * SIGNIFICANT < typical):
            a, b = order[p], order[(p + 1) % n]
            for c in mates[island[a]]:
                q = (where[c] - p) % n  # c's place once the ring is rotated to start at a
                if q < 2 or q > n - 2:
                    continue
                d = order[(where[c] + 1) % n]
                old = min(w(a, b), w(c, d))
                if min(w(a, c), w(b, d)) <= old * SIGNIFICANT:
                    continue
                if (island[a] != island[c]) + (island[b] != island[d]) > (island[a] != island[b]) + (
                    island[c] != island[d]
                ):
                    continue
                rot = order[p:] + order[:p]  # a first, b second
                order = [a] + rot[1 : q + 1][::-1] + rot[q + 1 :]
                moved = True
                break
            if moved:
                break
        if not moved:
            return order
    return order


# -- exact -----------------------------------------------------------------------------------------


def _exact(members: list[int], links: LinkSource, heuristic: Ring) -> Ring:
    """Exhaustive search: the best bottleneck t*; then, among rings within the noise of it (>= t* /
    SIGNIFICANT), the fewest crossings — taking t* itself when that costs no extra crossing."""
    m = len(members)
    island = links.island_of

    def w(i: int, j: int) -> float:
        f = links.bw(members[i], members[j])
        return 0.0 if f is None else f

    weights = [[w(i, j) if i != j else 0.0 for j in range(m)] for i in range(m)]
    lower = 0.0 if heuristic.unknown_links else heuristic.bottleneck_GBps or 0.0
    candidates = sorted({v for row in weights for v in row if v > lower})
    best_t = lower  # the heuristic's ring exists at its own bottleneck
    lo, hi = 0, len(candidates) - 1
    while lo <= hi:  # the largest threshold that leaves a Hamiltonian cycle
        mid = (lo + hi) // 2
        if _has_cycle(_adjacency(weights, candidates[mid])):
            best_t, lo = candidates[mid], mid + 1
        else:
            hi = mid - 1
    tolerated = best_t / SIGNIFICANT
    n_islands = len({island[r] for r in members})
    fewest = n_islands if n_islands > 1 else 0
    if lower >= tolerated and heuristic.crossings == fewest:
        return ring_of(heuristic.order, links, exact=True, bound=best_t or None)
    cross = [[int(island[members[i]] != island[members[j]]) for j in range(m)] for i in range(m)]
    at_best, c_best = _fewest_crossings(_adjacency(weights, best_t), cross)
    within, c_within = _fewest_crossings(_adjacency(weights, tolerated), cross)
    local = at_best if c_best <= c_within else within
    return ring_of(_improve([members[i] for i in local], links), links, exact=True, bound=best_t or None)


def _adjacency(weights: list[list[float]], t: float) -> list[int]:
    return [sum(1 << j for j, v in enumerate(row) if v >= t and j != i) for i, row in enumerate(weights)]


def _has_cycle(adj: list[int]) -> bool:
    """Hamiltonian cycle through vertex 0 in a graph given as bitmask adjacency (m >= 3)."""
    m = len(adj)
    if any(a.bit_count() < 2 for a in adj):
        return False
    full = (1 << m) - 1
    reach = [0] * (1 << m)  # reach[mask]: ends of paths from vertex 0 that visit exactly mask
    reach[1] = 1
    for mask in range(1, full + 1, 2):
        ends = reach[mask]
        while ends:
            low = ends & -ends
            ends ^= low
            nxt = adj[low.bit_length() - 1] & ~mask
            while nxt:
                bit = nxt & -nxt
                nxt ^= bit
                reach[mask | bit] |= bit
    return bool(reach[full] & adj[0])


def _fewest_crossings(adj: list[int], cross: list[list[int]]) -> tuple[list[int], int]:
    """The Hamiltonian cycle (from vertex 0) with the fewest crossings, and that count, in a graph
    known to have one."""
    m = len(adj)
    full = (1 << m) - 1
    inf = m + 1
    cost = [[inf] * m for _ in range(1 << m)]
    parent = [[-1] * m for _ in range(1 << m)]
    cost[1][0] = 0
    for mask in range(1, full + 1, 2):
        row = cost[mask]
        for v in range(m):
            c = row[v]
            if c >= inf:
                continue
            nxt = adj[v] & ~mask
            while nxt:
                bit = nxt & -nxt
                nxt ^= bit
                u = bit.bit_length() - 1
                nc = c + cross[v][u]
                if nc < cost[mask | bit][u]:
                    cost[mask | bit][u] = nc
                    parent[mask | bit][u] = v
    ends = [v for v in range(1, m) if adj[v] & 1 and cost[full][v] < inf]
    v = min(ends, key=lambda v: cost[full][v] + cross[v][0])
    total = cost[full][v] + cross[v][0]
    path, mask = [], full
    while v != -1:
        path.append(v)
        v, mask = parent[mask][v], mask ^ (1 << v)
    return path[::-1], total


def _exact_order(k: int, w: Callable[[int, int], float]) -> list[int]:
    """Best-bottleneck cycle over k items (3 <= k <= EXACT_LIMIT); ties keep the given order."""
    weights = [[w(i, j) if i != j else 0.0 for j in range(k)] for i in range(k)]
    ident = min(weights[i][(i + 1) % k] for i in range(k))
    candidates = sorted({v for row in weights for v in row if v > ident})
    best_adj = None
    lo, hi = 0, len(candidates) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        adj = _adjacency(weights, candidates[mid])
        if _has_cycle(adj):
            best_adj, lo = adj, mid + 1
        else:
            hi = mid - 1
    if best_adj is None:
        return list(range(k))
    return _fewest_crossings(best_adj, [[0] * k for _ in range(k)])[0]
