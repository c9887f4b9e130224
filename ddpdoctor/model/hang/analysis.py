"""The hang diagnosis, pure: from every rank's evidence to a verdict (which rank, which operation,
which line).

Rules (facts from torch's Flight Recorder analyser, our own code):
- Operations are matched across the ranks of one process group by sequence number, collectives by
  ``collective_seq_id`` and p2p by ``p2p_seq_id`` separately. A rank's entry ``retired`` means the
  operation completed on that rank (gloo leaves ``state`` at "scheduled").
- The first sequence number the ranks disagree on is the finding: a rank that never got there (its
  last entry is older), ranks that called different operations, or the same operation with different
  sizes / dtypes. A buffer that wrapped (a rank's oldest entry is newer) is not a disagreement.
- gloo does not record send/recv in the Flight Recorder: blocked p2p calls are read from the stacks
  (the peer from the frame's ``locals``), and a waits-for walk finds cycles (0->1->2->0) or the rank
  the chain ends at.
- For each culprit rank: where its main thread is, innermost user frame first (frames of torch,
  ddpdoctor and the standard library skipped), or the exception it died of, or "no evidence".
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from ddpdoctor.model.hang.evidence import Evidence, Frame, FROp, RankEvidence
from ddpdoctor.model.hang.verify import RunFinding

DIAGNOSIS_FORMAT = "ddpdoctor-hang-diagnosis"
P2P_CALLS = {"send", "recv", "isend", "irecv", "batch_isend_irecv"}
GRID_COLUMNS = 12

_STDLIB = re.compile(r"/lib/(python|pypy)\d+(\.\d+)?/(?!site-packages/|dist-packages/)")
_TORCH = re.compile(r"/(site|dist)-packages/torch/|/torch/(distributed|nn|utils|_C|multiprocessing)/")
_DDPDOCTOR = re.compile(
    r"/ddpdoctor/(runtime|commands|model|probes|lint|report|tui|checks)/|/ddpdoctor/\w+\.py$"
)
_DC10D = re.compile(r"/torch/distributed/distributed_c10d\.py$")


def is_user_frame(f: Frame) -> bool:
    path = f.file.replace("\\", "/")
    if path.startswith("<"):  # <frozen runpy>, <string>
        return False
    return not (_STDLIB.search(path) or _TORCH.search(path) or _DDPDOCTOR.search(path))


def user_chain(frames: tuple[Frame, ...] | list[Frame]) -> list[Frame]:
    """User frames, innermost first; frames outside site-packages lead (the user's own code)."""
    return [f for f in reversed(frames) if is_user_frame(f)]


def innermost_user(chain: list[Frame]) -> Frame | None:
    own = [f for f in chain if "-packages/" not in f.file]
    return own[0] if own else (chain[0] if chain else None)


def short_message(msg: str, limit: int = 100) -> str:
    """The gist of an exception message: its first sentence, without gloo's "[/path/pair.cc:553] "
    source prefix (the whole message stays in the JSON)."""
    text = (
        re.sub(r"^\s*\[[^\]]*\.(cc|cpp|h|hpp):\d+\]\s*", "", msg.strip()).splitlines()[0]
        if msg.strip()
        else ""
    )
    m = re.match(r"(.+?[.!?])(\s|$)", text)
    text = m.group(1) if m else text
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clock(ns: int) -> str:
    """A wall-clock time in UTC, as the logs of a cluster usually are."""
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%H:%M:%S UTC")


def rank_list(ranks: list[int]) -> str:
    """'rank 2', 'ranks 0-3', 'ranks 0, 2, 5'."""
    ranks = sorted(set(ranks))
    if not ranks:
        return "no rank"
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks))


# ---------------------------------------------------------------- result types


@dataclass
class StackLine:
    file: str
    line: int
    function: str
    code: str = ""
    lint: list[dict[str, str]] = field(default_factory=list)  # {"code": "DDP301", "message": ...}

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class RankReport:
    """One rank's state, in the user's terms."""

    rank: int
    host: str | None
    kind: str  # collective | p2p | python | died | missing | done
    state: str  # "waiting in all_reduce #4 for 8.0 s", "in Python, in no collective", ...
    operation: str | None = None
    seq: int | None = None
    waiting_s: float | None = None
    since_ns: int | None = None
    location: str | None = None  # path:line of the innermost user frame
    chain: list[StackLine] = field(default_factory=list)  # innermost first
    exception: str | None = None
    culprit: bool = False


@dataclass
class GroupFinding:
    group: str
    kind: str  # missing | mismatch_op | mismatch_size | mismatch_dtype | mismatch_refused | p2p_cycle | p2p_waits | stalled
    seq_kind: str  # collective | p2p
    seq: int | None
    operation: str
    summary: str
    details: list[str]
    culprit_ranks: list[int]
    waiting_ranks: list[int]
    created_ns: int = 0


@dataclass
class Grid:
    """Ranks x operations of one process group: ``cells[i][j]`` is rank ``ranks[i]`` at ``columns[j]``.
    States: done, waiting, mismatch, never (did not get there), unknown (no evidence / buffer wrapped)."""

    group: str
    columns: list[str]
    seqs: list[int]
    ranks: list[int]
    cells: list[list[str]]
    problem_seq: int | None = None


