"""DDP201: point-to-point operations that deadlock.

## What it does
Simulates each rank's blocking `send`/`recv` (and `isend`/`irecv` + `wait`) sequence, as the per-rank
interpreter computes it for world sizes 2..8, and reports when the ranks cannot all finish: two ranks
both sending (or both receiving) first, a `recv` whose peer never sends, counts that do not pair up,
or a peer rank outside the world. The message names the ranks and lines.

In pipeline utilities, where the ranks are not known, it also reports:
- the two halves of a neighbour exchange (one with the next stage, one with the previous stage,
  as "send forward, receive backward" and "send backward, receive forward") that both complete
  their send before posting the receive, followed through the file's own helpers (a blocking
  `send`, an `isend` waited at once, or a `batch_isend_irecv` of sends only that is waited). Stage
  parity ordering, one batch holding both directions, or a receive posted before the send stay quiet;
- a helper that prepares what is sent and keeps a single tensor whatever a condition says, but
  appends a list's items only when the condition holds: the peer posts a receive for every tensor.

## Why is this bad?
Blocking p2p is a rendezvous: NCCL's `send` returns only once the peer's `recv` is running (gloo
too, beyond tiny messages). A cycle of ranks each waiting for the other hangs the job until the
collective timeout — typically 10 to 30 minutes of a whole cluster.

## Example
```python
peer = 1 - rank
dist.send(t, dst=peer)   # both ranks send first
dist.recv(t, src=peer)
```

## Use instead
```python
ops = [dist.P2POp(dist.isend, t, peer), dist.P2POp(dist.irecv, buf, peer)]
for req in dist.batch_isend_irecv(ops):
    req.wait()
```
or order by rank: even ranks send first, odd ranks receive first.
"""

from __future__ import annotations

from ddpdoctor.script.interp import UNKNOWN
from ddpdoctor.script.p2p import P2POp, simulate
from ddpdoctor.script.p2p_exchange import neighbour_deadlocks, split_points
from ddpdoctor.script.p2p_payload import lost_payloads

CODE = "DDP201"
TITLE = "Point-to-point deadlock"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def _verb(op) -> str:
    return "sends to" if "send" in op.op else "receives from"


def _describe(rank, op) -> str:
    ev = op.ref
    where = f"line {ev.node.lineno}"
    if op.op == "wait":
        return f"rank {rank} waits for a request ({where})"
    peer = "any rank" if op.peer is None else f"rank {op.peer}"
    return f"rank {rank} {_verb(op)} {peer} ({where})"


def _diagnose(out) -> tuple[str, str]:
    """Why the ranks are stuck, and what to do about it."""
    waits_on_finished = [s for s in out.stuck if s.op.peer in out.finished]
    if waits_on_finished:
        s = waits_on_finished[0]
        other = "send" if "recv" in s.op.op else "recv"
        return (
            f"the sends and receives do not pair up (rank {s.op.peer} finished without the matching {other})",
            "make every send on one rank match a recv on its peer, in the same order and number",
        )
    all_send = all("send" in s.op.op for s in out.stuck)
    all_recv = all("recv" in s.op.op for s in out.stuck)
    if len(out.stuck) > 1 and (all_send or all_recv):
        return (
            "every blocked rank is " + ("sending" if all_send else "receiving") + " first",
            (
                "use dist.batch_isend_irecv (or isend/irecv then wait), or let even ranks send first "
                "and odd ranks receive first"
            ),
        )
    return (
        "the sends and receives do not pair up",
        "make every send match a recv on its peer, in the same order",
    )


def _lost_payloads(m):
    """A helper normalising what is sent drops list items its single-tensor path keeps."""
    for lp in lost_payloads(m.functions, m.aliases):
        b = lp.builder
        yield m.finding(
            CODE,
            b.drop,
            f"`{b.fn.name}` keeps a single tensor when `{b.cond}` is false (line {b.keep.lineno}) "
            f"but drops such items from a list, and its result is sent (line {lp.send.lineno}): "
            "the peer posts a recv for every tensor it expects and waits forever",
            SEVERITY,
            hint=f"append the item unchanged when `{b.cond}` is false (an `else:` branch)",
            lines=[b.drop.lineno, lp.call.lineno, lp.send.lineno],
        )


