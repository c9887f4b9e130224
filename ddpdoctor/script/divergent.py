"""Where the ranks part ways: the collectives and DDP forwards some ranks reach and the others do not.

The per-rank interpreter gives each rank's sequence of collectives and DDP forwards for world sizes
2..8. ``partings(m)`` compares them and returns, per place to change, the call some ranks make and
the others do not (``Parting``); ``by_rank_test`` groups them by the rank test that keeps the other
ranks away (one cause). DDP301 reports the groups that hold a collective; DDP308 those made only of
DDP forwards, which communicate only when the model has buffers to broadcast.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from difflib import SequenceMatcher

from ddpdoctor.script.ranks import rank_guard


@dataclass(frozen=True)
class Parting:
    event: object  # interp.Event: the call some ranks reach and the others do not
    run: object  # the Run (world size) that shows it
    ranks: tuple[int, ...]  # the ranks that reach it
    alt: tuple  # (ranks, the event they reach instead, or None), for the other ranks
    guard: object  # ranks.Guard that lets only ``ranks`` through, when the file shows one
    anchor: ast.AST  # the line to change

    @property
    def forward(self) -> bool:
        return self.event.kind == "ddp_forward"

    @property
    def inferred(self) -> bool:
        """A forward that a callee's name implies (``evaluate(ddp_model)`` of another module)."""
        return self.forward and bool(self.event.arg)

    @property
    def place(self) -> tuple[int, int]:
        return self.anchor.lineno, getattr(self.anchor, "col_offset", 0)


def ranks_text(rs) -> str:
    """``rank 0`` or ``ranks 1, 2``: who reaches a call, as findings say it."""
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))


def guard_text(g) -> str:
    """Which rank test lets only some ranks through, when the file shows one."""
    if g is None:
        return ""
    try:
        test = ast.unparse(g.test)
    except Exception:  # noqa: BLE001 - a node ast cannot unparse: name the line only
        test = "a rank test"
    if len(test) > 40:
        test = test[:37] + "..."
    return f" (rank test `{test}` on line {g.line})"


def partings(m) -> list[Parting]:
    """One Parting per place to change; a collective wins over a forward at the same place."""
    if not (m.uses_distributed or m.ddp_params or m.sync_calls or m.ddp_wrapper_calls or m.handed_ddp_attrs):
        return []
    if m.pinned_rank is not None:
        return []  # one rank's own program (rank=0 hard-coded): the others' code is not here
    cached = m.__dict__.get("_partings")
    if cached is not None:
        return cached
    reported: set[int] = set()
    places: dict[tuple[int, int], Parting] = {}
    for run in m.runs:
        if not run.complete:
            continue
        # a collective on a group of its own may well have only these ranks as members (a group made
        # by rank 0 with outside workers, a pipeline stage's group): it is not compared
        # (a forward in the arm opposite one that unwraps the same model runs the plain model)
        seqs = [
            [
                e
                for e in t.events
                if (e.kind == "ddp_forward" and (e.path is not None or not m.in_plain_arm(e.node)))
                or (e.kind == "collective" and e.arg is None)
            ]
            for t in run.traces
        ]
        # some ranks call collectives in a `while` loop of their own (a signalling protocol: wait
        # for rank 0's broadcasts until it says stop): how many, the walk cannot count, so it
        # cannot say that the counts part. Unknown is not guilty.
        # A loop of DDP forwards alone that some ranks run and the others never enter (rank 0's
        # sampling `while len(tokens) < n: model(tokens)`) is no such protocol: however many times
        # it runs, the others run none of it.
        open_ranks: dict[int, set[int]] = {}
        talking: set[int] = set()  # loops with a collective in them
        for r, s in enumerate(seqs):
            for e in s:
                if e.open_loop is not None:
                    open_ranks.setdefault(id(e.open_loop), set()).add(r)
                    if e.kind == "collective":
                        talking.add(id(e.open_loop))
        counted = set().union(*open_ranks.values()) if open_ranks else set()
        if any(
            len(rs) < len(seqs) and (loop in talking or len(counted) == len(seqs))
            for loop, rs in open_ranks.items()
        ):
            continue
        for _ in range(10):  # after each divergence, drop the odd call out and compare the rest
            found = _first_divergence(seqs)
            if found is None:
                break
            i, ranks, groups = found
            ev = _odd_call(seqs, ranks, i)
            # drop this call everywhere (loops repeat it) and compare what is left
            seqs = [[e for e in s if e.node is not ev.node] for s in seqs]
            if id(ev.node) in reported:
                continue
            reported.add(id(ev.node))
            p = Parting(
                ev, run, tuple(ranks), tuple(groups), m.rank_guard(m.event_anchor(ev)), _anchor(m, ev)
            )
            old = places.get(p.place)
            if old is None or (old.forward and not p.forward):
                places[p.place] = p
    m.__dict__["_partings"] = out = consequences_dropped(list(places.values()))
    return out


