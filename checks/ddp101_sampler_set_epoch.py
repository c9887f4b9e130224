"""DDP101: DistributedSampler whose set_epoch is never called.

## What it does
Finds a shuffling `DistributedSampler` in a script with an epoch loop where `set_epoch` is never
called on any sampler (the loop may run over a progress bar or `enumerate` made of the loader), and
one whose only `set_epoch` calls sit under a rank test (a rank-0 progress-bar branch) while every
rank draws from it. Also a `set_epoch` that runs once before an engine iterates the loader for many
epochs (`trainer.run(loader, max_epochs=n)`), and a script that never calls `set_epoch` on the
training loader it gets from another file's factory told the run is distributed
(`get_train_loader(..., distributed)`) and iterates every epoch, and `set_epoch` chosen by a rank
test (`s.set_epoch(e) if local_rank > 0 else None`). A missing `set_epoch` is reported at the epoch
loop, where the call goes, when that loop is beside the loader (else at the sampler); the chain
names the sampler, the loader and the pass.

## Why is this bad?
DistributedSampler seeds its shuffle with `seed + epoch`. Without `set_epoch(epoch)` every epoch
uses the same permutation, so each rank sees its shard in the same order every epoch — the shuffle
you asked for silently does nothing and convergence suffers.

## Example
```python
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, sampler=sampler)
for epoch in range(epochs):
    for batch in loader:
        ...
```

## Use instead
```python
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    for batch in loader:
        ...
```
"""

from __future__ import annotations

import ast
from pathlib import Path

from ddpdoctor.script import ranks
from ddpdoctor.script.analysis import names_eval_split
from ddpdoctor.script.branches import untaken_by_callers
from ddpdoctor.script.flow import Flow, loops_around, repeats
from ddpdoctor.script.interp import is_accelerate_prepare
from ddpdoctor.script.loaders import (
    PROJECT_SAMPLER,
    distributed_factory,
    loader_calls,
    made_by_factory,
    passes,
    sampler_calls,
)
from ddpdoctor.script.names import dotted, name_words
from ddpdoctor.script.writers import one_rank_side

CODE = "DDP101"
TITLE = "DistributedSampler.set_epoch is never called"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def _epoch_pass(m, sampler_call):
    """(loader call, loop over it, chain of (file, line) that repeats that loop) when the project
    iterates the sampler's loader once per epoch; None when the loader goes to code it does not show,
    or to another file that calls set_epoch."""
    made = loader_calls(m, Flow(m, [sampler_call]))
    if not made:
        return None
    loader = min(made, key=lambda c: abs(c.lineno - sampler_call.lineno))
    loaders = Flow(m, made)
    if any(
        is_accelerate_prepare(c) and any(loaders.carries(a) for a in c.args) for c in m.method_calls("prepare")
    ):
        # accelerate's prepared loader sets the epoch of the sampler it holds at each pass
        return None
    repeated = [(loop, again) for loop in passes(m, loaders) if (again := repeats(m, loop)) is not None]
    if repeated:
        # the pass written in the epoch loop itself before one in a function it calls (`validate`)
        loop, again = min(repeated, key=lambda la: not _beside_epoch_loop(m, *la))
        return loader, loop, [(m.path, ln) for ln in (*again, loop.lineno)]
    # (a helper the project mode can read is followed into its file first: the chain names its loop)
    elsewhere = _epoch_pass_elsewhere(m, loader, loaders)
    if elsewhere is not None:
        return elsewhere
    endless = [c for c, _q in m.calls if _cycles(m, c, loaders)]
    if endless:
        endless = min(endless, key=lambda c: abs(c.lineno - loader.lineno))  # this sampler's own
        return loader, endless, [(m.path, endless.lineno)]
    return None


# words of a helper's name that say it draws from its loader without end (`cycle`, `inf_iterator`,
# `itr_restart`, `InfiniteDataLoader`)
_ENDLESS_WORDS = frozenset(("cycle", "cyclic", "inf", "infinite", "forever", "endless", "restart"))