def _neighbour_exchanges(m, simulated: set[int]):
    """Both halves of a neighbour exchange complete their send before they post the receive
    (``simulated``: lines the per-rank simulation already reported: the same cause, said once)."""
    for down, up in neighbour_deadlocks(m.tree, m.functions, m.aliases, m.source):
        send, recv = split_points(down)
        if {e.chain[-1].lineno for e in (down.send, up.send)} & simulated:
            continue
        yield m.finding(
            CODE,
            send,
            f"`{down.fn.name}` (with the next stage) and `{up.fn.name}` (with the previous stage) "
            f"both complete their send (line {send.lineno}) before posting the receive "
            f"(line {recv.lineno}): neighbour stages running them at the same time each wait in "
            "the send for a receive the other has not posted",
            SEVERITY,
            hint="issue the send and the receive together in one dist.batch_isend_irecv, or let "
            "even stages send first and odd stages receive first",
            lines=sorted({send.lineno, recv.lineno, down.fn.lineno, up.fn.lineno}),
        )


def _one_side_of_a_role_split(run, seqs) -> bool:
    """A helper nobody in the file calls, run on every rank, in which only some ranks would talk to
    themselves: a worker's ``recv(src=0)`` or the host's ``for r in range(1, W): send(dst=r)``.
    Its callers pick the ranks that run it (the others never do), so this is no verdict."""
    if run.entry == "<module>":
        return False
    selfish = {r for r, ops in enumerate(seqs) if any(o.peer == r for o in ops if o.op != "wait")}
    talking = {r for r, ops in enumerate(seqs) if ops}
    return bool(selfish) and selfish != talking


def check(m):
    simulated: set[int] = set()
    for f in _simulated(m):
        simulated.update(f.evidence.get("lines", ()))
        simulated.add(f.location.line)
        yield f
    if m.mentions("isend", "send"):
        yield from _lost_payloads(m)
        if m.mentions("recv") and m.mentions("next", "prev"):
            yield from _neighbour_exchanges(m, simulated)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _simulated(m):
    """Deadlocks of the ranks the interpreter could follow (concrete peers)."""
    if not m.dist_calls("send", "recv", "isend", "irecv"):
        return
    if m.pinned_rank is not None:
        return  # its peers run other programs: what they post is unknown, so no verdict
    reported: set[int] = set()
    outcomes = []
    for run in m.runs:
        if not run.complete:
            continue
        seqs = []
        for t in run.traces:
            ops = [P2POp(e.op, e.peer, e.req, e) for e in t.events if e.kind in ("p2p", "wait")]
            seqs.append(ops)
        if any(o.peer is UNKNOWN for ops in seqs for o in ops) or not any(seqs):
            continue  # a peer we cannot compute: no verdict
        if _one_side_of_a_role_split(run, seqs):
            continue
        outcomes.append((run, simulate(seqs)))
    # an exchange that pairs up in every power-of-two world and only breaks in others (recursive
    # halving: `partner = rank ^ (size // 2)`) is written for those worlds: unknown, not guilty
    # (where it breaks, a peer outside the world shows that design; one whose peers all exist but
    # do not pair up, `partner = rank + 1 if rank % 2 == 0 else rank - 1` leaving the last of 3
    # ranks waiting, is a bug at any size)
    pow2_ok = {
        run.entry
        for run, _out in outcomes
        if all(o.ok for r, o in outcomes if r.entry == run.entry and _power_of_two(r.world_size))
        and any(_power_of_two(r.world_size) for r, _o in outcomes if r.entry == run.entry)
        and all(o.ok or o.bad_peer for r, o in outcomes if r.entry == run.entry)
    }
    for run, out in outcomes:
        if out.ok or run.entry in pow2_ok:
            continue
        W = run.world_size
        if out.bad_peer:
            b = out.bad_peer[0]
            node = b.op.ref.node
            if id(node) not in reported:
                reported.add(id(node))
                yield m.finding(
                    CODE,
                    m.event_anchor(b.op.ref),
                    f"with world size {W}, rank {b.rank} {_verb(b.op)} "
                    f"rank {b.op.peer}, which is {'itself' if b.op.peer == b.rank else 'not in the world'}",
                    SEVERITY,
                    world_size=W,
                    ranks=[b.rank],
                )
            continue
        first = out.stuck[0]
        node = first.op.ref.node
        if id(node) in reported:
            continue
        reported.add(id(node))
        parts = "; ".join(_describe(s.rank, s.op) for s in out.stuck)
        kind, hint = _diagnose(out)
        yield m.finding(
            CODE,
            m.event_anchor(first.op.ref),
            f"p2p deadlock with world size {W}: {kind}: {parts}",
            SEVERITY,
            hint=hint,
            world_size=W,
            ranks=[s.rank for s in out.stuck],
            lines=sorted({s.op.ref.node.lineno for s in out.stuck}),
        )