def consequences_dropped(parts: list[Parting]) -> list[Parting]:
    """A call no rank test keeps from the others, in a walk where one does, parts the ranks only
    because that test put them out of step (rank 0 left a stage early and reached the next stage's
    barrier alone): one cause, reported where the test is."""
    guarded = {p.run.entry for p in parts if p.guard is not None}
    return [p for p in parts if p.guard is not None or p.run.entry not in guarded]


def by_rank_test(parts: list[Parting]) -> list[list[Parting]]:
    """One cause, one finding: the calls a single rank test keeps from the other ranks (an early
    `return` on rank 0 before a whole training loop), first the one the walk saw earliest in the
    file (before those only a callee's name implies)."""
    groups: dict[object, list[Parting]] = {}
    for p in parts:
        g = p.guard
        if g is not None:
            key: object = (g.path, id(g.test))
        elif p.alt and all(other is not None for _rs, other in p.alt):
            # no rank test in sight, but the other ranks are held at the same call (a DDP forward
            # of a model that only rank 0 swapped for its EMA copy): the collectives rank 0 makes
            # meanwhile are one parting, not one finding each
            key = ("alt", tuple(id(other.node) for _rs, other in p.alt))
        else:
            key = id(p)
        groups.setdefault(key, []).append(p)
    # the other view of such a parting: the held ranks' DDP forward, which the ranks that moved on
    # never run (no rank test either), is the same cause: one group, one finding
    for key, ps in list(groups.items()):
        if not (isinstance(key, tuple) and key[0] == "alt" and len(key[1]) == 1):
            continue
        for other_key, others in list(groups.items()):
            if other_key is key or other_key not in groups:
                continue
            if all(q.guard is None and q.forward and id(q.event.node) == key[1][0] for q in others):
                ps.extend(groups.pop(other_key))
    out = []
    for ps in groups.values():
        ps.sort(key=lambda p: (p.inferred, *p.place))
        out.append(ps)
    return out


def _anchor(m, ev):
    """The line to change: the outermost call of the chain (in this file) that sits under a rank
    test of its own function, i.e. where this rank's path leaves the others'. A helper's collective
    is right for the callers every rank reaches; the call made under ``if rank == 0`` is the bug.
    Without such a call, where the collective is."""
    if ev.chain:
        calls = _calls_by_line(m)
        for line, path in zip(ev.chain, ev.chain_paths or (None,) * len(ev.chain)):
            if path is not None and path != m.path:
                continue
            for call in calls.get(line, ()):
                if rank_guard(m, call, follow_callers=False) is not None:
                    return call
    return m.event_anchor(ev)


def _calls_by_line(m) -> dict[int, list]:
    out = m.__dict__.get("_divergent_calls_by_line")
    if out is None:
        out = {}
        for c, _q in m.calls:
            out.setdefault(c.lineno, []).append(c)
        m.__dict__["_divergent_calls_by_line"] = out
    return out