def _cycles(m, call: ast.Call, loaders: Flow) -> bool:
    """``cycle(loader)``, ``inf_iterator(loader)``: a helper of this file's imports (itertools' or a
    project's) named for drawing from the loader endlessly, pass after pass, with no place between
    them for ``set_epoch``. A helper this file defines is walked instead (its passes are seen), and
    one of the project's other files is trusted when that file calls ``set_epoch``."""
    if not call.args or not loaders.carries(call.args[0]) or not _names_endless(call):
        return False
    name = _short_name(call)
    if name != "cycle" and any(d.name == name for d in m.nodes(ast.FunctionDef, ast.ClassDef)):
        return False  # defined here: its loops are followed as any pass is
    found = m.resolve_def(dotted(call.func))
    return found is None or not found[0].method_calls("set_epoch")


def _short_name(call: ast.Call) -> str:
    return (dotted(call.func) or "").rsplit(".", 1)[-1]


# stems that say it in a word run together with another (`infiniteloop`, `cycleloader`); not `inf`,
# which starts `inference`
_ENDLESS_STEMS = ("cycle", "infinite", "forever", "endless")


def _names_endless(call: ast.Call) -> bool:
    words = [w.lower() for w in name_words(_short_name(call))]
    return any(w in _ENDLESS_WORDS or w.startswith(_ENDLESS_STEMS) for w in words)


def _beside_epoch_loop(m, loop, again) -> bool:
    return _epoch_loop_beside(m, again[0], loop) is not None


def _epoch_loop_beside(m, line: int, node: ast.AST):
    """The loop starting on ``line`` when it is in ``node``'s function (where `set_epoch` goes), else
    None."""
    epoch_loop = _line_node(m, line)
    if epoch_loop is None or m.enclosing_function(epoch_loop) is not m.enclosing_function(node):
        return None
    return epoch_loop


def _anchor_loop(m, line: int, node: ast.AST):
    """Where the report goes when not at the sampler: the loop that repeats the pass, where
    `set_epoch` goes, when it is beside ``node`` or, in another function of this file, when it is
    plainly the epoch loop (``for epoch in range(...)``); a ``while True:`` or a step loop elsewhere
    says less than the sampler line does."""
    beside = _epoch_loop_beside(m, line, node)
    if beside is not None:
        return beside
    loop = _line_node(m, line)
    if isinstance(loop, ast.For) and "epoch" in ast.unparse(loop.target).lower():
        return loop
    return None


def _claim(epoch_loop, taken: set[int]):
    """The epoch loop to report at, unless another sampler's report took it already (two samplers,
    one epoch loop: one report each, the second at its own sampler)."""
    if epoch_loop is None or epoch_loop.lineno in taken:
        return None
    taken.add(epoch_loop.lineno)
    return epoch_loop


def _handed_on(m, loaders: Flow):
    """(call, parameter name, other module, def) for each call that hands a loader to a function of
    another file of the project."""
    for call, _q in m.calls:
        if not any(loaders.carries(a) for a in (*call.args, *(k.value for k in call.keywords))):
            continue
        found = m.resolve(dotted(call.func))
        if found is None:
            continue
        other, fn = found
        params = [*fn.args.posonlyargs, *fn.args.args]
        for i, a in enumerate(call.args):
            if i < len(params) and loaders.carries(a):
                yield call, params[i].arg, other, fn
        names = {p.arg for p in (*params, *fn.args.kwonlyargs)}
        for k in call.keywords:
            if k.arg in names and loaders.carries(k.value):
                yield call, k.arg, other, fn


def _epoch_pass_elsewhere(m, loader, loaders: Flow):
    if m.project is None:
        return None
    for call, param, other, fn in _handed_on(m, loaders):
        if other.method_calls("set_epoch"):
            return None  # that file takes care of the epochs (or at least knows about them)
        there = Flow(other, [], {param: fn.lineno})
        for loop in passes(other, there):
            if not any(a is fn for a in other.ancestors(loop)):
                continue
            again_there = repeats(other, loop)
            if again_there is not None and again_there[0] != loop.lineno:
                chain = [(m.path, call.lineno), *((other.path, ln) for ln in (*again_there, loop.lineno))]
                return loader, loop, chain
            again_here = repeats(m, call)
            if again_here is not None or again_there is not None:
                here = [(m.path, ln) for ln in (again_here or ())]
                return loader, loop, [*here, (m.path, call.lineno), (other.path, loop.lineno)]
    return None


