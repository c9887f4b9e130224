"""Which rank pairs to measure together: the point-to-point schedule of P2P001. Pure.

A round is a list of disjoint pairs ``(a, b)``; every pair of a round is measured at the same time, in
both directions (a→b, then b→a). Plans:

* ``full``: the circle method (round robin). n ranks (odd n: one rank sits out each round) give n−1
  rounds (n rounds for odd n) of n/2 pairs, covering every unordered pair exactly once. Cost grows as
  n², fine within a node or a few nodes.
* ``rails``: for large clusters. The full matrix inside every node (all nodes at once, circle method
  over local ranks), then across nodes one pair per node pair per local rank: in node-level rounds
  (circle method over nodes) node A meets node B and local rank l of A pairs with local rank l of B,
  all rails at once, as a rail-optimised fabric carries them. Rounds: (G−1) + (N−1) for N nodes of G
  ranks (even counts), against n(n−1)/2 pairs for the full matrix.
* ``sequential``: one pair per round, for contention-free numbers (n(n−1)/2 rounds).
"""

from __future__ import annotations

from dataclasses import dataclass

Pair = tuple[int, int]
Round = list[Pair]
PLANS = ("auto", "full", "rails")
MODES = ("pairs", "sequential")
# "auto" measures the full matrix up to this many ranks and switches to rails beyond.
AUTO_FULL_MAX_RANKS = 64


def circle_rounds(ranks: list[int]) -> list[Round]:
    """Round-robin rounds of disjoint pairs covering every unordered pair of ``ranks`` once."""
    if len(set(ranks)) != len(ranks):
        raise ValueError("ranks must be distinct")
    slots: list[int | None] = list(ranks)
    if len(slots) % 2:
        slots.append(None)  # the bye
    m = len(slots)
    rounds: list[Round] = []
    for _ in range(m - 1):
        pairs = []
        for i in range(m // 2):
            a, b = slots[i], slots[m - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b) if a < b else (b, a))
        rounds.append(pairs)
        # Keep the first slot, rotate the others by one.
        slots = [slots[0], slots[-1], *slots[1:-1]]
    return rounds


def _merge(parallel: list[list[Round]]) -> list[Round]:
    """Run several independent schedules side by side: round k is the union of their round k."""
    depth = max((len(s) for s in parallel), default=0)
    return [[p for s in parallel if k < len(s) for p in s[k]] for k in range(depth)]


def rail_rounds(nodes: list[list[int]]) -> list[Round]:
    """Full matrix inside each node, then rail pairs across nodes in node-level rounds.

    ``nodes[i]`` lists node i's ranks by local rank. Nodes with fewer ranks than others pair only the
    local ranks both have.
    """
    intra = _merge([circle_rounds(list(ranks)) for ranks in nodes if len(ranks) > 1])
    inter: list[Round] = []
    for node_round in circle_rounds(list(range(len(nodes)))):
        pairs = []
        for a, b in node_round:
            for ra, rb in zip(nodes[a], nodes[b]):
                pairs.append((ra, rb) if ra < rb else (rb, ra))
        inter.append(pairs)
    return [r for r in intra + inter if r]


@dataclass
class Schedule:
    plan: str  # full | rails
    mode: str  # pairs | sequential
    rounds: list[Round]

    @property
    def pairs(self) -> int:
        return sum(len(r) for r in self.rounds)

    def partner(self, round_index: int, rank: int) -> int | None:
        for a, b in self.rounds[round_index]:
            if a == rank:
                return b
            if b == rank:
                return a
        return None


def make_schedule(
    nodes: list[list[int]], plan: str = "auto", mode: str = "pairs", auto_full_max: int = AUTO_FULL_MAX_RANKS
) -> Schedule:
    """The schedule for ranks grouped by node (``nodes[i]`` = node i's ranks in local-rank order)."""
    if plan not in PLANS:
        raise ValueError(f"unknown p2p plan {plan!r}; expected one of {', '.join(PLANS)}")
    if mode not in MODES:
        raise ValueError(f"unknown p2p mode {mode!r}; expected one of {', '.join(MODES)}")
    ranks = [r for node in nodes for r in node]
    if plan == "auto":
        plan = "full" if len(ranks) <= auto_full_max or len(nodes) == 1 else "rails"
    rounds = circle_rounds(sorted(ranks)) if plan == "full" else rail_rounds(nodes)
    if mode == "sequential":
        rounds = [[p] for r in rounds for p in r]
    return Schedule(plan=plan, mode=mode, rounds=rounds)
