"""DDP304: a training loop left by some ranks only.

## What it does
Finds a `break` (or `return`) out of a loop that sits under a rank test inside that loop (`if rank
== 0: ... if patience_exceeded: break`, `if is_main_process(): ... return`), where the loop itself
communicates on every rank: a torch.distributed collective, or a backward pass in a DDP job (DDP
all-reduces the gradients in it), also in the file's own functions and in methods of the loop's own
class it calls; a base trainer's abstract training step (`self._train_epoch(epoch)` left to
subclasses in other files) counts as one in a file that wraps or unwraps a DDP model. Early stopping
decided on rank 0 is the usual case. Also a process
exit under a rank test (`sys.exit`, `os._exit`, `exit()`, or a `raise` right after
`destroy_process_group()`) when the other ranks go on to a collective: later in that function, in
its loop, or in the function itself when a loop of its caller calls it again. An exit in an `except`
handler is a failure path (the rank hit an error), not the usual run, and is left alone. So is a
`return` out of the function under a rank test (`if is_master(args): ... if exists: return -1`)
when the other ranks go on, in that function, to a collective, a DDP wrap (it broadcasts rank 0's
parameters), the DDP model's backward or the project's own broadcast or barrier helper; not when
the leaving ranks join a barrier on their way out, when both arms return, or when the test is a
subgroup's membership (`if rank not in ranks: return`). And a
`while True:` training loop whose only exits sit under a rank test: the other ranks never leave it,
whatever it communicates. A `continue` under a rank test is one too when what it skips, after the
test in the same iteration, communicates (`if only_validation and rank == 0: validate(); continue`
before `self._train_epoch(epoch)`).

## Why is this bad?
Only the ranks that pass the rank test can take that exit; whatever the inner condition says, the
others never even evaluate it. They go on to the next iteration and wait in its all-reduce or
barrier for a rank that has left the loop: the job hangs until the collective times out.

## Example
```python
for epoch in range(epochs):
    train_one_epoch(ddp_model, loader)      # backward: gradient all-reduce on every rank
    if rank == 0:
        if early_stopper.should_stop(validate(ddp_model.module)):
            break                           # rank 0 leaves; the others wait in the next epoch
```

## Use instead
```python
for epoch in range(epochs):
    train_one_epoch(ddp_model, loader)
    stop = torch.zeros(1, device=device)
    if rank == 0:
        stop += early_stopper.should_stop(validate(ddp_model.module))
    dist.broadcast(stop, src=0)             # every rank takes the same decision
    if stop.item():
        break
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script import ranks
from ddpdoctor.script.divergent import partings
from ddpdoctor.script.interp import COLLECTIVES
from ddpdoctor.script.models import handed_a_model
from ddpdoctor.script.names import EXIT_CALLS, dotted, names_training
from ddpdoctor.script.nodes import walk

CODE = "DDP304"
TITLE = "Loop left by some ranks only"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

_WRAPPED = ("barrier", "all_reduce", "all_gather", "broadcast", "reduce_scatter", "all_gather_object")
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


def _communicates(m, loop: ast.AST, skip: ast.If, after: ast.If | None = None) -> ast.AST | None:
    """A call in ``loop`` (outside the rank-tested ``skip`` block; past the ``after`` block, when
    given) that every rank must join: a collective, or a backward pass when the job wraps its model
    in DDP."""
    collectives = {id(c) for c in m.dist_calls(*COLLECTIVES)}
    # a project's own wrapper of the process group (`distr.barrier()`, `comm.all_reduce(t)`)
    collectives |= {id(c) for op in _WRAPPED for c in m.method_calls(op)}
    # another module's `train_one_epoch(..., ddp_model)`: the model's backward all-reduces
    collectives |= {id(c) for c in m.trainers_handed_ddp}
    ddp = (
        bool(m.ddp_constructors)
        or m.distributed_context
        and m.mentions("DistributedDataParallel", "prepare(")
    )
    inside = range(skip.lineno, (skip.end_lineno or skip.lineno) + 1)
    own = {f.name: f for f in m.functions}
    methods = _class_methods(m, loop)

    def joins(scope: ast.AST, depth: int) -> bool:
        for n in ast.walk(scope):
            if not isinstance(n, ast.Call):
                continue
            if id(n) in collectives:
                return True
            if (
                isinstance(n.func, ast.Attribute)
                and n.func.attr == "backward"
                # a model the caller hands to this function of a distributed script: the one the
                # job wraps in DDP (`def train(model, train_loader, ..., rank)`)
                and (ddp or (_runs_per_rank(m) and handed_a_model(m, n)))
            ):
                return True
            # the file's own function the loop calls: `train(trainer, model, loader, ...)`
            if depth < 2 and isinstance(n.func, ast.Name) and n.func.id in own and joins(own[n.func.id], depth + 1):
                return True
            # a method of the loop's own class: `self._train_epoch(epoch)`; an abstract one a
            # subclass elsewhere fills in is the training step of the job when it is named so
            if isinstance(n.func, ast.Attribute) and dotted(n.func.value) == "self" and n.func.attr in methods:
                method = methods[n.func.attr]
                if _abstract(method):
                    if ddp and names_training(method.name):
                        return True
                elif depth < 2 and joins(method, depth + 1):
                    return True
        return False

    start = (after.end_lineno or after.lineno) if after is not None else 0
    calls = sorted(
        (n for n in ast.walk(loop) if isinstance(n, ast.Call) and n.lineno not in inside and n.lineno > start),
        key=lambda n: (n.lineno, n.col_offset),
    )
    return next((n for n in calls if joins(n, 0)), None)  # the first the other ranks reach


def _class_methods(m, node: ast.AST) -> dict[str, ast.AST]:
    """The methods of the class ``node`` sits in, by name (empty outside a class)."""
    for a in m.ancestors(node):
        if isinstance(a, ast.ClassDef):
            return {f.name: f for f in a.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return {}


def _abstract(fn: ast.AST) -> bool:
    """A method left to subclasses: ``@abstractmethod``, or a body that only raises
    NotImplementedError (after its docstring)."""
    if any((dotted(d) or "").rsplit(".", 1)[-1] == "abstractmethod" for d in fn.decorator_list):
        return True
    body = [st for st in fn.body if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant))]
    return (
        len(body) == 1
        and isinstance(body[0], ast.Raise)
        and "NotImplementedError" in (dotted(getattr(body[0].exc, "func", body[0].exc)) or "")
    )


def _runs_per_rank(m) -> bool:
    """Every rank of a job runs this file's code: it says so (``distributed_context``), or it is a
    trainer of another file's job handed its rank (``def train(model, ..., rank=0)``) that it tests
    (``if rank == 0:``), with no torch.distributed in sight."""
    if m.distributed_context:
        return True
    cached = m.__dict__.get("_runs_per_rank")
    if cached is None:
        params = {
            a.arg
            for f in m.functions
            for a in (*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs)
            if a.arg in ranks.RANK_PARAMS
        }
        cached = m.__dict__["_runs_per_rank"] = bool(params) and any(
            isinstance(n.test, ast.Compare) and isinstance(n.test.left, ast.Name) and n.test.left.id in params
            for n in m.nodes(ast.If)
        )
    return cached


def _exits(body: list, loops: list, ifs: list):
    """(exit statement, the loop it leaves, the ifs between them) for every ``break`` and ``return``
    in ``body`` (one walk per function, no parent map: the stacks say where each exit sits)."""
    for i, st in enumerate(body):
        if loops and _skips_the_rest(st):
            # `if not is_main_process(): continue`: what follows in this block runs on the other
            # ranks only, as under `if is_main_process():`
            ifs = [*ifs, (len(loops), _passed(st, body[-1]))]
            continue
        if isinstance(st, ast.Raise) and _torn_down(body[:i]):
            st = _Left(st)  # the rank leaves the job on purpose: a process exit like sys.exit
        if isinstance(st, (ast.Break, ast.Continue)) and loops:
            loop = loops[-1]
            yield st, loop, [i for depth, i in ifs if depth >= len(loops)]
        elif isinstance(st, ast.Return) and loops:
            yield st, loops[0], [i for depth, i in ifs if depth >= 1]
        elif isinstance(st, ast.Return) and ifs:
            yield st, None, [i for _depth, i in ifs]  # out of the function, before what follows
        elif _process_exit(st) or isinstance(st, _Left):
            # the process ends: out of every loop, and nothing after it runs on this rank
            yield st, loops[0] if loops else None, [i for _depth, i in ifs]
        elif isinstance(st, _LOOPS):
            yield from _exits(st.body, [*loops, st], ifs)
            yield from _exits(st.orelse, loops, ifs)
        elif isinstance(st, ast.If):
            inner = [*ifs, (len(loops), st)]
            yield from _exits(st.body, loops, inner)
            yield from _exits(st.orelse, loops, inner)
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            yield from _exits(st.body, loops, ifs)
        elif isinstance(st, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            # not the handlers: an exit there is a failure path (the rank hit an error), not the
            # usual run, as for DDP305's values set in `except`
            for part in (st.body, st.orelse, st.finalbody):
                yield from _exits(part, loops, ifs)


def _skips_the_rest(st: ast.stmt) -> bool:
    """``if test: continue`` (nothing else in it, no ``else``): a guard clause of a loop's body."""
    return (
        isinstance(st, ast.If)
        and not st.orelse
        and len(st.body) == 1
        and isinstance(st.body[0], ast.Continue)
    )