def _made(m, call):
    """(where the sampler is made, whether it shuffles there: False, or None when it may) for the
    ``DistributedSampler(...)`` call: the call itself, or each call of the file's function that
    builds and returns it (the factory's caller picks the shuffle)."""
    sites = made_by_factory(m, call)
    if sites is None:
        return [(call, m.keyword(call, "shuffle"))]
    return sites


def _no_shuffle(value) -> bool:
    return isinstance(value, ast.Constant) and value.value is False


def _shuffling_passes(m, samplers):
    """(sampler made, its loader, the chain to its per-epoch pass) for each shuffling training sampler
    whose loader is iterated once per epoch."""
    for call in samplers:
        if m.looks_like_eval(call):
            continue  # an evaluation sampler does not need set_epoch
        if untaken_by_callers(m, call):
            continue  # made in a branch no call of its function takes (`if kind == "toy":`)
        reseeded = m.keyword(call, "seed") is not None and repeats(m, call) is not None
        for made, shuffle in _made(m, call):
            if _no_shuffle(shuffle) or (made is not call and m.looks_like_eval(made)):
                continue  # an unshuffled sampler does not need set_epoch
            found = _epoch_pass(m, made)
            if found is None:
                continue  # the loader goes to code in another file, which may well call set_epoch
            if reseeded and not _made_outside_pass_loops(m, call, found[1]):
                continue  # a new sampler each epoch, seeded by the caller
            yield made, *found


def _made_outside_pass_loops(m, sampler: ast.Call, loop: ast.AST) -> bool:
    """The sampler is remade by a loop of its own function that does not hold the pass over its
    loader (``for phase, opt in datasets.items():`` builds the loaders once; the epochs come after):
    the epoch loop reuses one sampler."""
    fn = m.enclosing_function(sampler)
    if m.enclosing_function(loop) is not fn:
        return False
    around = [a for a in m.ancestors(sampler) if isinstance(a, (ast.For, ast.AsyncFor, ast.While))]
    around = [a for a in around if m.enclosing_function(a) is fn]
    holding = {id(loop), *(id(a) for a in m.ancestors(loop))}
    return bool(around) and not any(id(a) in holding for a in around)


def _named_not_called(m):
    """``self.train_loader.sampler.set_epoch`` as a statement of its own: the method is looked up,
    never called (the parentheses and the epoch are missing), so the sampler keeps epoch 0."""
    for st in m.nodes(ast.Expr):
        if isinstance(st.value, ast.Attribute) and st.value.attr == "set_epoch":
            yield m.finding(
                CODE,
                st,
                f"`{ast.unparse(st.value)}` names the method but never calls it: the sampler stays at "
                "epoch 0 and every epoch shuffles the same way",
                SEVERITY,
                hint=f"call it: `{ast.unparse(st.value)}(epoch)`",
            )


def check(m):
    named = list(_named_not_called(m))
    if named:
        yield from named
        return  # one cause: the call that is missing its parentheses
    yield from _set_once_before_engine(m)  # an engine's run loops over the epochs out of sight
    yield from _set_by_rank_choice(m)
    samplers = sampler_calls(m)
    if not m.nodes(ast.For, ast.AsyncFor, ast.While):
        return
    if not samplers:
        yield from _helper_loaders(m)
        return
    calls = m.method_calls("set_epoch")
    if not calls:
        taken: set[int] = set()  # epoch loops already holding a report: the next sampler's goes to it
        for made, loader, loop, again in _shuffling_passes(m, samplers):
            yield _finding(m, made, loader, loop, again, taken=taken)
        return
    if any(isinstance(t, ast.Attribute) and t.attr == "epoch" for a in m.nodes(ast.Assign) for t in a.targets):
        return  # `sampler.epoch = epoch` elsewhere may reseed the other ranks: unknown, not guilty
    guards = [m.rank_guard(c) for c in calls]
    if all(guards) and all(_few_ranks_side(m, c, g) for c, g in zip(calls, guards)):
        yield from _set_on_some_ranks(m, samplers, calls, guards)
        return
    yield from _pass_without_set_epoch(m, samplers, calls)


