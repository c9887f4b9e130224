"""Simulate every rank's point-to-point operations and say whether they complete.

Blocking send/recv are synchronous rendezvous (as NCCL's are, and gloo's for anything but tiny
tensors): a send completes only when the peer's matching recv is posted, and vice versa. isend/irecv
post and return; ``wait`` blocks until the request is matched. Messages between a pair match in
order; ``recv(src=None)`` matches any sender. Pure: input is per-rank lists of P2POp.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class P2POp:
    op: str  # send | recv | isend | irecv | wait
    peer: int | None = None  # None: recv from any source
    req: int | None = None
    ref: object = None  # the caller's handle (an Event)


@dataclass
class Stuck:
    rank: int
    op: P2POp


@dataclass
class Outcome:
    ok: bool
    stuck: list[Stuck] = field(default_factory=list)  # ranks blocked forever, with the op they block in
    finished: list[int] = field(default_factory=list)
    bad_peer: list[Stuck] = field(default_factory=list)  # peer outside 0..W-1 or the rank itself


def simulate(ops_by_rank: list[list[P2POp]]) -> Outcome:
    W = len(ops_by_rank)
    bad = [
        Stuck(r, o)
        for r, ops in enumerate(ops_by_rank)
        for o in ops
        if o.op != "wait" and o.peer is not None and not (0 <= o.peer < W and o.peer != r)
    ]
    if bad:
        return Outcome(False, bad_peer=bad)
    pc = [0] * W
    # posted, unmatched operations per rank: [op, matched]
    posted: list[list[list]] = [[] for _ in range(W)]
    matched_reqs: set[tuple[int, int]] = set()

    def head_blocking(r: int) -> P2POp | None:
        if pc[r] < len(ops_by_rank[r]):
            o = ops_by_rank[r][pc[r]]
            if o.op in ("send", "recv"):
                return o
        return None

    def pairs(a_rank: int, a: P2POp, b_rank: int, b: P2POp) -> bool:
        if a.op in ("send", "isend") and b.op in ("recv", "irecv"):
            return a.peer == b_rank and (b.peer is None or b.peer == a_rank)
        if a.op in ("recv", "irecv") and b.op in ("send", "isend"):
            return pairs(b_rank, b, a_rank, a)
        return False

    def first_partner(r: int, o: P2POp):
        """The earliest unmatched op on a peer that pairs with o: posted ones first, then its head."""
        peers = [o.peer] if o.peer is not None else range(W)
        for p in peers:
            if p == r:
                continue
            for entry in posted[p]:
                if not entry[1] and pairs(r, o, p, entry[0]):
                    return p, entry
            h = head_blocking(p)
            if h is not None and pairs(r, o, p, h):
                return p, None
        return None

    def consume(hit) -> None:
        """The partner found for an op completes too: a posted request is matched, a head op advances."""
        p, entry = hit
        if entry is not None:
            entry[1] = True
            matched_reqs.add((p, entry[0].req))
        else:
            pc[p] += 1

    progress = True
    while progress:
        progress = False
        for r in range(W):
            while pc[r] < len(ops_by_rank[r]):
                o = ops_by_rank[r][pc[r]]
                if o.op in ("isend", "irecv"):
                    hit = first_partner(r, o)
                    if hit is not None:
                        consume(hit)
                        matched_reqs.add((r, o.req))
                        posted[r].append([o, True])
                    else:
                        posted[r].append([o, False])
                    pc[r] += 1
                elif o.op == "wait":
                    if (
                        o.req is None
                        or (r, o.req) in matched_reqs
                        or not any(e[0].req == o.req for e in posted[r])
                    ):
                        pc[r] += 1
                    else:
                        break
                else:
                    hit = first_partner(r, o)
                    if hit is None:
                        break
                    consume(hit)
                    pc[r] += 1
                progress = True
            # a rank's later posts may match earlier posts of others
            for rr in range(W):
                for entry in posted[rr]:
                    if entry[1]:
                        continue
                    for pp in range(W):
                        if pp == rr:
                            continue
                        other = next(
                            (e for e in posted[pp] if not e[1] and pairs(rr, entry[0], pp, e[0])), None
                        )
                        if other is not None:
                            entry[1] = other[1] = True
                            matched_reqs.add((rr, entry[0].req))
                            matched_reqs.add((pp, other[0].req))
                            progress = True
                            break
    stuck = [Stuck(r, ops_by_rank[r][pc[r]]) for r in range(W) if pc[r] < len(ops_by_rank[r])]
    finished = [r for r in range(W) if pc[r] >= len(ops_by_rank[r])]
    return Outcome(not stuck, stuck=stuck, finished=finished)