def _passed(guard: ast.If, last: ast.stmt) -> ast.If:
    """The ``if`` whose body is what follows the guard clause, up to ``last``, the block's last
    statement: its test negated (``not not x`` is ``x``)."""
    test = guard.test
    negated = (
        test.operand
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        else ast.UnaryOp(op=ast.Not(), operand=test)
    )
    out = ast.copy_location(ast.If(test=negated, body=[], orelse=[]), guard)
    out.end_lineno = last.end_lineno or last.lineno
    return out


class _Left(ast.Expr):
    """A ``raise`` right after the rank tore its process group down (``dist.destroy_process_group();
    raise RuntimeError("early stop")``): it leaves the job on purpose, like ``sys.exit``."""

    def __init__(self, raise_node: ast.Raise):
        super().__init__(value=raise_node)
        ast.copy_location(self, raise_node)
        self.end_lineno, self.end_col_offset = raise_node.end_lineno, raise_node.end_col_offset


def _torn_down(before: list) -> bool:
    return any(
        isinstance(n, ast.Call) and (dotted(n.func) or "").endswith("destroy_process_group")
        for st in before
        for n in walk(st)
    )


def _process_exit(st: ast.stmt) -> bool:
    """``sys.exit(0)``, ``os._exit(0)``, ``exit()`` as a statement: this process ends here."""
    return (
        isinstance(st, ast.Expr)
        and isinstance(st.value, ast.Call)
        and (dotted(st.value.func) or "") in EXIT_CALLS
    )