def _pass_without_set_epoch(m, samplers, calls):
    """The file calls ``set_epoch``, but not in the loop that repeats this pass over a shuffling
    sampler's loader (``if mode == "iter": ... set_epoch ... elif mode == "epoch": for epoch in
    ...: for batch in loader:``): that way of training shuffles every epoch alike. Quiet when some
    ``set_epoch`` runs from code this file does not show being called (a hook)."""
    setting = _set_epoch_loops(m, calls)
    if setting is None:
        return
    for made, loader, loop, again in _shuffling_passes(m, samplers):
        if not isinstance(loop, (ast.For, ast.AsyncFor)):
            continue
        around = loops_around(m, loop)
        if not around or around & setting:
            continue
        yield _finding(m, made, loader, loop, again, elsewhere=True)
        return


def _set_epoch_loops(m, calls) -> frozenset[int] | None:
    """Ids of the loops that run one of the ``set_epoch`` calls again; None when some call runs
    from code this file does not show being called (a hook): then any loop may reshuffle."""
    around_calls = [loops_around(m, c) for c in calls]
    if any(not around for around in around_calls):
        return None
    return frozenset().union(*around_calls)


def _set_by_rank_choice(m):
    """``sampler.set_epoch(epoch) if local_rank > 0 else None`` in an epoch loop every rank runs:
    the ranks on one side reshuffle, the others replay the first epoch's order, so from the second
    epoch on their shards come from two permutations (samples repeated and skipped). Whatever made
    the sampler (a helper elsewhere), ``set_epoch`` says it is a distributed one."""
    for call in m.method_calls("set_epoch"):
        choice = m.parents.get(call)
        if not (isinstance(choice, ast.IfExp) and call is not choice.test):
            continue
        other = choice.orelse if call is choice.body else choice.body
        if isinstance(other, ast.Call) and isinstance(other.func, ast.Attribute) and other.func.attr == "set_epoch":
            continue
        if ranks.guard_kind(m, choice.test) is None:
            continue
        loop = next((a for a in m.ancestors(call) if isinstance(a, (ast.For, ast.AsyncFor, ast.While))), None)
        if loop is None or m.rank_guard(loop) is not None:
            continue
        test = ast.unparse(choice.test)
        yield m.finding(
            CODE,
            call,
            f"`set_epoch` runs only where `{test}` holds, but every rank goes round this epoch loop "
            f"(line {loop.lineno}): the other ranks never reshuffle, so their shards come from another "
            "permutation than the ranks that do (samples repeated and skipped)",
            SEVERITY,
            hint="call `sampler.set_epoch(epoch)` on every rank",
        )


def _few_ranks_side(m, call, guard) -> bool:
    """``call`` sits on the side of ``guard``'s ``if`` that at most one rank takes (the body of
    ``if rank == 0:``, the ``else`` of ``if rank != 0:``); not an early exit or a caller's test."""
    for a in m.ancestors(call):
        if isinstance(a, ast.If) and a.test is guard.test:
            side = one_rank_side(m, a.test)
            in_body = any(call is n for s in a.body for n in ast.walk(s))
            return side == ("body" if in_body else "orelse")
    return False


def _set_on_some_ranks(m, samplers, calls, guards):
    """Every ``set_epoch`` of the file sits under a rank test (a progress-bar branch on rank 0),
    while the sampler's loader is drawn from on every rank: the other ranks never reshuffle, so
    their shards come from another permutation than rank 0's (overlaps and gaps)."""
    for made, _loader, loop, _again in _shuffling_passes(m, samplers):
        if m.rank_guard(loop) is not None:
            continue  # the pass itself is rank-only: whoever draws also sets the epoch
        sampler = Flow(m, [made])
        loaders = Flow(m, loader_calls(m, sampler))
        mine = [(c, g) for c, g in zip(calls, guards) if _sets(c, sampler, loaders)]
        if _both_arms(m, [c for c, _g in mine]):
            continue  # ``if rank == 0: ...; set_epoch  else: set_epoch``: every rank sets it
        for call, guard in mine:
            test = ast.unparse(guard.test)
            yield m.finding(
                CODE,
                call,
                f"`set_epoch` runs only where `{test}` (line {guard.line}) holds, but every rank draws "
                f"from this sampler (line {loop.lineno}): the other ranks never reshuffle, so their "
                "shards come from another permutation than the ranks that do (samples repeated and "
                "skipped)",
                SEVERITY,
                hint="call `sampler.set_epoch(epoch)` on every rank, outside the rank test",
                chain=f"{Path(m.path).name}:{made.lineno} -> {Path(m.path).name}:{call.lineno}",
            )
            return


