"""DDP301: a collective reached by some ranks only.

## What it does
Compares every rank's sequence of collectives (all_reduce, broadcast, barrier, all_gather, ...,
new_group) and DistributedDataParallel forwards, as the per-rank interpreter computes them for world
sizes 2..8 through rank-dependent branches (`rank == 0`, `rank % 2`, `local_rank`, `get_rank()`,
`RANK`), early returns and calls to the file's own functions. Reports the first call where the ranks
part ways. Branches where every rank reaches a matching call are fine. A handler registered on some
ranks only (pytorch-ignite's `trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda _:
evaluator.run(val_loader))` under `if local_rank == 0:`) runs on those ranks only: its collectives
and DDP forwards count there.

## Why is this bad?
A collective completes only when every rank of the group calls it. If rank 0 alone calls
`dist.barrier()` (or runs the DDP model, whose forward/backward synchronise), it waits forever and the
job hangs until the timeout, with no error pointing at the cause.

## Example
```python
if rank == 0:
    dist.barrier()         # only rank 0 waits
    evaluate(ddp_model)    # DDP forward on rank 0 only
```

## Use instead
```python
if rank == 0:
    evaluate(ddp_model.module)   # the unwrapped model does no communication
dist.barrier()                   # every rank reaches it
```
"""

from __future__ import annotations

import ast
from dataclasses import replace
from difflib import SequenceMatcher

from ddpdoctor.script import ranks as rank_facts

CODE = "DDP301"
TITLE = "Collective reached by some ranks only"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def _label(ev, m=None) -> str:
    name = "the DDP model's forward" if ev.kind == "ddp_forward" else f"`{ev.op}`"
    if ev.kind == "ddp_forward" and ev.arg:  # inside a function of another module handed the wrapper
        name = f"the DDP model's forward inside `{ev.arg}(...)`, which is handed the DDP wrapper,"
    if ev.library:
        name = f"`{ev.library}` (a {ev.op} of every rank inside it)"
    via = ""
    if ev.chain:
        last = ev.chain_paths[-1] if ev.chain_paths else None
        at = f"line {ev.chain[-1]}" if last is None else f"{last.rsplit('/', 1)[-1]}:{ev.chain[-1]}"
        via = f" (reached through the call on {at})"
    if m is not None and ev.chain:
        via = f" (reached through {m.event_chain(ev)})"
    where = f"line {ev.node.lineno}" if ev.path is None else f"{ev.path.rsplit('/', 1)[-1]}:{ev.node.lineno}"
    return f"{name} on {where}{via}"


def _guard_text(g) -> str:
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


def _ranks(rs: list[int]) -> str:
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))


def check(m):
    if not (m.uses_distributed or m.ddp_params or m.sync_calls or m.ddp_wrapper_calls or m.handed_ddp_attrs):
        return
    if m.pinned_rank is not None:
        return  # one rank's own program (rank=0 hard-coded): the others' code is not here
    reported: set[int] = set()
    # one cause, one finding: a rank-0-only call that reaches several collectives is one finding at
    # that call, as severe as the worst of them (a DDP forward may hang; an all_reduce will)
    places: dict[tuple[int, int], object] = {}
    guards: dict[tuple[int, int], object] = {}
    inferred: set[tuple[int, int]] = set()
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
        open_ranks: dict[int, set[int]] = {}
        for r, s in enumerate(seqs):
            for e in s:
                if e.open_loop is not None:
                    open_ranks.setdefault(id(e.open_loop), set()).add(r)
        if any(len(rs) < len(seqs) for rs in open_ranks.values()):
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
            guard = m.rank_guard(m.event_anchor(ev))
            f = _finding(m, run, ev, ranks, groups, guard)
            place = (f.location.line, f.location.col)
            if place not in places or f.severity.rank > places[place].severity.rank:
                places[place] = f
                guards[place] = guard
            if ev.kind == "ddp_forward" and ev.arg:
                inferred.add(place)  # a forward its callee's name implies, not one the walk saw
    yield from _one_per_rank_test(places, guards, inferred)


def _one_per_rank_test(places: dict, guards: dict, inferred: set = frozenset()):
    """One cause, one finding: the collectives a single rank test keeps from the other ranks (an
    early `return` on rank 0, say, before a whole training loop) are one finding, at the first of
    them that the walk saw (before those only a callee's name implies), naming the others' lines."""
    by_guard: dict[object, list] = {}
    for place, f in places.items():
        g = guards.get(place)
        by_guard.setdefault((g.path, id(g.test)) if g is not None else id(f), []).append(f)
    for fs in by_guard.values():
        fs.sort(key=lambda f: ((f.location.line, f.location.col) in inferred, f.location.line, f.location.col))
        first, rest = fs[0], fs[1:]
        if rest:
            worst = max(fs, key=lambda f: f.severity.rank)
            lines = ", ".join(str(f.location.line) for f in rest)
            first = replace(
                first,
                severity=worst.severity,
                message=f"{first.message}; the same rank test keeps the other ranks from the "
                f"collectives on line{'s' if len(rest) > 1 else ''} {lines} too",
            )
        yield first


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
                if rank_facts.rank_guard(m, call, follow_callers=False) is not None:
                    return call
    return m.event_anchor(ev)


def _calls_by_line(m) -> dict[int, list]:
    out = m.__dict__.get("_ddp301_calls_by_line")
    if out is None:
        out = {}
        for c, _q in m.calls:
            out.setdefault(c.lineno, []).append(c)
        m.__dict__["_ddp301_calls_by_line"] = out
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


def _finding(m, run, ev, ranks, alt, guard):
    instead = "; ".join(
        f"{_ranks(rs)} "
        + ("reach" if len(rs) > 1 else "reaches")
        + (" no further collective" if other is None else f" {_label(other)} instead")
        for rs, other in alt
    )
    others = [r for r in range(run.world_size) if r not in ranks]
    sev = "warning" if ev.kind == "ddp_forward" else SEVERITY
    return m.finding(
        CODE,
        _anchor(m, ev),
        f"{_label(ev, m)} is reached by {_ranks(ranks)} only{_guard_text(guard)} (world size "
        f"{run.world_size}); {instead}: "
        + (
            f"{'they' if len(ranks) > 1 else 'it'} may wait forever (a DDP forward broadcasts the "
            "model's buffers, BatchNorm statistics, from rank 0 and needs every rank for it)"
            if ev.kind == "ddp_forward"
            else f"{'they' if len(ranks) > 1 else 'it'} will wait forever"
        ),
        sev,
        hint="make every rank reach the same collectives in the same order (move it out of the "
        "rank-dependent branch, or use the unwrapped `model.module` for rank-0-only evaluation)",
        world_size=run.world_size,
        ranks=ranks,
        other_ranks=others,
    )