def _after(m, fn: ast.AST, test: ast.If) -> ast.AST | None:
    """A collective of ``fn`` after the rank-tested block ``test`` (which every other rank goes on
    to while the exiting rank is gone)."""
    collectives = {id(c) for c in m.dist_calls(*COLLECTIVES)} | {
        id(c) for op in _WRAPPED for c in m.method_calls(op)
    }
    end = test.end_lineno or test.lineno
    body = fn.body if not isinstance(fn, ast.Module) else [s for s in fn.body if s.lineno > end]
    for st in body:
        for n in ast.walk(st):
            if isinstance(n, ast.Call) and n.lineno > end and id(n) in collectives:
                return n
    return None


def _called_again(m, fn: ast.AST, test: ast.If) -> ast.AST | None:
    """``fn`` is called in a loop of this file and communicates itself (outside ``test``), or that
    loop does: the others call it again next iteration and wait there."""
    if isinstance(fn, ast.Module):
        return None
    for site in m.call_sites(fn):
        loop = next((a for a in m.ancestors(site) if isinstance(a, _LOOPS)), None)
        if loop is not None and m.enclosing_function(loop) is m.enclosing_function(site):
            comm = _communicates(m, fn, test) or _communicates(m, loop, test)
            if comm is not None:
                return comm
    return None