def _both_arms(m, calls) -> bool:
    """Two of the calls sit in the two arms of one ``if``."""
    arms = set()
    for c in calls:
        child = c
        for a in m.ancestors(c):
            if isinstance(a, ast.If):
                arms.add((id(a), any(child is s for s in a.body)))
            child = a
    return any((i, not side) in arms for i, side in arms)


def _sets(call, sampler: Flow, loaders: Flow) -> bool:
    """``call`` (a ``.set_epoch(...)``) is on the sampler, or on ``loader.sampler``/``batch_sampler``."""
    target = call.func.value if isinstance(call.func, ast.Attribute) else None
    if target is None:
        return False
    if sampler.held(target):
        return True
    return (
        isinstance(target, ast.Attribute)
        and target.attr in ("sampler", "batch_sampler")
        and loaders.held(target.value)
    )


def _line_node(m, line: int):
    """A node to report at line ``line`` (its first statement)."""
    return next((st for st in m.nodes(ast.For, ast.While, ast.AsyncFor) if st.lineno == line), None)


def _finding(m, made, loader, _loop, again, elsewhere=False, taken: set[int] | None = None):
    links = [(m.path, made.lineno), (m.path, loader.lineno), *again]
    links = [x for i, x in enumerate(links) if i == 0 or x != links[i - 1]]  # (a loader made in the call)
    chain = " -> ".join(f"{Path(p).name}:{ln}" for p, ln in links)
    path, line = again[-1]
    where = f"line {line}" if path == m.path else f"{Path(path).name}:{line}"
    if isinstance(_loop, ast.Call) and _names_endless(_loop):
        # `cycle(loader)`, `inf_iterator(loader)`: endless passes, none of them an epoch of its own
        return m.finding(
            CODE,
            _loop,
            f"DistributedSampler is never given the epoch: its loader is drawn from endlessly through "
            f"`{ast.unparse(_loop.func)}(...)` ({where}), so every pass over the data repeats the first "
            f"one's order [{chain}]",
            SEVERITY,
            hint="loop over the loader once per epoch and call `sampler.set_epoch(epoch)` before each pass"
            + (" (itertools.cycle even replays the first pass's batches)" if _short_name(_loop) == "cycle" else ""),
            chain=chain,
        )
    epoch_loop = _anchor_loop(m, again[0][1], loader) if again and again[0][0] == m.path else None
    remade = epoch_loop is not None and any(a is epoch_loop for a in m.ancestors(made))
    if remade:
        epoch_loop = None  # a sampler made anew every epoch (at epoch 0): the line to change is its own
    if taken is not None:
        epoch_loop = _claim(epoch_loop, taken)
    last = (dotted(made.func) or "").rsplit(".", 1)[-1] if isinstance(made, ast.Call) else ""
    what = (
        "DistributedSampler"
        if "DistributedSampler" in last or not last
        else f"`{last}`"
        if PROJECT_SAMPLER.match(last)
        else f"the sampler `{last}(...)` makes for a distributed run (line {made.lineno})"
    )
    return m.finding(
        CODE,
        epoch_loop or made,
        f"{what} is never given the epoch: its loader is iterated every epoch at {where} "
        + (
            "but the loop around it never calls `set_epoch` (the file calls it on another way through)"
            if elsewhere
            else "and a new sampler is made every epoch, each starting at epoch 0"
            if remade
            else "but `set_epoch` is never called"
        )
        + f", so every epoch shuffles the same way [{chain}]",
        SEVERITY,
        hint="call `sampler.set_epoch(epoch)` at the start of each epoch, before iterating the loader",
        chain=chain,
    )