def _first_divergence(seqs):
    keys = [[e.op for e in s] for s in seqs]
    if all(k == keys[0] for k in keys):
        return None
    i = 0
    while all(len(k) > i for k in keys) and len({k[i] for k in keys}) == 1:
        i += 1
    groups: dict[object, list[int]] = {}
    for r, k in enumerate(keys):
        groups.setdefault(k[i] if i < len(k) else None, []).append(r)
    # the op taken by the fewest ranks is the branch that parts from the others
    _op, ranks = min(((o, rs) for o, rs in groups.items() if o is not None), key=lambda x: (len(x[1]), x[1]))
    alt = [(rs, seqs[rs[0]][i] if o is not None else None) for o, rs in groups.items() if rs != ranks]
    return i, ranks, alt


def _identity(e) -> tuple:
    """One call site reached one way: the same collective reached through another chain of calls
    is another call."""
    return (id(e.node), e.chain, e.chain_paths)


def _odd_call(seqs, ranks: list[int], i: int):
    """The call that ranks ``ranks`` make and the others do not. Counting by operation finds where
    the sequences part (index ``i``), but not which call is extra: rank 0 calling a helper's barrier
    once more than the others makes its *last* barrier the first unmatched one. Aligning the two
    sequences call site by call site (and chain by chain) finds the extra call itself; where the
    ranks reach different sites of the same operation in step (the rank-0-first idiom: ranks != 0
    wait at one barrier, rank 0 at the next), those pair up by operation. Without an extra call,
    the call at ``i``."""
    mine = seqs[ranks[0]]
    other_rank = next((r for r in range(len(seqs)) if r not in ranks), None)
    if other_rank is not None:
        extra = _unmatched(mine, seqs[other_rank])
        if extra:
            return mine[extra[0]]
    return mine[i]


def _unmatched(mine, theirs) -> list[int]:
    a = [_identity(e) for e in mine]
    b = [_identity(e) for e in theirs]
    out: list[int] = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "delete":
            out.extend(range(i1, i2))
        elif tag == "replace":
            ops = [theirs[j].op for j in range(j1, j2)]
            for k in range(i1, i2):
                if mine[k].op in ops:
                    ops.remove(mine[k].op)
                else:
                    out.append(k)
    return out


FORWARD_ONLY_HINT = "run rank-0-only evaluation on the unwrapped model (`model.module`), or on every rank"


def forward_only(m, buffers: ast.AST | None = None):
    """(anchor, message, chain) for each rank test that keeps only DDP forwards from the other
    ranks (DDP301 reports those that keep a collective too). ``buffers``: the node that shows the
    model has buffers to broadcast, named in the message; None when the file does not show it."""
    for group in by_rank_test(partings(m)):
        if not all(p.forward for p in group):
            continue
        first, rest = group[0], group[1:]
        ev = first.event
        where = f"line {ev.node.lineno}" if ev.path is None else f"{ev.path.rsplit('/', 1)[-1]}:{ev.node.lineno}"
        what = f"inside `{ev.arg}(...)`, which is handed the DDP wrapper," if ev.arg else f"on {where}"
        if ev.chain:
            what += f" (reached through {m.event_chain(ev)})"
        also = f"; the same rank test keeps lines {', '.join(str(p.anchor.lineno) for p in rest)} too" if rest else ""
        if buffers is None:
            why = "if the model has buffers (BatchNorm statistics), the forward broadcasts them"
        else:
            why = (
                f"the model has buffers (line {buffers.lineno}: `{ast.unparse(buffers)[:40]}`), so the "
                "forward broadcasts them"
            )
        message = (
            f"the DDP model's forward {what} is run by {ranks_text(first.ranks)} only"
            f"{guard_text(first.guard)}: {why} and waits for ranks that are elsewhere{also}"
        )
        yield first.anchor, message, (m.event_chain(ev) if ev.chain else None)