def check(m):
    # a file that tests the rank and calls a project's barrier or all_reduce wrapper runs on every rank
    wrapped = any(m.method_calls(op) for op in _WRAPPED)
    if not (_runs_per_rank(m) or wrapped) or m.pinned_rank is not None:
        return
    if not (m.mentions("break", "return") and m.nodes(*_LOOPS)) and not m.mentions("exit(", "destroy_process_group"):
        return
    # one finding per loop and rank test: a `break` on rank 0's early stopping and a `sys.exit` on
    # rank 0's NaN loss in the same loop are two decisions to fix
    reported: set[tuple[int, int]] = set()
    endless: set[int] = set()  # loops reported as a whole: no way out for the other ranks
    for fn in (m.tree, *m.functions):
        exits = list(_exits(fn.body, [], []))
        for exit_node, loop, ifs in exits:
            test = next((i for i in ifs if ranks.guard_kind(m, i.test) is not None), None)
            if test is None or ranks.single_process_arm(m, exit_node):
                continue  # (``if RANK == -1 and stop: break``: one process, no rank left behind)
            if (id(loop), id(test)) in reported or id(loop) in endless:
                continue
            if isinstance(exit_node, ast.Return) and loop is None:
                found = _returned_alone(m, fn, exit_node, test)
                if found is not None:
                    reported.add((id(fn), id(test)))
                    yield found
                continue
            if loop is None:  # a process exit outside any loop: a collective after the test,
                # or in this function when a loop of its caller calls it again
                comm = _after(m, fn, test) or _called_again(m, fn, test)
                found = _gone(m, exit_node, test, comm) if comm is not None else None
                if found is not None:
                    yield found
                continue
            if isinstance(exit_node, ast.Continue):
                # the rank skips the rest of this iteration only: what it skips is after the test
                comm = _communicates(m, loop, test, after=test)
                if comm is not None and not any(p.event.node is comm or p.anchor is comm for p in partings(m)):
                    reported.add((id(loop), id(test)))
                    yield m.finding(
                        CODE,
                        exit_node,
                        f"this `continue` skips the rest of the iteration only on the ranks that pass "
                        f"the rank test `{ast.unparse(test.test)[:40]}` (line {test.lineno}); the others "
                        f"go on to `{ast.unparse(comm.func)[:40]}` (line {comm.lineno}), which every rank "
                        "must join, and wait there for the ranks that skipped it "
                        f"({m.chain_text((test.lineno, exit_node.lineno), comm.lineno)})",
                        SEVERITY,
                        hint="let every rank take the same path: run the skipped step on every rank, or "
                        "broadcast the decision so that every rank skips it",
                    )
                continue
            comm = _communicates(m, loop, test)
            if comm is None:
                if _endless_for_the_others(m, loop, exits):
                    endless.add(id(loop))
                    yield m.finding(
                        CODE,
                        exit_node,
                        f"this loop (line {loop.lineno}) has no way out but this one, and only the "
                        f"ranks that pass the rank test `{ast.unparse(test.test)[:40]}` (line "
                        f"{test.lineno}) take it: the others go round forever, waiting in whatever "
                        "the next iteration communicates for a rank that has left",
                        SEVERITY,
                        hint="take the decision on every rank (or broadcast it) so that every rank "
                        "leaves the loop",
                    )
                continue
            reported.add((id(loop), id(test)))
            if _process_exit(exit_node):
                found = _gone(m, exit_node, test, comm)
                if found is not None:
                    yield found
                continue
            how = "break" if isinstance(exit_node, ast.Break) else "return"
            yield m.finding(
                CODE,
                exit_node,
                f"this `{how}` leaves the loop on line {loop.lineno} only on the ranks that pass the "
                f"rank test `{ast.unparse(test.test)[:40]}` (line {test.lineno}); the others go on to "
                f"the next iteration and wait in its collective (line {comm.lineno}) for a rank that "
                f"has left ({m.chain_text((test.lineno, exit_node.lineno), comm.lineno)})",
                SEVERITY,
                hint="take the decision on one rank, then broadcast it (dist.broadcast / "
                "broadcast_object_list) so that every rank leaves the loop together",
            )


def _returned_alone(m, fn: ast.AST, ret: ast.Return, test: ast.If):
    """A ``return`` under a rank test, out of the function (``if is_master(args): ... if exists:
    return -1``), when the other ranks go on past the test to something every rank must join in
    the same function: a collective, a DDP wrap (it broadcasts rank 0's parameters), a backward of
    the DDP model, the project's own broadcast helper."""
    # (the cheap tests first: most returns under a rank test are one of these)
    if isinstance(fn, ast.Module) or _leaves_too(test.orelse) or _membership(test.test):
        return None  # both ways leave, or `if rank not in ranks: return` (a subgroup's members go on)
    if _joins_before(m, test, ret):
        return None  # `barrier(); return`: the leaving ranks meet the others' barrier on their way out
    if m.rank_guard(test) is not None:
        return None  # only some ranks run this function at all
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in walk(fn)):
        return None  # a generator: its caller decides when each rank resumes it
    found = [c for c in (_communicates(m, fn, test, after=test), _joined_after(m, fn, test)) if c is not None]
    comm = min(found, key=lambda c: (c.lineno, c.col_offset)) if found else None
    if comm is None or any(p.event.node is comm or p.anchor is comm for p in partings(m)):
        return None
    side = "pass" if any(ret is n for st in test.body for n in walk(st)) else "fail"
    return m.finding(
        CODE,
        ret,
        f"this `return` leaves `{fn.name}` only on the ranks that {side} the rank test "
        f"`{ast.unparse(test.test)[:40]}` (line {test.lineno}); the others go on to "
        f"`{ast.unparse(comm.func)[:40]}` (line {comm.lineno}), which every rank must join, and wait "
        f"there for the ranks that returned ({m.chain_text((test.lineno, ret.lineno), comm.lineno)})",
        SEVERITY,
        hint="take the decision on one rank, broadcast it (broadcast_object_list), and let every "
        "rank return together",
    )