def _helper_loaders(m):
    """A training script that never calls ``set_epoch`` and gets its training loader from another
    file's factory told that the job is distributed (``get_train_loader(..., distributed)``), named
    for it (``get_dataset_distributed``, ``prepare_dataloader_ddp``) or handed the rank (and the
    world size, unless it is named for a loader) to shard by: such a
    factory gives the loader a DistributedSampler, and nothing here reshuffles it per epoch."""
    if not m.is_training_script:
        return
    calls = m.method_calls("set_epoch")
    setting = _set_epoch_loops(m, calls) if calls else frozenset()
    if setting is None:
        return  # some `set_epoch` runs from where this file does not show
    taken: set[int] = set()  # as in `check`: one report per epoch loop, the next at its call
    for call, _q in m.calls:
        if not distributed_factory(m, call) or m.looks_like_eval(call):
            continue
        last = (dotted(call.func) or "").rsplit(".", 1)[-1]
        if names_eval_split(last):
            continue  # `get_eval_data_loader(...)`: an evaluation loader needs no reshuffling
        home = m.enclosing_function(call)
        # the pass beside the factory call first (names are text: another function's
        # `epoch_iterator` over its own loader reads alike)
        for loop in sorted(passes(m, _loader_flow(m, call)), key=lambda lp: m.enclosing_function(lp) is not home):
            again = repeats(m, loop)
            if again is None:
                continue
            if calls and (not (around := loops_around(m, loop)) or around & setting):
                continue  # the loop that repeats this pass calls `set_epoch`
            chain = " -> ".join(f"{Path(m.path).name}:{ln}" for ln in (call.lineno, *again, loop.lineno))
            epoch_loop = _anchor_loop(m, again[0], call)
            epoch_loop = _claim(epoch_loop, taken)
            yield m.finding(
                CODE,
                epoch_loop or call,
                f"the training loader from `{last}(...)` (line {call.lineno}), made for a distributed "
                f"run, is iterated every epoch (line {again[0]}) and "
                + ("the loop around it never calls " if calls else "nothing in this script calls ")
                + "`set_epoch`: a DistributedSampler it was given shuffles every epoch the same way "
                f"[{chain}]",
                SEVERITY,
                hint="call `<loader>.sampler.set_epoch(epoch)` at the start of each epoch",
                chain=chain,
            )
            break  # one finding per factory call


def _loader_flow(m, call: ast.Call) -> Flow:
    """What holds the loader a factory returned: the call's value, or in ``train_loader, n =
    factory(...)`` the target named for a loader."""
    parent = m.parents.get(call)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Tuple):
        names = [
            d
            for e in parent.targets[0].elts
            if (d := dotted(e)) and "loader" in d.rsplit(".", 1)[-1].lower() and not names_eval_split(d)
        ]  # (`train_loader, test_loader = get_loader(args)`: the training one)
        if names:
            return Flow(m, [], {n: call.lineno for n in names})
    return Flow(m, [call])


_EPOCH_KEYWORDS = ("max_epochs", "num_epochs", "epochs", "n_epochs")


def _set_once_before_engine(m):
    """``loader.sampler.set_epoch(e)`` run once, then ``trainer.run(loader, max_epochs=n)``: an
    engine iterates the loader for every epoch after that single call, so epochs 2..n shuffle like
    the first (the call belongs in the engine's epoch-started event)."""
    for c in m.method_calls("set_epoch"):
        recv = c.func.value if isinstance(c.func, ast.Attribute) else None
        base = dotted(recv.value) if isinstance(recv, ast.Attribute) and recv.attr == "sampler" else None
        if base is None or repeats(m, c) is not None:
            continue
        fn = m.enclosing_function(c)
        for run, _q in m.calls:
            if run.lineno <= c.lineno or m.enclosing_function(run) is not fn or repeats(m, run) is not None:
                continue
            epochs = next((k for k in run.keywords if k.arg in _EPOCH_KEYWORDS), None)
            if epochs is None or (isinstance(epochs.value, ast.Constant) and epochs.value.value in (0, 1)):
                continue
            if not any(dotted(a) == base for a in run.args):
                continue
            yield m.finding(
                CODE,
                c,
                f"`set_epoch` runs once, here, and `{_short_call(run)}` (line {run.lineno}) then iterates "
                f"`{base}` for `{ast.unparse(epochs.value)}` epochs: every epoch after the first shuffles the "
                "same way",
                SEVERITY,
                hint="call `set_epoch(epoch)` at the start of every epoch (an epoch-started event "
                "handler of the engine)",
            )
            break


def _short_call(c: ast.Call) -> str:
    return f"{dotted(c.func) or 'run'}(...)"

