"""Is this stall certain to be a deadlock, whatever --hang-after says? (pure)

`ddpdoctor watch` sees, every poll, where each rank waits (``WaitState``, published by the rank
helpers) and which ranks have ended (``RankEnd``). Some combinations can never resolve:

- ranks of one process group wait in collectives with different sequence numbers, or in different
  operations at the same sequence number (rank 0 in barrier #10, ranks 1-2 in all_reduce #10);
- blocking point-to-point waits form a cycle (0 waits on 2, 2 on 1, 1 on 0);
- a rank waits in a collective of a group one of whose members has ended (exited or died) before
  entering it;
- some ranks sit in ``new_group`` (which every rank of the world must call) while others wait in a
  collective of the world group.

Everything else -- some ranks wait while others compute or sit in Python -- is ambiguous: a straggler
looks like a stalled data loader until enough time has passed, and is left to --hang-after.

A certain finding is acted on only after it has been seen unchanged for ``--confirm`` seconds
(``Confirmer``): a moment's skew between ranks (one has retired #5 and entered #6 while another has
not yet marked #5 done) changes within milliseconds, a deadlock never does.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.model.hang.analysis import rank_list
from ddpdoctor.model.hang.evidence import RankEnd

P2P_CALLS = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv"})
NEW_GROUP_CALLS = frozenset({"new_group", "new_subgroups", "new_subgroups_by_enumeration"})
WORLD = "default_pg"


@dataclass(frozen=True)
class WaitState:
    """Where one rank has been waiting since ``since_ns`` (one continuous wait in one operation)."""

    rank: int
    operation: str  # "all_reduce", "send", "new_group" (no backend prefix)
    since_ns: int
    seq: int | None = None  # collective_seq_id (p2p_seq_id for p2p) from Flight Recorder
    group: str = WORLD  # the group's description ("default_pg") or name
    members: tuple[int, ...] = ()  # global ranks of the group; () = unknown (the world for default_pg)
    peer: int | None = None  # send: dst, recv: src (global ranks)
    sizes: str = ""  # "4x1000 float32", for the text only
    host: str | None = None

    @property
    def is_p2p(self) -> bool:
        return self.operation in P2P_CALLS

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, d: dict) -> WaitState:
        return cls(
            rank=int(d["rank"]),
            operation=str(d["operation"]),
            since_ns=int(d["since_ns"]),
            seq=None if d.get("seq") is None else int(d["seq"]),
            group=str(d.get("group") or WORLD),
            members=tuple(int(m) for m in d.get("members") or ()),
            peer=None if d.get("peer") is None else int(d["peer"]),
            sizes=str(d.get("sizes") or ""),
            host=d.get("host"),
        )


@dataclass(frozen=True)
class Certainty:
    kind: str  # mismatch_seq | mismatch_op | p2p_cycle | member_ended | new_group
    reason: str  # why it can never resolve, in the user's terms
    ranks: tuple[int, ...]  # every rank involved
    key: tuple  # what must stay unchanged through --confirm


def _who(ranks, waits: dict[int, WaitState]) -> str:
    hosts = sorted({h for r in ranks if r in waits and (h := waits[r].host)})
    return rank_list(list(ranks)) + (f" ({', '.join(hosts)})" if hosts else "")


def _op_text(w: WaitState) -> str:
    return f"{w.operation} #{w.seq}" if w.seq is not None else w.operation


def _group_mismatch(waits: dict[int, WaitState]) -> Certainty | None:
    by_group: dict[str, dict[int, WaitState]] = {}
    for w in waits.values():
        if not w.is_p2p and w.seq is not None and w.operation not in NEW_GROUP_CALLS:
            by_group.setdefault(w.group, {})[w.rank] = w
    for group, ws in sorted(by_group.items()):
        kinds: dict[tuple[str, int], list[int]] = {}
        for r, w in ws.items():
            kinds.setdefault((w.operation, w.seq), []).append(r)  # type: ignore[arg-type]
        if len(kinds) < 2:
            continue
        parts = sorted(kinds.items(), key=lambda kv: (len(kv[1]), kv[1]))
        text = " while ".join(f"{_who(rs, ws)} wait{'s' if len(rs) == 1 else ''} in {op} #{s}"
                              for (op, s), rs in parts)  # fmt: skip
        seqs = {s for _, s in kinds}
        kind = "mismatch_seq" if len(seqs) > 1 else "mismatch_op"
        why = (
            "a collective completes only when every rank of the group is in the same one: these can never match"
        )
        key = ("group", group, tuple(sorted((r, w.operation, w.seq, w.since_ns) for r, w in ws.items())))
        return Certainty(kind, f"{text} ({group}): {why}", tuple(sorted(ws)), key)
    return None


def _p2p_cycle(waits: dict[int, WaitState]) -> Certainty | None:
    blocked = {r: w for r, w in waits.items() if w.is_p2p and w.peer is not None}

    def waits_for(r: int) -> int | None:
        w = blocked[r]
        other = blocked.get(w.peer)  # type: ignore[arg-type]
        # r sends to p while p receives from r: a matching pair, moving
        if other is not None and other.peer == r and ("send" in w.operation) != ("send" in other.operation):
            return None
        return w.peer

    for start in sorted(blocked):
        path = [start]
        while (nxt := waits_for(path[-1])) is not None and nxt in blocked:
            if nxt in path:
                cycle = path[path.index(nxt):]
                arrows = "\u2192".join(map(str, cycle + [nxt]))
                calls = ", ".join(f"rank {r} in {blocked[r].operation} "
                                  f"{'to' if 'send' in blocked[r].operation else 'from'} rank {blocked[r].peer}"
                                  for r in cycle)  # fmt: skip
                reason = (f"a cycle of blocking point-to-point waits {arrows} ({calls}): each waits for a "
                          "rank that waits in turn, none can return first")  # fmt: skip
                key = ("p2p", tuple(sorted((r, blocked[r].operation, blocked[r].peer, blocked[r].since_ns)
                                           for r in cycle)))  # fmt: skip
                return Certainty("p2p_cycle", reason, tuple(sorted(cycle)), key)
            path.append(nxt)
    return None


def _members(w: WaitState, world: int) -> tuple[int, ...]:
    if w.members:
        return w.members
    return tuple(range(world)) if w.group == WORLD else ()


def _member_ended(waits: dict[int, WaitState], ends: dict[int, RankEnd], world: int) -> Certainty | None:
    for r in sorted(waits):
        w = waits[r]
        if w.operation in NEW_GROUP_CALLS:
            continue
        peers = [w.peer] if w.is_p2p and w.peer is not None else list(_members(w, world))
        for m in peers:
            end = ends.get(m)
            if end is None or m == r:
                continue
            # a member that ended after entering this very collective may have finished its part
            last = end.last_seq.get(w.group)
            if not w.is_p2p and w.seq is not None and last is not None and last >= w.seq:
                continue
            host = f" ({w.host})" if w.host else ""
            entered = f"; its last collective in {w.group} was #{last}" if last is not None else ""
            reason = (
                f"rank {r}{host} waits in {_op_text(w)} ({w.group}) but rank {m}, a member, {end.text()}"
                f"{entered}: it will never enter it"
            )
            key = ("ended", r, w.operation, w.seq, w.since_ns, m, end.how)
            return Certainty("member_ended", reason, (r, m), key)
    return None


def _new_group(waits: dict[int, WaitState], world: int) -> Certainty | None:
    """``members`` of a new_group wait: the new group's ranks when it synchronises only them
    (use_local_synchronization=True); () when every rank of the world must call it."""
    making = sorted(r for r, w in waits.items() if w.operation in NEW_GROUP_CALLS)
    if not making:
        return None
    needed = set(waits[making[0]].members) or set(range(world))
    in_world = sorted(r for r, w in waits.items() if w.group == WORLD and not w.is_p2p
                      and w.operation not in NEW_GROUP_CALLS and r in needed)  # fmt: skip
    if not in_world:
        return None
    call = waits[making[0]].operation
    op = _op_text(waits[in_world[0]])
    reason = (
        f"{_who(making, waits)} wait{'s' if len(making) == 1 else ''} in {call} while {_who(in_world, waits)} "
        f"wait{'s' if len(in_world) == 1 else ''} in {op} (default_pg): {call} must be called by every rank "
        "of the world, and these ranks cannot get there before their collective completes"
    )
    key = ("new_group", tuple((r, waits[r].operation, waits[r].seq, waits[r].since_ns) for r in making + in_world))
    return Certainty("new_group", reason, tuple(making + in_world), key)


def certain(waits: dict[int, WaitState], ends: dict[int, RankEnd], world: int) -> Certainty | None:
    """The first deadlock that is certain from these waits and ends, or None (ambiguous or healthy)."""
    return (
        _new_group(waits, world)
        or _group_mismatch(waits)
        or _p2p_cycle(waits)
        or _member_ended(waits, ends, world)
    )


class Confirmer:
    """A certainty counts once its key has been seen unchanged for ``confirm_s`` seconds."""

    def __init__(self, confirm_s: float) -> None:
        self.confirm_s = confirm_s
        self._key: tuple | None = None
        self._since_ns = 0

    def update(self, found: Certainty | None, now_ns: int) -> Certainty | None:
        if found is None:
            self._key = None
            return None
        if found.key != self._key:
            self._key, self._since_ns = found.key, now_ns
        return found if (now_ns - self._since_ns) / 1e9 >= self.confirm_s else None

    def seen_s(self, now_ns: int) -> float:
        return 0.0 if self._key is None else (now_ns - self._since_ns) / 1e9