def _membership(test: ast.AST) -> bool:
    return any(isinstance(n, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in n.ops) for n in walk(test))


def _joins_before(m, test: ast.If, ret: ast.Return) -> bool:
    """The rank-tested block makes a collective (or a project's barrier) before ``ret``."""
    collectives = {id(c) for c in m.dist_calls(*COLLECTIVES)}
    for n in walk(test):
        if not isinstance(n, ast.Call) or n.lineno >= ret.lineno or n.lineno < test.lineno:
            continue
        name = (dotted(n.func) or "").rsplit(".", 1)[-1]
        if id(n) in collectives or name in _WRAPPED or _project_collective(m, n):
            return True
    return False


def _leaves_too(block: list) -> bool:
    return bool(block) and isinstance(block[-1], (ast.Return, ast.Raise))


# a project's own helper of the process group, by the start of its name (`broadcast_object(args,
# x)`, `all_reduce_mean(t)`, detectron2's `comm.synchronize()`)
_JOINING = ("broadcast", "all_reduce", "all_gather", "barrier", "reduce_dict", "synchronize")


def _project_collective(m, call: ast.Call) -> bool:
    """A project helper named for joining the other ranks (``broadcast_object``, ``synchronize``);
    torch's own calls are counted as collectives elsewhere (``torch.cuda.synchronize`` is none)."""
    name = (dotted(call.func) or "").rsplit(".", 1)[-1]
    return name.startswith(_JOINING) and not (m.qualname(call.func) or "").startswith("torch.")


def _joined_after(m, fn: ast.AST, test: ast.If) -> ast.AST | None:
    """A DDP wrap or a project helper of the process group in ``fn`` after ``test``."""
    wraps = {id(c) for c in m.ddp_constructors}
    end = test.end_lineno or test.lineno
    for n in sorted((c for c in walk(fn) if isinstance(c, ast.Call)), key=lambda c: (c.lineno, c.col_offset)):
        if n.lineno <= end:
            continue
        if id(n) in wraps:
            return n
        if _project_collective(m, n):
            return n
    return None


def _endless_for_the_others(m, loop: ast.AST, exits: list) -> bool:
    """``while True:`` whose every exit sits under a rank test (``if rank == 0: ... if epoch >=
    max_epoch: quit()``), in a training script: the ranks that fail the test never leave it."""
    if not (
        isinstance(loop, ast.While) and isinstance(loop.test, ast.Constant) and loop.test.value is True
    ) or not m.is_training_script:
        return False
    own = [ifs for _node, lp, ifs in exits if lp is loop]
    return bool(own) and all(any(ranks.guard_kind(m, i.test) is not None for i in ifs) for ifs in own)


def _gone(m, exit_node: ast.Expr, test: ast.If, comm: ast.AST):
    if any(p.event.node is comm or p.anchor is comm for p in partings(m)):
        return None  # the per-rank walk is sure of it: DDP301 reports that collective, one cause
    call = ast.unparse(exit_node.value)
    if isinstance(exit_node, _Left):
        call = f"{call}` after `destroy_process_group()"
    return m.finding(
        CODE,
        exit_node,
        f"`{call}` ends the process only on the ranks that pass the rank test "
        f"`{ast.unparse(test.test)[:40]}` (line {test.lineno}); the others go on and wait in the "
        f"collective on line {comm.lineno} for a rank that is gone, until it times out "
        f"({m.chain_text((test.lineno, exit_node.lineno), comm.lineno)})",
        SEVERITY,
        hint="take the decision on one rank, broadcast it, and let every rank leave together "
        "(then `dist.destroy_process_group()` and return)",
    )
