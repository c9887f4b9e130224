"""DDP501: torch.save not guarded by rank.

## What it does
Finds `torch.save` that every rank reaches (per the per-rank interpreter, or syntactically when the
code is not reached from the script's entry point) in a distributed script, writing to a path that
does not depend on the rank. Also a rank test that one launch mode walks around
(`not args.multiprocessing_distributed or args.rank == 0` where the file makes the job distributed
by `world_size > 1` too), a save inside the function that trains (reported at the save: the
training must run on every rank, the save must not), and a method's save with no rank test when
another method of the same class guards its own save by the rank (`def save_network(self): if
self.rank == 0: torch.save(...)` beside an unguarded `save_training_state`): the class decides who
writes, and its callers, in another file, call both on every rank.

## Why is this bad?
All N ranks write the same file at the same time: N times the I/O, and on shared file systems
interleaved writes produce a truncated or corrupt checkpoint that fails only when you load it.

## Example
```python
torch.save(model.module.state_dict(), "ckpt.pt")
```

## Use instead
```python
if dist.get_rank() == 0:
    torch.save(model.module.state_dict(), "ckpt.pt")
dist.barrier()
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.apart import class_apart_from_distributed
from ddpdoctor.script.foreign import (
    callee,
    entering_call,
    foreign_events,
    guarded_on_the_way,
    place,
    reported_there,
)
from ddpdoctor.script.names import dotted
from ddpdoctor.script.ranks import LOCAL, callee_guard, guard_kind, single_process_arm
from ddpdoctor.script.writers import (
    checkpoint_helper_call,
    checkpoint_named,
    entry_by_itself,
    every_process_side,
    every_rank_reaches,
    guard_chains,
    guarded_here,
    in_spawning_parent,
    other_ranks_arm,
    per_process_path,
    rank_guards,
    saved_by_caller,
    to_stream,
)

CODE = "DDP501"
TITLE = "torch.save not guarded by rank"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def _target(m, call):
    return call.args[1] if len(call.args) > 1 else m.keyword(call, "f")


def _rank_in_path(m, call) -> bool:
    return per_process_path(_target(m, call), m)


def _to_stream(m, call) -> bool:
    return to_stream(m, call, _target(m, call))


def _unguarded_entry(m, call) -> bool:
    """Code the script's own entry point does not reach: report it only if the file calls its function
    without a rank guard, or the function looks like an entry point itself (a library helper's caller
    decides who saves)."""
    fn = m.enclosing_function(call)
    if fn is None:
        return True
    if m.call_sites(fn):
        # followed up the file's own calls: a guard or a non-distributed arm (`else` of `if ddp:`)
        # around every way in keeps the other ranks out
        return every_rank_reaches(m, call)
    if _guarded_sibling_save(m, call) is not None:
        return True
    return entry_by_itself(m, fn)


def _guarded_sibling_save(m, call):
    """Another method of the same class that guards its own ``torch.save`` by a rank test
    (``def save_network(self): if self.rank == 0: torch.save(...)``), when ``call``'s method has no
    caller in this file and no guard: the class's methods decide themselves who writes, so every
    rank that calls this one writes. Returns that guarded save, or None."""
    fn = m.enclosing_function(call)
    cls = m.parents.get(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef) or m.call_sites(fn):
        return None
    for other in m.calls_named("torch.save"):
        host = m.enclosing_function(other)
        if (
            host is not fn
            and host is not None
            and m.parents.get(host) is cls
            and rank_guards(m, other)
            and not _rank_in_path(m, other)
        ):
            return other
    return None


def _guarded_save_beside(m, call):
    """A save under a rank test in ``call``'s own function (``torch.save``, or a helper named for a
    checkpoint or model save: ``model.save_modules(...)``): that function is meant for several ranks.
    Returns that save, or None."""
    fn = m.enclosing_function(call)
    if fn is None:
        return None
    for other, q in m.calls:
        if other is call or m.enclosing_function(other) is not fn or not rank_guards(m, other):
            continue
        name = (q or dotted(other.func) or "").rsplit(".", 1)[-1].lower()
        if (q == "torch.save" or (name.startswith("save") and checkpoint_named(name))) and not any(
            per_process_path(a, m) for a in other.args
        ):
            return other
    return None


def _guard_on_the_way(m, call) -> bool:
    """A rank test the interpreter could not evaluate (``args.rank % ngpus_per_node == 0``) still reads
    as a guard: on the save itself or on a call that led to it, on every way the ranks reach it (a
    guarded way in, such as a rank-0-only retrain, leaves the other ways unguarded). So does the arm a
    job takes only when it is not distributed (``else: train_single_gpu(args)`` of ``if args.ddp:``):
    one process runs it, there is no other rank to write at the same time."""
    if guarded_here(m, call) or single_process_arm(m, call):
        return True
    chains = {e.chain for run in m.runs for t in run.traces for e in t.events if e.node is call}
    lines = {ln for chain in chains for ln in chain}
    guarded = {
        c.lineno
        for c, _ in m.calls
        if c.lineno in lines and (guarded_here(m, c) or single_process_arm(m, c))
    }
    return bool(chains) and all(guarded.intersection(chain) for chain in chains)


def _many_ranks(run, ranks: set[int]) -> bool:
    """Every rank, or every rank but one (the ``else`` of ``if rank == 0``) in a world of three or more:
    either way several ranks write the same file."""
    return len(ranks) == run.world_size or (run.world_size >= 3 and len(ranks) >= run.world_size - 1)


_SAVE_WORDS = ("save", "checkpoint", "ckpt")


def _saving_helpers(m, saves) -> dict[str, ast.AST | None]:
    """Functions whose call saves a checkpoint: this file's functions that reach one of ``saves``
    (``torch.save`` to a shared path; by name, the def; not a function that trains) and imported functions named like ``save_model``/``save_checkpoint`` (by name,
    None: their body is in another file)."""
    out: dict[str, ast.AST | None] = {}
    for save in saves:
        fn = m.enclosing_function(save)
        if fn is not None and not _trains(m, fn):
            out[fn.name] = fn
    # and the file's functions that call one (``save_state`` whose nested ``save_dir`` saves)
    for _ in range(3):
        found = {
            g.name: g
            for call, _q in m.calls
            if isinstance(call.func, ast.Name)
            and out.get(call.func.id) is not None
            and (g := m.enclosing_function(call)) is not None
            and g.name not in out
            and not _trains(m, g)
        }
        if not found:
            break
        out.update(found)
    # (one whose result a library write stores, `torch.save(save_state(model), path)`, returns
    # the state: the write is that call's)
    states = {call.func.id for call, _q in m.calls if isinstance(call.func, ast.Name) and saved_by_caller(m, call)}
    for call, q in m.calls:
        if isinstance(call.func, ast.Name) and q and q != call.func.id and not q.startswith("torch."):
            name = call.func.id.lower()
            if any(w in name for w in _SAVE_WORDS) and "load" not in name and call.func.id not in out and call.func.id not in states:
                out[call.func.id] = None
    return out


def _in_helpers(m, call: ast.AST, helpers: set[int]) -> bool:
    """``call`` is inside one of ``helpers``: in its body, in a function nested in it, or in a
    function only it calls (``save_state``'s own ``save_dir``)."""
    fn = m.enclosing_function(call)
    for _ in range(3):
        if fn is None:
            return False
        if id(fn) in helpers:
            return True
        sites = [s for s in m.call_sites(fn) if m.enclosing_function(s) is not fn]
        outer = m.enclosing_function(fn)
        if sites and all(id(m.enclosing_function(s)) in helpers for s in sites):
            return True
        fn = outer
    return False


def _trains(m, fn) -> bool:
    """The function trains (it wraps the model in DDP, or steps backward): every rank must call it, so
    a save inside it is the one to guard, not the call."""
    return any(m.enclosing_function(c) is fn for c in (*m.ddp_constructors, *m.method_calls("backward")))


def _passes_rank(call: ast.Call) -> bool:
    return any("rank" in ast.unparse(a).lower() for a in [*call.args, *(k.value for k in call.keywords)])


def _inconsistent_calls(m, saves):
    """A saving helper the script calls under a rank guard in one place and on every rank in
    another (an ``except KeyboardInterrupt:`` handler, the final save after the loop): the guard
    shows it is meant for one rank, the other call has every rank write the same file."""
    for name, fn in _saving_helpers(m, saves).items():
        sites = (
            m.call_sites(fn)
            if fn is not None
            else [c for c, _q in m.calls if isinstance(c.func, ast.Name) and c.func.id == name]
        )
        method = m.is_method(fn)
        # a method is called as obj.name(...), a function as name(...): two defs may share a name
        sites = [
            c
            for c in sites
            if (fn is None or m.enclosing_function(c) is not fn)
            and isinstance(c.func, ast.Attribute) == method
        ]
        if len(sites) < 2 or any(_passes_rank(c) for c in sites):
            continue  # a helper told the rank decides itself who writes what
        if callee_guard(m, sites[0]) is not None:
            continue  # the helper runs on one rank by itself (`@main_process`, an early return)
        if fn is not None and _saves_on_one_rank_inside(m, fn, saves):
            continue  # `def evaluate(...): if is_main_process(): ... torch.save(...)`
        guarded = [c for c in sites if all(chain for chain in guard_chains(m, c))]
        if not guarded:
            continue
        # a helper that saves when run for its effect and loads when asked for a value
        # (`ckp = lm_checkpoint(cfg, save_dir=d)` on resume, `lm_checkpoint(cfg, model=m)` to save)
        effect_only = all(isinstance(m.parents.get(c), ast.Expr) for c in guarded)
        for c in sites:
            if effect_only and not isinstance(m.parents.get(c), ast.Expr):
                continue
            if _main_first_window(m, c):
                continue  # `if not main: barrier(); save(...); if main: barrier()`: ordered on purpose
            if c not in guarded and every_rank_reaches(m, c):
                yield c, name, fn, guarded[0]


def _saves_on_one_rank_inside(m, fn, saves) -> bool:
    """Every save of ``saves`` in ``fn`` sits behind a rank test of ``fn`` itself (writers'
    rank_guards): whoever calls the helper, one rank writes."""
    mine = [s for s in saves if m.enclosing_function(s) is fn]
    return bool(mine) and all(rank_guards(m, s) for s in mine)


def _barrier_under_rank_test(m, st: ast.stmt) -> bool:
    return (
        isinstance(st, ast.If)
        and m.is_rank_guard(st.test)
        and any(
            isinstance(n, ast.Call) and (dotted(n.func) or "").endswith("barrier") for b in st.body for n in ast.walk(b)
        )
    )


def _main_first_window(m, call: ast.Call) -> bool:
    """``call`` sits between ``if not main: barrier()`` and ``if main: barrier()`` in one block (the
    "main process first" idiom): the script orders the ranks around it on purpose."""
    stmt = next((a for a in m.ancestors(call) if isinstance(a, ast.stmt)), None)
    parent = m.parents.get(stmt) if stmt is not None else None
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and any(s is stmt for s in block):
            i = [id(s) for s in block].index(id(stmt))
            return any(_barrier_under_rank_test(m, s) for s in block[:i][-3:]) and any(
                _barrier_under_rank_test(m, s) for s in block[i + 1 :][:3]
            )
    return False


def _unguarded_siblings(m):
    """Saving helpers of one object whose bodies are in another file (a base class, a checkpoint
    manager), or imported from one module of the project: ``self.save_checkpoint(e)`` under ``if
    is_main_process():`` and ``self.save_best_checkpoint()`` on every rank. The guard on the one shows that saving through
    this object is one rank's job; the unguarded call has every rank write the same file. Yields
    (unguarded call, a guarded call)."""
    own = {fn.name for fn in m.functions}
    by_receiver: dict[str, list[ast.Call]] = {}
    for call, q in m.calls:
        f = call.func
        name = f.attr.lower() if isinstance(f, ast.Attribute) else f.id.lower() if isinstance(f, ast.Name) else ""
        if "save" not in name or "load" in name:
            continue
        effect = isinstance(m.parents.get(call), ast.Expr)  # run for its effect, not asked for a value
        if (
            effect
            and isinstance(f, ast.Attribute)
            and isinstance(f.value, ast.Name)
            and f.value.id not in m.aliases  # torch.save, np.save: other rules
            and f.attr not in own
            # accelerate's `accelerator.save_state()` / `.save_model()` are called by every process
            # (the state of an FSDP or DeepSpeed model is gathered from all of them) and write on the
            # main one: the rank test on another call of them is the mistake, not the call without one
            and not f.value.id.endswith("accelerator")
        ):
            by_receiver.setdefault(f.value.id, []).append(call)
        elif isinstance(f, ast.Name) and f.id not in own and q and "." in q and checkpoint_helper_call(m, call):
            # checkpoint helpers imported from one module of the project (`save_checkpoint` and
            # `best = save_best_model(loss, best, model, ...)` from `utils.io`): siblings too
            module = q.rsplit(".", 1)[0]
            if module.split(".", 1)[0] not in ("torch", "numpy", "accelerate", "transformers"):
                by_receiver.setdefault("module:" + module, []).append(call)
    for calls in by_receiver.values():
        if len(calls) < 2 or any(_passes_rank(c) for c in calls):
            continue
        guarded = [c for c in calls if all(chain for chain in guard_chains(m, c))]
        if not guarded:
            continue
        for c in calls:
            if c not in guarded and every_rank_reaches(m, c):
                yield c, guarded[0]


def _guards_every_process_passes(m, saves):
    """Rank tests that let every process through in one way to launch the job (``not
    args.multiprocessing_distributed or args.rank == 0`` where ``args.distributed`` is also set by
    ``world_size > 1``), when such tests are the only ones on a way to a save. Yields (test, the
    side that lets them through, the assignment that shows it, the save)."""
    seen: set[int] = set()
    for save in saves:
        for chain in guard_chains(m, save):
            proofs = [every_process_side(m, t) for t, _ in chain]
            if not chain or not all(proofs):
                continue
            test = chain[-1][0]
            if id(test) not in seen and every_rank_reaches(m, test):
                seen.add(id(test))
                yield test, *proofs[-1], save


def _save_chain(m, call, fn) -> list[int]:
    """The call, then the ``torch.save`` it reaches in this file's helper ``fn`` (if it is here)."""
    if fn is None:
        return [call.lineno]
    inner = [s.lineno for s in m.calls_named("torch.save") if m.enclosing_function(s) is fn]
    return [call.lineno, *inner[:1]]


def check(m):
    if m.one_process:  # init_process_group(world_size=1): no other rank to collide with
        return
    # the rank guard on a sibling is evidence enough that every rank runs this file's code
    siblings: set[int] = set()  # one finding per call: the helper rule below may see it too
    for call, guarded in _unguarded_siblings(m):
        siblings.add(id(call))
        name = ast.unparse(call.func)
        yield m.finding(
            CODE,
            call,
            f"every rank calls `{name}` here, while line {guarded.lineno} saves through "
            f"`{ast.unparse(guarded.func)}` on one rank only: here all ranks write the same file at once",
            SEVERITY,
            hint="call it under the same rank test, then `dist.barrier()`",
            chain=[guarded.lineno, call.lineno],
        )
    # per-rank files (and writes into a stream opened here) are meant to be written by every rank
    # (a class of the file apart from its distributed code, the one-process trainer, is left alone)
    saves = [
        s
        for s in m.calls_named("torch.save")
        if not _rank_in_path(m, s) and not _to_stream(m, s) and not class_apart_from_distributed(m, s)
    ]
    # an imported saving helper called under a rank test in one place is evidence, as for the
    # siblings above, that several ranks run this file (navillm's train.py: DDP and the process
    # group are made in its helpers' module). This file's own helpers wait for the test below: a
    # library's one-process trainer (whose subclass guards its save) is no training script.
    training = m.is_training_script or bool(m.dist_calls("get_rank"))
    helpers: set[int] = set()  # their saves are reported at the call that reaches them on every rank
    for call, name, fn, guarded in _inconsistent_calls(m, saves):
        if (fn is not None and not training) or id(call) in siblings:
            continue
        if fn is not None:
            helpers.add(id(fn))
        yield m.finding(
            CODE,
            call,
            f"every rank calls `{name}` here, which saves a checkpoint, while line {guarded.lineno} calls it "
            f"on one rank only: here all ranks write the same file at once "
            f"({m.chain_text(_save_chain(m, call, fn))})",
            SEVERITY,
            hint="call it under the same rank test (`if dist.get_rank() == 0:`), then `dist.barrier()`",
            chain=[call.lineno, guarded.lineno],
        )
    # a function that saves through another writer on one rank only (`if rank == 0:
    # model.save_modules(...)`) runs on several ranks: its unguarded `torch.save` is every rank's
    if not training:
        for call in saves:
            guarded = _guarded_save_beside(m, call)
            if guarded is None or _guard_on_the_way(m, call) or guarded_here(m, call) or in_spawning_parent(m, call):
                continue
            if (reach := m.reach(call)) and not any(_many_ranks(run, ranks) for run, ranks in reach):
                continue
            yield m.finding(
                CODE,
                call,
                f"`torch.save` runs on every rank that calls `{m.enclosing_function(call).name}`, while line "
                f"{guarded.lineno} in the same function saves through `{ast.unparse(guarded.func)}` on one rank "
                "only: here all ranks write the same file at once",
                SEVERITY,
                hint="save under the same rank test, then `dist.barrier()`",
                chain=[guarded.lineno, call.lineno],
            )
        return
    # a checkpoint helper of another module (`model.save_model(...)` on an object built here) saves
    # too: the rank test around it shows the file means it for one writer
    helper_saves = [
        c for c, _q in m.calls if checkpoint_helper_call(m, c) and not any(per_process_path(a, m) for a in c.args)
    ]
    for test, side, proof, save in _guards_every_process_passes(m, [*saves, *helper_saves]):
        flag = f"`{ast.unparse(side.operand)}`"
        dest = m.argparse_dests().get(side.operand.attr if isinstance(side.operand, ast.Attribute) else "")
        if dest is not None and dest.flags:
            flag = f"`{dest.flags[-1]}`"  # the user's words: the command-line flag
        yield m.finding(
            CODE,
            test,
            f"`{ast.unparse(side)}` lets every process past this rank test when the job is distributed "
            f"without {flag} (line {proof.lineno} sets `{ast.unparse(proof.targets[0])}` another way too): "
            f"then all ranks save the same file at once ({m.chain_text([test.lineno, save.lineno])})"
            + (
                f"; with {flag} the rank it tests is the node-local one: one writer per node"
                if guard_kind(m, test) == (LOCAL,)
                else ""
            ),
            SEVERITY,
            hint="test the global rank on every launch path (`if dist.get_rank() == 0:`), then `dist.barrier()`",
            chain=[proof.lineno, test.lineno, save.lineno],
        )
    for call in saves:
        if _in_helpers(m, call, helpers):
            continue
        if _guard_on_the_way(m, call) or in_spawning_parent(m, call):
            continue  # (the spawning parent's code runs once, before or after the workers)
        reach = m.reach(call)
        if reach:
            if not any(_many_ranks(run, ranks) for run, ranks in reach):
                continue  # only some ranks get here
            if all(run.entry != "<module>" for run, _ in reach) and not _unguarded_entry(m, call):
                continue
        elif guarded_here(m, call) or not _unguarded_entry(m, call):
            continue
        arm = other_ranks_arm(m, call)
        sibling = _guarded_sibling_save(m, call)
        if sibling is not None:
            test = rank_guards(m, sibling)[0]
            yield m.finding(
                CODE,
                call,
                f"`torch.save` has no rank test here, while `{m.enclosing_function(sibling).name}` of "
                f"the same class saves only under `{ast.unparse(test)}` (line {test.lineno}): every rank "
                f"that calls `{m.enclosing_function(call).name}` writes the same file at once",
                SEVERITY,
                hint=f"guard it the same way (`if {ast.unparse(test)}:`), then `dist.barrier()`",
                chain=[test.lineno, call.lineno],
            )
            continue
        who = (
            f"every rank but the one the test at line {arm.lineno} lets through"
            if arm is not None
            else "every rank"
        )
        yield m.finding(
            CODE,
            call,
            f"`torch.save` runs on {who}: all those ranks write the same file at once",
            SEVERITY,
            hint="save on rank 0 only (`if dist.get_rank() == 0:`), then `dist.barrier()`",
            **({"chain": [arm.lineno, call.lineno]} if arm is not None else {}),
        )
    yield from _saves_in_other_files(m)


def _saves_in_other_files(m):
    """Project mode: a ``torch.save`` in another file (a checkpoint helper) that every rank reaches
    through a call here. Reported at that call, where the rank test belongs."""
    for fe in foreign_events(m, "save"):
        save, other = fe.event.node, fe.other
        if fe.event.op != "save":
            continue  # a file copy (DDP504 follows it as a write); every rank's copies are DDP505's
        if _rank_in_path(other, save) or _to_stream(other, save) or guarded_on_the_way(m, fe):
            continue
        if not any(_many_ranks(run, ranks) for run, ranks in fe.reach):
            continue
        if all(run.entry != "<module>" for run, _ in fe.reach) and not _unguarded_entry(m, fe.anchor):
            continue
        if reported_there(check, other, save):
            continue
        name = callee(fe)
        where = place(fe)
        enters = entering_call(m, fe)
        if enters is None:
            message = f"every rank calls `{name}` here, and it saves with `torch.save` at {where} with no rank test"
            hint = "call it on rank 0 only (`if dist.get_rank() == 0:`), then `dist.barrier()`"
        else:
            at = f"{enters[0]}:{enters[1]}"
            message = (
                f"every rank calls `{name}` here, and through it {at} calls the saving helper with no "
                f"rank test, which saves with `torch.save` at {where}"
            )
            hint = f"make the call at {at} on rank 0 only (`if dist.get_rank() == 0:`), then `dist.barrier()`"
        yield m.finding(
            CODE,
            fe.anchor,
            f"{message}: all ranks write the same file at once ({m.event_chain(fe.event)})",
            SEVERITY,
            hint=hint,
            cause=f"{other.path}:{save.lineno} via {enters}",
        )