@dataclass
class HangDiagnosis:
    verdict: str
    kind: str  # a GroupFinding kind, or "none"
    group: str | None
    operation: str | None
    seq: int | None
    seq_kind: str | None
    culprit_ranks: list[int]
    waiting_ranks: list[int]
    findings: list[GroupFinding]
    ranks: list[RankReport]
    missing_ranks: list[int]
    world_size: int
    crash: str | None = None
    grids: list[Grid] = field(default_factory=list)
    watch: dict[str, Any] | None = None
    sources: list[str] = field(default_factory=list)
    why: str | None = None  # why the watch ended the job: the certain deadlock, or the rhythm auto read
    heading: str = "Hang"  # Hang | Crash | Exit: what the job's end was
    verify: list[RunFinding] = field(default_factory=list)  # what `watch --verify` found while the job ran


    def rank(self, r: int) -> RankReport | None:
        return next((x for x in self.ranks if x.rank == r), None)

    @property
    def culprits(self) -> list[RankReport]:
        return [x for x in self.ranks if x.culprit]

    def to_dict(self) -> dict[str, Any]:
        return {"format": DIAGNOSIS_FORMAT, "version": 1, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HangDiagnosis:
        """The inverse of to_dict (KeyError/TypeError on a malformed document)."""
        d = {k: v for k, v in d.items() if k not in ("format", "version")}

        def rank_report(x: dict) -> RankReport:
            return RankReport(**{**x, "chain": [StackLine(**s) for s in x.get("chain", [])]})

        return cls(
            **{
                **d,
                "findings": [GroupFinding(**f) for f in d["findings"]],
                "ranks": [rank_report(x) for x in d["ranks"]],
                "grids": [Grid(**g) for g in d.get("grids", [])],
                "verify": [RunFinding(**v) for v in d.get("verify", [])],
            }
        )


# ---------------------------------------------------------------- where each rank is


@dataclass(frozen=True)
class _Blocked:
    call: str  # the torch.distributed function the main thread is in
    peer: int | None  # send: dst, recv: src (global ranks)
    seq: int | None = None  # p2p_seq_id, when the Flight Recorder has the entry (NCCL)


def _blocked_call(ev: RankEvidence) -> _Blocked | None:
    t = ev.main_thread
    if t is None:
        return None
    for f in reversed(t.frames):
        # a wait on an isend/irecv request names its operation in its locals (watch --verify)
        request = f.locals.get("request") if f.locals.get("request") in P2P_CALLS else None
        if request or (_DC10D.search(f.file.replace("\\", "/")) and not f.function.startswith("_")):
            peer = None
            for key in ("dst", "src"):
                if f.locals.get(key, "").lstrip("-").isdigit():
                    peer = int(f.locals[key])
            seq = f.locals.get("p2p_seq", "")
            return _Blocked(request or f.function, peer, int(seq) if seq.isdigit() else None)
    return None


def _lines(frames: list[Frame]) -> list[StackLine]:
    return [StackLine(f.file, f.line, f.function, f.code) for f in frames]


def _place(ev: RankEvidence) -> tuple[str | None, list[StackLine]]:
    """(path:line, chain innermost first) of the main thread, or of the exception it died of, or
    (torch's pickled dumps: no thread stacks) of the call of its oldest unfinished operation."""
    if ev.exception:
        frames = ev.exception.frames
    elif ev.main_thread:
        frames = ev.main_thread.frames
    else:
        pend = _last_pending(list(ev.flight_recorder.entries)) if ev.flight_recorder else None
        frames = pend.frames if pend else ()
    chain = user_chain(frames)
    top = innermost_user(chain)
    if top is not None:  # the innermost user frame leads the chain
        chain = [top] + [f for f in chain if f is not top]
    return (top.where if top else None), _lines(chain)


def _last_pending(ops: list[FROp]) -> FROp | None:
    pending = [o for o in ops if not o.retired]
    return min(pending, key=lambda o: (o.time_created_ns, o.record_id)) if pending else None


def _base_report(ev: Evidence, r: int) -> RankReport:
    e = ev.ranks.get(r)
    if e is None:
        end = ev.watch.ends.get(r) if ev.watch else None
        if end is not None:
            return RankReport(r, ev.host(r), "missing", f"{end.text()} (no evidence)")
        code = ev.watch.exit_codes.get(r) if ev.watch else None
        extra = f" (exit code {code})" if code is not None else ""
        return RankReport(
            r, ev.host(r), "missing", f"gave no evidence{extra}: killed, lost or never started?"
        )
    loc, chain = _place(e)
    rep = RankReport(r, ev.host(r), "python", "", location=loc, chain=chain)
    if e.exception:
        rep.kind = "died"
        rep.exception = f"{e.exception.type}: {e.exception.message}".strip()
        rep.state = f"died: {e.exception.type}: {short_message(e.exception.message)}"
        return rep
    ops = list(e.flight_recorder.entries) if e.flight_recorder else []
    pend = _last_pending(ops)
    blocked = _blocked_call(e)
    if pend is not None:
        rep.kind = "p2p" if pend.is_p2p else "collective"
        rep.operation, rep.seq, rep.since_ns = pend.op, pend.seq, pend.time_created_ns
        # torch's own dumps carry no capture time: the watch's detection time stands in
        captured = e.captured_ns or (ev.watch.detected_ns if ev.watch else None)
        if captured and pend.time_created_ns:
            rep.waiting_s = max(0.0, (captured - pend.time_created_ns) / 1e9)
        since = f" for {rep.waiting_s:.1f} s" if rep.waiting_s is not None else ""
        if pend.time_created_ns:
            since += f" (since {clock(pend.time_created_ns)})"
        rep.state = f"waiting in {pend.op} #{pend.seq}{since}"
    elif blocked is not None:
        rep.kind = "p2p" if blocked.call in P2P_CALLS else "collective"
        rep.operation = blocked.call
        peer = (
            ""
            if blocked.peer is None
            else (f" to rank {blocked.peer}" if "send" in blocked.call else f" from rank {blocked.peer}")
        )
        rep.state = f"blocked in {blocked.call}{peer}"
    elif e.main_thread is not None:
        rep.state = "in Python, in no collective"
    elif e.kind == "torch-fr":
        rep.kind, rep.state = "done", "in no collective (torch's dump holds no Python stack)"
    else:
        rep.kind, rep.state = "done", "no stack recorded"
    return rep


# ---------------------------------------------------------------- matching by sequence number


def _groups(ev: Evidence) -> dict[str, dict[int, list[FROp]]]:
    out: dict[str, dict[int, list[FROp]]] = {}
    for r, e in ev.ranks.items():
        if e.flight_recorder is None:
            continue
        for op in e.flight_recorder.entries:
            out.setdefault(op.pg_name, {}).setdefault(r, []).append(op)
    return out


def _members(ev: Evidence, name: str, desc: str, by_rank: dict[int, list[FROp]]) -> list[int]:
    if desc == "default_pg":
        return list(range(ev.world_size))
    for e in ev.ranks.values():
        for g in e.flight_recorder.groups if e.flight_recorder else ():
            if g.name == name and g.ranks:
                return sorted(g.ranks)
    return sorted(by_rank)


def _sig_text(op: FROp, kind: str) -> str:
    if kind == "mismatch_dtype":
        return "/".join(map(str, op.input_dtypes)) or "no tensors"
    sizes = "x".join(str(d) for d in op.input_sizes[0]) if op.input_sizes and op.input_sizes[0] else "scalar"
    if len(op.input_sizes) > 1:
        sizes = ", ".join("x".join(map(str, s)) for s in op.input_sizes)
    dt = op.input_dtypes[0] if op.input_dtypes else ""
    return f"{sizes} {dt}".strip() if op.input_sizes else "no tensors"


def _who(ranks: list[int], ev: Evidence) -> str:
    hosts = sorted({h for r in ranks if (h := ev.host(r))})
    return rank_list(ranks) + (f" ({', '.join(hosts)})" if hosts else "")


def _refused_in(ev: Evidence, ranks: list[int], op: str) -> list[int]:
    """Ranks among ``ranks`` that died of an exception raised inside c10d's ``op`` itself: they did
    call it, and the backend refused it (gloo checks sizes before it records the operation)."""
    out = []
    for r in ranks:
        e = ev.ranks.get(r)
        if e is None or e.exception is None or _PEER_LOSS.search(e.exception.message):
            continue
        if any(_DC10D.search(f.file.replace("\\", "/")) and f.function == op for f in e.exception.frames):
            out.append(r)
    return out


def refused_text(ev: Evidence, ranks: list[int]) -> str:
    e = ev.ranks[ranks[0]].exception
    return short_message(e.message, 140) if e else ""


def _gone(ev: Evidence, ranks: list[int]) -> str:
    """What became of ranks without evidence: how they ended when the watch saw it, else unknown."""
    ends = {ev.watch.ends[r].text() for r in ranks if ev.watch and r in ev.watch.ends}
    if len(ends) == 1 and all(ev.watch and r in ev.watch.ends for r in ranks):
        return next(iter(ends))
    return "gave no evidence"


def _pick_culprits(groups: dict[Any, list[int]], prev: tuple | None, key) -> list[int]:
    """The ranks off the common path: the minority; on a tie, those whose op breaks from what every
    rank did just before (a loop that ended early); otherwise every rank involved."""
    sizes = Counter({k: len(v) for k, v in groups.items()})
    top = max(sizes.values())
    majority = [k for k, n in sizes.items() if n == top]
    if len(majority) == 1:
        return sorted(r for k, v in groups.items() if k != majority[0] for r in v)
    if prev is not None:
        cont = [k for k in majority if key(k) == prev]
        if len(cont) == 1:
            return sorted(r for k, v in groups.items() if k != cont[0] for r in v)
    return sorted(r for v in groups.values() for r in v)


def _collective_finding(
    ev: Evidence, group: str, desc: str, by_rank: dict[int, list[FROp]]
) -> GroupFinding | None:
    members = _members(ev, group, desc, by_rank)
    # a rank with a Flight Recorder record but no entry here never called anything in this group
    with_fr = [r for r in members if r in ev.ranks and ev.ranks[r].flight_recorder is not None]
    ops = {r: {o.collective_seq_id: o for o in by_rank.get(r, []) if not o.is_p2p} for r in with_fr}
    if not any(ops.values()):
        return None
    hi = {r: max(m, default=0) for r, m in ops.items()}
    name = desc or group
    prev_sig: tuple | None = None
    for s in sorted({s for m in ops.values() for s in m}):
        present = {r: m[s] for r, m in ops.items() if s in m}
        never = sorted(r for r in ops if s > hi[r])
        created = min(o.time_created_ns for o in present.values())
        by_op: dict[str, list[int]] = {}
        for r, o in present.items():
            by_op.setdefault(o.op, []).append(r)
        waiting = sorted(r for r, o in present.items() if not o.retired)
        if len(by_op) > 1:
            culprits = _pick_culprits(by_op, prev_sig[0] if prev_sig else None, key=lambda k: k)
            pairs = sorted(by_op.items(), key=lambda kv: (not set(kv[1]) & set(culprits), kv[1]))
            vs = " vs ".join(f"{op} on {_who(rs, ev)}" for op, rs in pairs)
            summary = f"ranks called different collectives at #{s} ({' vs '.join(op for op, _ in pairs)})"
            details = [f"{name} #{s}: {vs}"]
            if never:
                details.append(f"{_who(never, ev)} never got to #{s}")
            return GroupFinding(
                name,
                "mismatch_op",
                "collective",
                s,
                "/".join(op for op, _ in pairs),
                summary,
                details,
                culprits,
                [r for r in waiting if r not in culprits],
                created,
            )
        op = next(iter(by_op))
        by_sig: dict[tuple, list[int]] = {}
        for r, o in present.items():
            by_sig.setdefault(o.signature, []).append(r)
        if len(by_sig) > 1:
            kind = "mismatch_size" if len({sig[1] for sig in by_sig}) > 1 else "mismatch_dtype"
            culprits = _pick_culprits(by_sig, prev_sig, key=lambda k: k)
            word = "sizes" if kind == "mismatch_size" else "dtypes"
            sample = {tuple(rs): present[rs[0]] for rs in by_sig.values()}
            vs = " vs ".join(f"{_sig_text(o, kind)} on {_who(list(rs), ev)}" for rs, o in sample.items())
            summary = f"ranks called {op} #{s} with different {word}"
            return GroupFinding(
                name,
                kind,
                "collective",
                s,
                op,
                summary,
                [f"{name} {op} #{s}: {vs}"],
                culprits,
                [r for r in waiting if r not in culprits],
                created,
            )
        refused = _refused_in(ev, never, op)
        if never and refused:
            # they did call it: the backend rejected their arguments before Flight Recorder saw it
            sizes = " vs ".join(f"{_sig_text(o, 'mismatch_size')} on {_who([r], ev)}" for r, o in sorted(present.items()))
            summary = f"ranks disagree on {op} #{s}: the backend refused the call of {rank_list(refused)}"
            details = [f"{name} {op} #{s}: {sizes}; {_who(refused, ev)}: {refused_text(ev, refused)}"]
            return GroupFinding(name, "mismatch_refused", "collective", s, op, summary, details, refused,
                                waiting, created)  # fmt: skip
        if never:
            summary = f"{rank_list(never)} never called {op} #{s}"
            waits = _who(sorted(present), ev)
            details = [f"{name} {op} #{s}: {waits} called it; {_who(never, ev)} did not"]
            return GroupFinding(
                name, "missing", "collective", s, op, summary, details, never, waiting, created
            )
        prev_sig = next(iter(by_sig))
    # every rank with evidence agrees up to its last entry
    last = max(hi.values())
    pending = {r: ops[r][last] for r in ops if last in ops[r] and not ops[r][last].retired}
    no_ev = [r for r in members if r not in with_fr]
    if pending and no_ev:
        op = next(iter(pending.values())).op
        what = (
            _gone(ev, no_ev)
            if all(r not in ev.ranks for r in no_ev)
            else "left no Flight Recorder record"
        )
        verb = "waits" if len(pending) == 1 else "wait"
        summary = f"{_who(no_ev, ev)} {what}; {rank_list(sorted(pending))} {verb} in {op} #{last}"
        return GroupFinding(
            name,
            "missing",
            "collective",
            last,
            op,
            summary,
            [f"{name} {op} #{last}: no Flight Recorder entries from {rank_list(no_ev)}"],
            no_ev,
            sorted(pending),
            min(o.time_created_ns for o in pending.values()),
        )
    if pending and len(pending) == len(ops) == len(members):
        op = next(iter(pending.values())).op
        summary = f"every rank is inside {op} #{last} and it does not complete"
        details = [
            (
                f"{name} {op} #{last}: all ranks called it with the same arguments: not a program "
                "mismatch; suspect the network or a peer process"
            )
        ]
        return GroupFinding(
            name,
            "stalled",
            "collective",
            last,
            op,
            summary,
            details,
            [],
            sorted(pending),
            min(o.time_created_ns for o in pending.values()),
        )
    return None


# ---------------------------------------------------------------- p2p: waits-for walk


def _fr_blocked_p2p(ev: Evidence, groups: dict[str, dict[int, list[FROp]]]) -> dict[int, _Blocked]:
    """Each rank's oldest unfinished p2p entry (NCCL records them; gloo does not), peer made global."""
    out: dict[int, _Blocked] = {}
    for name, by_rank in groups.items():
        desc = next((o.pg_desc for ops in by_rank.values() for o in ops if o.pg_desc), "")
        members = _members(ev, name, desc, by_rank)
        for r, ops in by_rank.items():
            pend = _last_pending([o for o in ops if o.is_p2p])
            if pend is None or r in out:
                continue
            lp = pend.local_peer
            peer = members[lp] if lp is not None and 0 <= lp < len(members) else None
            out[r] = _Blocked(pend.op, peer, pend.p2p_seq_id)
    return out


def _p2p_finding(
    ev: Evidence, reports: dict[int, RankReport], from_fr: dict[int, _Blocked]
) -> GroupFinding | None:
    blocked = {r: b for r, e in ev.ranks.items() if (b := _blocked_call(e)) and b.call in P2P_CALLS}
    for r, b in from_fr.items():  # the entry knows the peer and seq even where the stack does not
        if b.call in P2P_CALLS and (r not in blocked or blocked[r].peer is None):
            blocked[r] = b
    if not blocked:
        return None

    def waits_for(r: int) -> int | None:
        b = blocked[r]
        if b.peer is None:
            return None
        other = blocked.get(b.peer)
        # a matching pair (r sends to p while p receives from r) is moving, not waiting
        if other and other.peer == r and ("send" in b.call) != ("send" in other.call):
            return None
        return b.peer

    calls = Counter("send" if "send" in b.call else "recv" for b in blocked.values())
    for start in sorted(blocked):
        path = [start]
        while True:
            nxt = waits_for(path[-1])
            if nxt is None:
                break
            if nxt in path:
                cycle = path[path.index(nxt) :] + [nxt]
                call = blocked[cycle[0]].call
                text = "\u2192".join(map(str, cycle))
                match = "recv" if "send" in call else "send"
                same = all(blocked[r].call == call for r in cycle[:-1])
                if same and len(cycle) - 1 == ev.world_size:
                    head = f"every rank is blocked in {call} with no matching {match}"
                elif same:
                    head = f"{rank_list(cycle[:-1])} are each blocked in {call} with no matching {match}"
                else:
                    head = f"{rank_list(cycle[:-1])} wait on each other in send/recv"
                summary = f"{head}: a cycle {text}"
                seqs = {blocked[r].seq for r in cycle[:-1]} - {None}
                return GroupFinding(
                    "default_pg",
                    "p2p_cycle",
                    "p2p",
                    min(seqs) if seqs else None,
                    call,
                    summary,
                    [],
                    sorted(cycle[:-1]),
                    [],
                    0,
                )
            if nxt not in blocked:  # the chain ends at a rank that is not in p2p at all
                target = reports.get(nxt)
                state = target.state if target else "gave no evidence"
                b = blocked[path[-1]]
                summary = (
                    f"rank {path[-1]} waits in {b.call} on rank {nxt}, which never called the matching "
                    f"{'recv' if 'send' in b.call else 'send'}"
                )
                details = [f"rank {nxt} {state}"] + [f"rank {r} {reports[r].state}" for r in path]
                return GroupFinding(
                    "default_pg", "p2p_waits", "p2p", b.seq, b.call, summary, details, [nxt], sorted(path), 0
                )
            path.append(nxt)
    if len(calls) == 1 and len(blocked) == ev.world_size:
        call = next(iter(calls))
        match = "recv" if call == "send" else "send"
        summary = f"every rank is blocked in {call} with no matching {match} (peers not recorded)"
        return GroupFinding("default_pg", "p2p_cycle", "p2p", None, call, summary, [], sorted(blocked), [], 0)
    return None


def _stack_finding(ev: Evidence, reports: dict[int, RankReport]) -> GroupFinding | None:
    """Without any Flight Recorder entry (FR off, or it failed): the collective each main thread is
    blocked in, from its stack. No sequence numbers, so only "who is not there" and "who called what"."""
    blocked = {r: b.call for r, e in ev.ranks.items() if (b := _blocked_call(e)) and b.call not in P2P_CALLS}
    if not blocked:
        return None
    calls: dict[str, list[int]] = {}
    for r, call in blocked.items():
        calls.setdefault(call, []).append(r)
    absent = sorted(r for r in range(ev.world_size) if r not in blocked)
    if len(calls) > 1:
        culprits = _pick_culprits(calls, None, key=lambda k: k)
        vs = " vs ".join(f"{c} on {_who(rs, ev)}" for c, rs in sorted(calls.items(), key=lambda kv: kv[1]))
        summary = f"ranks are blocked in different collectives ({' vs '.join(sorted(calls))})"
        return GroupFinding(
            "default_pg",
            "mismatch_op",
            "collective",
            None,
            "/".join(sorted(calls)),
            summary,
            [f"from the stacks (no Flight Recorder entries): {vs}"],
            culprits,
            sorted(r for r in blocked if r not in culprits),
            0,
        )
    if not absent:
        return None
    call = next(iter(calls))
    summary = f"{rank_list(absent)} never called {call}"
    waits = f"{_who(sorted(blocked), ev)} wait in {call}"
    details = [f"from the stacks (no Flight Recorder entries): {waits}; {_who(absent, ev)} not"]
    return GroupFinding(
        "default_pg", "missing", "collective", None, call, summary, details, absent, sorted(blocked), 0
    )


# A rank that loses its peer dies of the peer, not of its own bug (gloo: "Connection closed by peer",
# "Connection reset by peer", "Application timeout caused pair closure"; NCCL: aborted communicator).
# A CUDA error raised where the host next waits on the GPU, not where the kernel was launched (seen on
# an H200: a device-side assert in the loss surfaced at `loss.item()` four lines later).
_CUDA_LATE = re.compile(
    r"CUDA kernel errors might be asynchronously reported|"
    r"CUDA error: (device-side assert|an illegal memory access|unspecified launch failure)"
)
_PEER_LOSS = re.compile(
    r"closed by peer|reset by peer|pair closure|Timed out waiting|remote (worker|process)|"
    r"communicator was aborted|Broken pipe|Socket Timeout|NCCL (error|Error).*remote",
    re.IGNORECASE,
)


def _last_op(ev: Evidence, ranks: list[int]) -> tuple[str, int] | None:
    """The newest collective these ranks entered: (op, seq)."""
    last = [
        max(e.flight_recorder.entries, key=lambda o: o.collective_seq_id)
        for r in ranks
        if (e := ev.ranks.get(r)) and e.flight_recorder and e.flight_recorder.entries
    ]
    if not last:
        return None
    top = max(last, key=lambda o: o.collective_seq_id)
    return top.op, top.collective_seq_id


def _death_finding(ev: Evidence, reports: dict[int, RankReport]) -> GroupFinding | None:
    """When the Flight Recorder shows no disagreement: ranks that died of their own error, else ranks
    that gave no evidence (killed: SIGKILL, OOM) with the ranks that lost them, else the lost ones."""
    died = [r for r, x in reports.items() if x.kind == "died"]
    lost = [r for r in died if _PEER_LOSS.search(reports[r].exception or "")]
    own = [r for r in died if r not in lost]
    missing = ev.missing_ranks
    where = _last_op(ev, lost)
    at = f" in {where[0]} #{where[1]}" if where else ""
    op, seq = where if where else ("", None)
    if own:
        late = [r for r in own if _CUDA_LATE.search(reports[r].exception or "")]
        details = [
            f"{_who([r], ev)}: CUDA reports a kernel's failure at the next call that waits for the GPU, "
            "so the kernel that failed ran at or before the line named; run again with "
            "CUDA_LAUNCH_BLOCKING=1 to stop at the kernel itself"
            for r in late
        ]
        return GroupFinding(
            "default_pg", "died", "collective", None, "", f"{_who(own, ev)} died", details, own, [], 0
        )
    if missing:
        gone = _gone(ev, missing)
        summary = f"{_who(missing, ev)} {gone}" + (" (killed?)" if gone == "gave no evidence" else "")
        details = [f"{_who(lost, ev)} lost the connection to it{at}"] if lost else []
        if lost:
            summary += f"; {rank_list(lost)} lost the connection{at}"
        return GroupFinding("default_pg", "missing", "collective", seq, op, summary, details, missing, [], 0)
    if lost:
        summary = f"{_who(lost, ev)} lost a peer{at}"
        return GroupFinding("default_pg", "died", "collective", seq, op, summary, [], lost, [], 0)
    return None


# ---------------------------------------------------------------- NCCL RAS's report

RAS_STATE = "NCCL RAS: "
_RAS_KIND = {"mismatch": "mismatch_count", "dead": "died", "incomplete": "missing"}


def _ras_findings(ev: Evidence, reports: dict[int, RankReport]) -> list[GroupFinding]:
    """NCCL RAS's view as findings. Culprits are the job's ranks only for the largest communicator
    (the default process group's, whose ranks are global); a sub-communicator's findings name its
    ranks by host and pid in the text. Ranks without evidence of their own get RAS's state."""
    if ev.ras is None:
        return []
    from ddpdoctor.model.hang.ras import ras_findings

    world = ev.ras.world_size
    for c in ev.ras.comms:
        if c.size != world:
            continue
        for r in c.ranks:
            rep = reports.get(r.rank)
            if rep is not None and r.rank not in ev.ranks:
                rep.state = f"{RAS_STATE}launched {r.total} collectives"
        for m in c.missing:
            rep = reports.get(m.rank)
            if rep is not None and m.rank not in ev.ranks:
                rep.state = RAS_STATE + ("considered dead (unreachable)" if m.dead else "gave no data")
    out = []
    for f in ras_findings(ev.ras):
        culprits = [r for r in f.culprits if r in reports] if f.global_ranks else []
        waiting = [r for r in f.waiting if r in reports] if f.global_ranks else []
        out.append(GroupFinding(f"NCCL communicator {f.comm}", _RAS_KIND[f.kind], "collective", None,
                                f.operation, f.summary, list(f.details), culprits, waiting, 0))  # fmt: skip
    return out


# ---------------------------------------------------------------- grid for the TUI


def _grid(
    ev: Evidence, group: str, desc: str, by_rank: dict[int, list[FROp]], finding: GroupFinding | None
) -> Grid:
    members = _members(ev, group, desc, by_rank)
    ops = {r: {o.collective_seq_id: o for o in by_rank.get(r, []) if not o.is_p2p} for r in members}
    seqs = sorted({s for m in ops.values() for s in m})
    if finding and finding.seq is not None and finding.seq in seqs:
        i = seqs.index(finding.seq)
        seqs = seqs[max(0, i - GRID_COLUMNS + 3) : i + 3]
    seqs = seqs[-GRID_COLUMNS:]
    culprits = set(finding.culprit_ranks) if finding else set()
    columns = []
    for s in seqs:
        names = Counter(m[s].op for m in ops.values() if s in m)
        columns.append(f"#{s} {names.most_common(1)[0][0]}")
    cells = []
    for r in members:
        m = ops.get(r, {})
        row = []
        for s in seqs:
            if s in m:
                mism = (
                    finding is not None
                    and finding.kind.startswith("mismatch")
                    and s == finding.seq
                    and r in culprits
                )
                row.append("mismatch" if mism else ("done" if m[s].retired else "waiting"))
            elif m and s > max(m):
                row.append("never")
            else:
                row.append("unknown")
        cells.append(row)
    return Grid(desc or group, columns, seqs, members, cells, finding.seq if finding else None)


# ---------------------------------------------------------------- the diagnosis


def _crash_note(ev: Evidence, f: GroupFinding | None, reports: dict[int, RankReport]) -> str | None:
    """Why the job crashed, when the evidence explains it: on gloo a size/type mismatch is not a hang
    but a crash (seen here, torch 2.13); a mismatch of different collectives hangs instead."""
    if f is None or not f.kind.startswith("mismatch") or f.kind == "mismatch_refused":
        return None  # refused: the backend's own words are in the finding
    if (ev.watch is not None and ev.watch.mismatches) or any(
        e.exception and "Detected mismatch between collectives" in e.exception.message for e in ev.ranks.values()
    ):
        return None  # torch's fingerprint check raised before the backend ran it: no gloo abort
    crashed = (ev.watch is not None and ev.watch.outcome == "crash") or any(
        x.kind == "died" for x in reports.values()
    )
    if f.kind == "mismatch_op" and not crashed:
        return None  # different collectives mostly hang (barrier vs all_reduce did, here)
    gloo = any(
        o.profiling_name.startswith("gloo:")
        for e in ev.ranks.values()
        if e.flight_recorder
        for o in e.flight_recorder.entries
    )
    if not gloo:
        return "on NCCL a collective mismatch hangs or silently corrupts the result"
    what = "explains the crash" if crashed else "crashes the job"
    return (
        f"this mismatch {what}: on gloo, ranks that disagree on a collective's size end in "
        '"Received data size doesn\'t match expected size" (SIGABRT) on one rank and '
        '"Connection reset by peer" on the others'
    )


def _fingerprint_finding(ev: Evidence, reports: dict[int, RankReport]) -> GroupFinding | None:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL (`watch --verify`) named the mismatch before it ran: every
    rank's operation, shape and dtype at torch's own collective count."""
    from ddpdoctor.model.hang.verify import combine

    if ev.watch is not None and ev.watch.mismatches:
        return _verify_mismatch(ev, min(ev.watch.mismatches, key=lambda m: m.seq))
    msgs = {r: e.exception.message for r, e in ev.ranks.items() if e.exception}
    fps, differ = combine(msgs)
    if len(fps) < 2:
        return None
    by_sig: dict[tuple, list[int]] = {}
    for r, fp in fps.items():
        by_sig.setdefault((fp.op, fp.shape, fp.dtypes), []).append(r)
    if len(by_sig) < 2:
        return None
    culprits = _pick_culprits(by_sig, None, key=lambda k: k)
    seq = min(fp.seq for fp in fps.values())
    ops = sorted({fp.op for fp in fps.values()})
    kind = "mismatch_op" if len(ops) > 1 else (
        "mismatch_size" if len({fp.shape for fp in fps.values()}) > 1 else "mismatch_dtype")
    parts = " while ".join(f"{_who(sorted(rs), ev)} call{'s' if len(rs) == 1 else ''} {fps[rs[0]].text()}"
                           for _, rs in sorted(by_sig.items(), key=lambda kv: kv[1]))  # fmt: skip
    summary = f"collective #{seq} differs across ranks (found by TORCH_DISTRIBUTED_DEBUG=DETAIL): {parts}"
    details = [f"torch: {differ}"] if differ else []
    return GroupFinding("default_pg", kind, "collective", seq, "/".join(ops), summary, details, culprits,
                        sorted(r for r in fps if r not in culprits), 0)  # fmt: skip


def _verify_mismatch(ev: Evidence, m) -> GroupFinding:
    """`watch --verify` compared the ranks' fingerprints of one collective before running it."""
    culprits = m.culprits()
    details = [f"{_who([p.rank], ev)}: {p.text()} at {p.where()}" for p in m.prints]
    summary = f"{m.message()} (found by watch --verify before the collective ran)"
    return GroupFinding(m.group, m.kind, "collective", m.seq, m.operation(), summary, details, culprits,
                        sorted(p.rank for p in m.prints if p.rank not in culprits), 0)  # fmt: skip


def diagnose(ev: Evidence) -> HangDiagnosis:
    reports = {r: _base_report(ev, r) for r in range(ev.world_size)}
    findings: list[GroupFinding] = []
    fp = _fingerprint_finding(ev, reports)
    if fp is not None:
        findings.append(fp)
    groups = _groups(ev)
    grids = []
    for name in sorted(groups, key=lambda n: (n != "0", n)):
        by_rank = groups[name]
        desc = next((o.pg_desc for ops in by_rank.values() for o in ops if o.pg_desc), "")
        f = _collective_finding(ev, name, desc, by_rank)
        if f is not None:
            findings.append(f)
        grids.append(_grid(ev, name, desc, by_rank, f))
    # a p2p deadlock shows only in the stacks on gloo; look for it when no collective disagrees
    if not [f for f in findings if f.kind != "stalled"]:
        p = _p2p_finding(ev, reports, _fr_blocked_p2p(ev, groups))
        if p is not None:
            findings.insert(0, p)
    findings.sort(key=lambda f: (f.kind == "stalled", f.created_ns or 0))
    if not findings and not groups:
        f = _stack_finding(ev, reports)
        if f is not None:
            findings.append(f)
    ras = _ras_findings(ev, reports)
    if not findings:
        f = _death_finding(ev, reports)
        own_death = f is not None and f.kind == "died"  # a rank's own exception names more than RAS can
        findings += ([f] if own_death else []) + ras + ([f] if f is not None and not own_death else [])
    else:
        findings += ras
    top = findings[0] if findings else None
    for f in findings[:1]:
        for r in f.culprit_ranks:
            if r in reports:
                reports[r].culprit = True
    watch = None
    if ev.watch:
        w = ev.watch
        watch = {
            "detected_after_s": (w.detected_ns - w.started_ns) / 1e9
            if w.detected_ns and w.started_ns
            else None,
            "command": list(w.command),
            "outcome": w.outcome,
            "hang_after_s": w.hang_after_s,
            "trigger": w.trigger,
            "exit_codes": {str(k): v for k, v in w.exit_codes.items()},
            "ends": {str(k): e.text() for k, e in sorted(w.ends.items())},
            "certain": w.certain,
            "hang_after_auto": w.hang_after_auto,
        }
    return HangDiagnosis(
        verdict=_verdict(top, reports, ev)
        if top
        else "no hang found: the ranks agree on every operation recorded",
        kind=top.kind if top else "none",
        group=top.group if top else None,
        operation=top.operation if top else None,
        seq=top.seq if top else None,
        seq_kind=top.seq_kind if top else None,
        culprit_ranks=list(top.culprit_ranks) if top else [],
        waiting_ranks=list(top.waiting_ranks) if top else [],
        findings=findings,
        ranks=[reports[r] for r in sorted(reports)],
        missing_ranks=ev.missing_ranks,
        world_size=ev.world_size,
        crash=_crash_note(ev, top, reports),
        grids=grids,
        watch=watch,
        sources=list(ev.sources),
        why=_why(ev),
        heading=_heading(ev, top, reports),
    )


def _why(ev: Evidence) -> str | None:
    """Why the watch ended the job when it did: a certain deadlock, or --hang-after auto's reading."""
    w = ev.watch
    if w is None:
        return None
    if w.certain and w.certain.get("reason"):
        confirm = w.certain.get("confirm_s")
        seen = f" (seen unchanged for {confirm:g} s)" if isinstance(confirm, (int, float)) else ""
        return f"certain{seen}: {w.certain['reason']}"
    auto = (w.trigger or {}).get("auto")
    if isinstance(auto, dict) and w.trigger:
        usual = auto.get("usual_s")
        rhythm = (f"this job usually completes one every {usual:.2g} s" if isinstance(usual, (int, float))
                  else "no rhythm seen yet")  # fmt: skip
        return (f"no operation completed for {w.trigger.get('waiting_s', 0):.0f} s; {rhythm} "
                f"(--hang-after auto: {auto.get('threshold_s')} s, never below {auto.get('floor_s')} s)")  # fmt: skip
    return None


def _heading(ev: Evidence, top: GroupFinding | None, reports: dict[int, RankReport]) -> str:
    """What the job's end was, as it was: Crash when a culprit died (an exception, a fatal signal),
    whoever ended the job after; Exit when the job ended by itself and every rank's end was an
    ordinary exit; otherwise Hang."""
    w = ev.watch
    culprits = [reports[r] for r in (top.culprit_ranks if top else []) if r in reports]
    killed = [r for r in (top.culprit_ranks if top else []) if w is not None and r in w.ends
              and w.ends[r].how in ("signal", "exception")]  # fmt: skip
    if any(x.kind == "died" for x in culprits) or killed or (top is not None and top.kind == "died"):
        return "Crash"
    if w is not None and w.outcome in ("crash", "finished"):
        if w.ends and all(e.how == "exit" for e in w.ends.values()):
            return "Exit"
        return "Crash"
    return "Hang"


def _verdict(f: GroupFinding, reports: dict[int, RankReport], ev: Evidence) -> str:
    """One line: the finding, and where the (first) culprit is."""
    text = f.summary
    if f.kind.startswith("mismatch") or f.kind == "missing":
        text += f" ({f.group})"
    c = [reports[r] for r in f.culprit_ranks if r in reports]
    if len(c) == 1:
        x = c[0]
        host = f" on {x.host}" if x.host else ""
        if x.kind == "missing":
            if "gave no evidence" not in text and not x.state.startswith(RAS_STATE):
                text += f"; rank {x.rank}{host} gave no evidence"
        elif x.kind == "died":
            died = f"rank {x.rank}{host} died of {x.state.removeprefix('died: ')}" + (
                f" at {x.location}" if x.location else ""
            )
            text = died if f.kind == "died" else f"{text}; {died}"
        elif x.kind == "python":
            text += f"; rank {x.rank}{host} is in Python at {x.location}" if x.location else ""
        elif x.location:
            text += f"; rank {x.rank}{host} is at {x.location}"
    return text
