"""DDP305: a value only some ranks set decides whether ranks communicate.

## What it does
Follows the values a script sets on some ranks only (under `if rank == 0:`, after `if rank != 0:
return`, or from a value that is itself such) through names, attributes (`self.stop`, `ctx.flag`) and
the return values of the file's own functions, to the places where one decides what runs: an `if`
around a collective, a loop whose condition or bound it is, a `break` or `return` out of a loop that
communicates. A collective is a torch.distributed call, a project wrapper of one (`comm.barrier()`),
a library call that synchronises (`trainer.save_checkpoint`, `accelerator.wait_for_everyone`), a
forward or backward pass of a DDP model, or a call of the file's own function that makes one. Also reports the
collectives after an early `return` on a rank test. A value handed to a collective
(`dist.broadcast(stop, 0)`) is the same on every rank again and is not followed.

Values computed from the rank's own batch are followed too, to a `break` or `return` out of a loop:
the items of a loop over a data loader that runs a backward pass of the DDP model (each rank trains
on its own shard) or the batches such a loop draws with `next(loader_iter)`, the output of the DDP
model's forward that a training step backpropagates however the step gets its inputs (a rollout,
`get_batch()`: `logprobs = per_token_logprobs(model, ids)` then a loss of it), the items of any loop
over a loader given a DistributedSampler (an evaluation over the rank's shard of the validation set,
also in the file's own function the loader is handed to: early stopping on its loss), and what is computed
from them, also through the file's own functions (a loss, a KL estimate, a drift; the batch handed
to `self.train_step(batch)` is the rank's own inside it too). Their shape (`len(batch)`, `x.size(0)`)
is alike on every rank and is not followed. An `if` on them is reported only where one way runs a
collective (a forward or backward of a DDP model) and the other does not, and not when it tests the
batch's layout, alike on every rank: a key or a type (`"mask" in batch`, `isinstance`), or `x is
None` on a field read out of the batch as it is (`batch.get("mask")`). A score computed from the
batch that is None for some contents (silent audio) is a value, not a layout.

So is an `if` on such a value that leaves the iteration before the backward (`if torch.isnan(loss):
continue`): the ranks where it holds skip the step's gradient all-reduce (reported at the `if`,
and what the skip later makes differ, a step counter, is not reported again). Or that ends the
process there (`if not math.isfinite(loss.item()): sys.exit(1)`): torchrun stops the other ranks
on one node, but those of other nodes, or of an srun launch, wait for it until the NCCL timeout. And an `if` on one
that steps an optimizer, scheduler or scaler in one way and not in the other (`if not
skip_optimizer_step: scaler.step(optimizer)`, the flag set where this rank's loss is NaN): every
rank ran the backward, but only some apply the update, and the replicas drift apart silently.

So is a reading of the process's own clock (`time.time()`, `perf_counter()`) and the arithmetic
on it (`elapsed = time.time() - start`, `self.run_time += elapsed`): a time budget (`while time.time()
< end_time:`, `if self.run_time > self.max_run_time: break`) expires at a different step on each
rank. A decision taken on one rank and broadcast (`dist.broadcast(flag, 0)`) is the same everywhere.

So is each process's own look at the file system (`if os.path.exists(p):`, `if path.exists():`)
where one way runs a collective and the other does not: on shared storage the ranks can see a file
differently (attribute caching, a file another rank is writing at that moment, storage local to a
node), so some ranks join the collective and the others never do.

An exception is such a value too: a handler that catches what the DDP model's forward or backward
raised on this rank's batch and moves on (`except SomeError: continue`, `break` or `return`, with no
collective of its own and no re-raise at its top level) skips the step on that rank alone. Ctrl-C,
`SystemExit` and `StopIteration` reach every rank alike and are left alone.

## Why is this bad?
Rank 0 alone knows the value, so rank 0 alone takes the branch, leaves the loop or runs one more
iteration. The others never see the decision: they wait in a collective that rank 0 does not join
(or rank 0 waits in one that they do not), and the job hangs until the timeout.

## Example
```python
stop = False
for epoch in range(epochs):
    train_one_epoch(ddp_model, loader)           # gradient all-reduce on every rank
    if rank == 0:
        stop = early_stopper.step(validate(ddp_model.module))
    if stop:                                     # True on rank 0 only
        break
```

Early stopping on a statistic of the rank's own batch parts the ranks the same way:
```python
for x, y in loader:                              # a DistributedSampler: each rank its own shard
    loss = loss_fn(ddp_model(x), y)
    loss.backward()
    if loss.item() < target:                     # this rank's loss only
        break
```
Reduce it first: `dist.all_reduce(loss_sum)` (or `accelerator.reduce`), then decide.

## Use instead
```python
stop = torch.zeros(1, device=device)
for epoch in range(epochs):
    train_one_epoch(ddp_model, loader)
    if rank == 0:
        stop[0] = early_stopper.step(validate(ddp_model.module))
    dist.broadcast(stop, src=0)                  # every rank takes rank 0's decision
    if stop.item():
        break
```
"""

from __future__ import annotations

import ast
import builtins

from ddpdoctor.script.divergence import CLOCKS, Decision, RankValues
from ddpdoctor.script.flow import Flow
from ddpdoctor.script.interp import COLLECTIVES, group_of
from ddpdoctor.script.loaders import sharded_passes
from ddpdoctor.script.names import EXIT_CALLS, SAME_MODULE, dist_op, dotted, names_a_loader, training_state
from ddpdoctor.script.names import short_text as _short
from ddpdoctor.script.nodes import child_nodes, walk
from ddpdoctor.script.ranks import assignments, guard_kind, round_robin_share, under_join
from ddpdoctor.script.steps import backward_step_object, reduces_across_ranks
from ddpdoctor.script.writers import in_spawning_parent

CODE = "DDP305"
TITLE = "Rank-dependent value decides a collective"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

# a project's own wrapper of the process group (`distr.barrier()`, `comm.all_reduce(t)`)
_WRAPPED = frozenset(
    (
        "barrier",
        "all_reduce",
        "all_gather",
        "broadcast",
        "reduce_scatter",
        "all_gather_object",
        "wait_for_everyone",
    )
)


def _calls_in(stmts):
    """The calls in ``stmts`` in source order, not those in nested functions, classes or lambdas."""
    stack = list(reversed(list(stmts)))
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(n, ast.Call):
            yield n
        stack.extend(reversed(child_nodes(n)))


def _names_in(e: ast.AST) -> set[str]:
    return {d for x in ast.walk(e) if isinstance(x, (ast.Name, ast.Attribute)) and (d := dotted(x))}


def _feeds_backward(m, call: ast.Call, loop: ast.AST, backwards: set[int]) -> bool:
    """The value ``call`` returns reaches, through the assignments that follow it in ``loop``, a
    backward pass there (``loss.backward()``, ``scaler.scale(loss).backward()``)."""
    stmt = next((a for a in m.ancestors(call) if isinstance(a, (ast.Assign, ast.AnnAssign, ast.AugAssign))), None)
    if stmt is None or m.enclosing_loop(stmt) is not loop and not any(a is loop for a in m.ancestors(stmt)):
        return False
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    held = set().union(*(_names_in(t) for t in targets))
    later = sorted(
        (a for a in ast.walk(loop) if isinstance(a, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and a.lineno > stmt.lineno),
        key=lambda a: a.lineno,
    )
    for a in later:
        if a.value is not None and _names_in(a.value) & held:
            for t in a.targets if isinstance(a, ast.Assign) else [a.target]:
                held |= _names_in(t)
    for c in ast.walk(loop):
        if isinstance(c, ast.Call) and id(c) in backwards and c.lineno >= stmt.lineno:
            if _names_in(c.func) & held or any(_names_in(x) & held for x in (*c.args, *(k.value for k in c.keywords))):
                return True
    return False


class _Comms:
    """Which calls of the file make every rank communicate, directly or through the file's own functions."""

    def __init__(self, m):
        self.m = m
        # collectives of the whole job: one on a group of its own may have only these ranks as members
        direct = {
            id(c)
            for c in m.dist_calls(*COLLECTIVES)
            if group_of(dist_op(m.qualname(c.func)) or "", c) in (None, *m.world_group_names)
        }
        direct |= {id(c) for c in m.sync_calls}
        for op in _WRAPPED:
            for c in m.method_calls(op):
                if any(k.arg == "group" for k in c.keywords):
                    continue
                root = (dotted(c.func) or "").split(".", 1)[0]
                if m.aliases.get(root, "").startswith(("numpy", "torch.")) and id(c) not in direct:
                    continue  # np.broadcast / torch.broadcast_tensors: no communication
                direct.add(id(c))
        # (an FSDP model communicates the same way: its forward all-gathers the shards, its backward
        # reduce-scatters the gradients)
        wraps = [*m.ddp_constructors, *m.ddp_wrapper_calls, *m.calls_named("FullyShardedDataParallel", "fully_shard")]
        self.backwards: set[int] = set()
        # a model converted to SyncBatchNorm is trained across ranks: its forward and backward sync
        sync_bn = m.calls_named("torch.nn.SyncBatchNorm.convert_sync_batchnorm")
        # (a module that tests for the wrapper, `isinstance(model, DistributedDataParallel)`, trains
        # a DDP model its caller made)
        # a backward pass of a DDP model all-reduces the gradients, also through a loss scaler
        # (`loss_scaler(loss, optimizer)`)
        scaled = {id(c) for c, _q in m.calls if backward_step_object(c)}
        if wraps or sync_bn or m.mentions("accelerator.backward") or _tests_for_wrapper(m):
            self.backwards = {id(c) for c in m.method_calls("backward")} | scaled
        elif reduces_across_ranks(m):
            # an engine module that all-reduces its step's metrics (`misc.all_reduce_mean(loss)`) is
            # handed the DDP model by its caller (MAE's and DeiT's engine_*.py); a loss's backward,
            # not a library's (`dist_autograd.backward` is RPC's)
            self.backwards = {
                id(c)
                for c in m.method_calls("backward")
                if (dotted(c.func.value) or "").split(".", 1)[0] not in m.aliases
            } | scaled
        direct |= self.backwards
        # a forward of the DDP model itself (``model(x)`` after ``model = DDP(...)``; not
        # ``model.module(x)``) may broadcast its buffers
        models = {name for c in wraps if (name := m.assigned_to(c)) is not None}
        # and the attributes a class keeps such a model in (``self.model = model`` after ``model =
        # self._wrap(model)``, or handed to its base class's constructor)
        models |= {a for held in (m.class_ddp_attrs, m.class_fsdp_attrs) for attrs in held.values() for a in attrs}
        self.models = models
        if models:
            direct |= {id(c) for c, _q in m.calls if dotted(c.func) in models and _may_hold_wrapper(m, c, models)}
            # another module's training function handed the DDP model (`train(cfg, loader, model,
            # ...)` once per epoch): its forwards and backwards all-reduce out of sight
            for c, q in m.calls:
                last = (q or dotted(c.func) or "").rsplit(".", 1)[-1]
                if (
                    last not in m.function_names
                    and (last.startswith("train") or last == "fit")
                    and not (q or "").startswith("torch.")
                    and any(dotted(a) in models for a in [*c.args, *(k.value for k in c.keywords)])
                ):
                    direct.add(id(c))
        self.direct = direct
        # the file's functions that communicate, by name: one walk of each body, then a fixed point
        # over the calls between them
        bodies: dict[str, list] = {}
        for fn in m.functions:
            bodies.setdefault(fn.name, []).append(fn)
        self.bodies = bodies
        self.funcs: dict[str, ast.Call] = {}
        calls_own: dict[str, list[tuple[ast.Call, str]]] = {}
        for n, _q in m.calls:  # in source order; each call counts for its innermost function
            own = None if id(n) in direct else self._own(n)
            if own is None and id(n) not in direct:
                continue
            fn = m.enclosing_function(n)
            if fn is None:
                continue
            if own is None:
                self.funcs.setdefault(fn.name, n)
            else:
                calls_own.setdefault(fn.name, []).append((n, own))
        self._calls_own = calls_own
        _close(self.funcs, calls_own)
        # the file's functions that run a backward pass of the DDP model (a training step)
        self.train_funcs: dict[str, ast.Call] = {}
        for n, _q in m.calls:
            if id(n) in self.backwards and (fn := m.enclosing_function(n)) is not None:
                self.train_funcs.setdefault(fn.name, n)
        _close(self.train_funcs, calls_own)

    def training_loops(self) -> tuple[frozenset[int], dict[int, tuple]]:
        """Where a loop that runs a backward pass of the DDP model takes its batches from a data
        loader: the ids of such ``for`` loops over one, and the ``next(it)`` calls in such loops
        (id -> (call, loop)). DDP trains each rank on its own shard: the batch is the rank's own."""
        if not self.backwards:
            return frozenset(), {}
        m = self.m
        training = [
            loop
            for loop in m.nodes(ast.For, ast.AsyncFor, ast.While)
            if any(id(n) in self.backwards or self._own(n) in self.train_funcs for n in _calls_in(loop.body))
        ]
        if not training:
            return frozenset(), {}
        loaders = Flow(
            m, [c for c, q in m.calls if _names_loader((q or dotted(c.func) or "").rsplit(".", 1)[-1])]
        )

        def loader(e: ast.AST, depth: int = 0) -> bool:
            e = _unwrap(e)
            named = _names_loader(dotted(e) if isinstance(e, (ast.Name, ast.Attribute)) else None)
            if named or loaders.carries(e):  # not a count, a list of optimizers or tasks
                return True
            # a logger or prefetcher that hands out the loader's batches as it goes
            # (`metric_logger.log_every(data_loader, print_freq)`, `prefetch(loader)`)
            # (not a builtin: `range(len(loader))` counts the batches)
            return (
                isinstance(e, ast.Call)
                and bool(e.args)
                and depth < 2
                and not (isinstance(e.func, ast.Name) and hasattr(builtins, e.func.id))
                and loader(e.args[0], depth + 1)
            )

        loops, draws = set(), {}
        for loop in training:
            if not isinstance(loop, ast.While) and loader(loop.iter):
                loops.add(id(loop))
            for n in _calls_in(loop.body):
                if isinstance(n.func, ast.Name) and n.func.id == "next" and n.args and loader(n.args[0]):
                    draws[id(n)] = (n, loop)  # loops come outer first: the innermost one stays
                elif self._forward(n, loop):
                    draws[id(n)] = (n, loop)
        return frozenset(loops), draws

    def _forward(self, n: ast.Call, loop: ast.AST) -> bool:
        """A forward pass of the DDP model whose output the step backpropagates, however the step
        gets its inputs (``logits = model(x)``, ``logprobs = per_token_logprobs(model, ids)`` then a
        loss made of it and ``loss.backward()``): DDP trains every rank on inputs of its own, so
        what the training forward returns is the rank's own. (A call handed the model whose result
        no backward reads, ``score = evaluate(model, val)``, may compute the same on every rank.)"""
        if not self.models:
            return False
        name = dotted(n.func)
        if name is None or (self.m.qualname(n.func) or "").startswith("torch."):
            return False
        if name not in self.models and not any(dotted(a) in self.models for a in n.args):
            return False
        return _feeds_backward(self.m, n, loop, self.backwards)

    def _own(self, call: ast.Call) -> str | None:
        name = dotted(call.func)
        if name is None:
            return None
        root, _, _ = name.partition(".")
        if "." in name and root in self.m.aliases:
            return None  # torch.save, np.mean: not this file's function
        last = name.rsplit(".", 1)[-1]
        return last if last in self.bodies else None

    def _first(self, stmts, skip: range | None = None, unpaired: bool = False) -> ast.Call | None:
        """The first communicating call in ``stmts``: a direct one if there is any, else a call of
        the file's own function that communicates (``f()`` or ``self.f()`` before ``obj.f()``,
        which may be another class's method of the same name: ``model.train()``)."""
        through = maybe = None
        for n in _calls_in(stmts):
            if skip is not None and n.lineno in skip:
                continue
            if unpaired and _paired(self.m, n):
                continue  # reached by some ranks only: not where the others wait for the leavers
            if id(n) in self.direct:
                return n
            if through is None:
                own = self._own(n)
                if own is not None and own in self.funcs:
                    receiver = n.func.value if isinstance(n.func, ast.Attribute) else None
                    if receiver is None or (
                        isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")
                    ):
                        through = n
                    elif maybe is None:
                        maybe = n
        return through or maybe

    def first(self, stmts, skip: range | None = None, unpaired: bool = False) -> ast.Call | None:
        """The first call in ``stmts`` (outside the lines ``skip``) that communicates; with
        ``unpaired``, the first that every rank reaches."""
        return self._first(stmts, skip, unpaired)

    def describe(self, call: ast.Call) -> str:
        own = self._own(call)
        if id(call) not in self.direct and own in self.funcs:
            inner = self.funcs[own]
            return f"`{_short(call.func)}()` (line {call.lineno}, which reaches `{_short(inner.func)}` on line {inner.lineno})"
        return f"`{_short(call.func)}` (line {call.lineno})"


_WRAPPERS = frozenset(("enumerate", "tqdm", "iter", "islice", "zip", "track", "progress_bar"))


def _may_hold_wrapper(m, call: ast.Call, models: set[str]) -> bool:
    """``model(x)`` where ``model`` is a plain name may be the DDP wrapper there: not where the
    function binds it only to something else (``model = parts.model``, the bare module another
    function wrapped into its own local of that name), nor where it is a parameter of a function
    of this file that every call hands such a value (``generate(model, x)`` from a sampling
    function that took the bare module)."""
    if not isinstance(call.func, ast.Name):
        return True
    return _name_may_hold_wrapper(m, call.func.id, m.enclosing_function(call), models, 0)


def _name_may_hold_wrapper(m, name: str, fn, models: set[str], depth: int) -> bool:
    if fn is None or depth > 4 or isinstance(fn, ast.Lambda):
        return True
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    bound = [
        n.value
        for n in walk(fn)
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Name) and t.id == name
    ]
    if name not in params and not any(a.arg == name for a in fn.args.kwonlyargs):
        if not bound or any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in walk(fn)):
            return True  # a global or a closure's: as the file names it
        return any(_value_may_be_wrapper(m, v, models) for v in bound)
    if bound or isinstance(m.parents.get(fn), ast.ClassDef) or name not in params:
        return True
    at = params.index(name)
    sites = [c for c, _q in m.calls if isinstance(c.func, ast.Name) and c.func.id == fn.name]
    if not sites:
        return True  # called from elsewhere: whatever it is handed
    for c in sites:
        given = next((k.value for k in c.keywords if k.arg == name), None)
        if given is None and at < len(c.args):
            given = c.args[at]
        if given is None or any(isinstance(a, ast.Starred) for a in c.args) or any(k.arg is None for k in c.keywords):
            return True
        if isinstance(given, ast.Name):
            if given.id in models and _name_may_hold_wrapper(m, given.id, m.enclosing_function(c), models, depth + 1):
                return True
        elif _value_may_be_wrapper(m, given, models):
            return True
    return False


def _value_may_be_wrapper(m, v: ast.AST, models: set[str]) -> bool:
    """``v`` may be a DDP wrapper: one of the names the file wraps into, or a call that may return
    one (any but a move of a module that is not: ``parts.model.to(device)``)."""
    while isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in SAME_MODULE:
        v = v.func.value
    if isinstance(v, ast.Call):
        return True
    return dotted(v) in models


def _close(found: dict[str, ast.Call], calls_own: dict[str, list]) -> None:
    """Add to ``found`` the functions that call one in it, until nothing changes."""
    for _ in range(6):
        changed = False
        for name, pairs in calls_own.items():
            if name in found:
                continue
            hit = next((c for c, own in pairs if own in found), None)
            if hit is not None:
                found[name] = hit
                changed = True
        if not changed:
            break


def _unwrap(it: ast.AST) -> ast.AST:
    """What ``enumerate(...)``, ``tqdm(...)`` and the like iterate over: their first argument."""
    while isinstance(it, ast.Call) and it.args and (dotted(it.func) or "").rsplit(".", 1)[-1] in _WRAPPERS:
        it = it.args[0]
    return it


def _names_loader(name: str | None) -> bool:
    """A data loader by its name or its class's (``train_loader``, ``DataLoader(...)``, ``val_dl``,
    ``batches``; ``train_ds`` too: iterated by a loop that trains, it hands out batches)."""
    last = (name or "").rsplit(".", 1)[-1].lower()
    return names_a_loader(name) or last == "batches" or last.endswith(("_batches", "_ds"))


def _unbound_elsewhere(values: RankValues, o) -> bool:
    """Every definition of the name ``o`` sets (in its function) is one that only some ranks run:
    the others never bind it, so they raise NameError (AttributeError) where they read it, before
    any collective could part them. Not an object fed a value: it exists on every rank."""
    keys = {d.key for d in values.defs if d.stmt is o.node and d.key[0] != "fed"}
    if len(keys) != 1:
        return False
    key = keys.pop()
    defs = [d for d in values.by_key.get(key, ()) if d.stmt is not None]
    fn = next((d.fn for d in defs if d.stmt is o.node), None)
    if fn is not None and key[1] in {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}:
        return False  # a parameter: every rank has the caller's value
    test_if = values.m.parents.get(o.test)
    if not isinstance(test_if, ast.If) or not test_if.body:
        return False
    # the side of the rank test the origin is on (an `else: x = None` binds it for the others)
    side = test_if.body if _within(o.node, test_if.body) else test_if.orelse
    return bool(side) and bool(defs) and all(_within(d.stmt, side) for d in defs)


def _within(node: ast.AST, block: list) -> bool:
    return bool(block) and block[0].lineno <= node.lineno <= (block[-1].end_lineno or block[-1].lineno)


def _tests_for_wrapper(m) -> bool:
    return any(
        isinstance(c.func, ast.Name)
        and c.func.id == "isinstance"
        and len(c.args) == 2
        and "DistributedDataParallel" in ast.unparse(c.args[1])
        for c, _q in m.calls
    )


def _paired(m, call: ast.Call) -> bool:
    """The per-rank walk already sees this call reached by some ranks only (DDP301 reports it)."""
    for run, ranks in m.reach(call):
        if 0 < len(ranks) < run.world_size:
            return True
    return False


def check(m):
    # (a module that all-reduces with the other ranks runs on each of them, whoever started them)
    if not (m.distributed_context or reduces_across_ranks(m)) or m.pinned_rank is not None:
        return
    comms = _Comms(m)
    if not comms.direct:
        return
    loops, draws = comms.training_loops()
    # an evaluation loop over a sharded loader reads the rank's own samples too
    values = RankValues(m, loops | sharded_passes(m), draws, clocks=True)
    reported: set[int] = set()
    # a step skipped on a value of the rank's own batch (`if torch.isnan(loss): continue`) is the
    # cause; what it later makes differ (a step counter) is not a finding of its own
    if comms.backwards:
        skips: set[int] = set()  # the ifs reported here
        for node, leave, c, origin in _skips_on_batch_value(m, comms, values):
            if _set_by_reported_skip(m, node.test, skips):
                continue  # a flag an earlier skip sets (`need_break = True; break`): the same cause
            skips.add(id(node))
            reported |= {id(node), id(origin.node)}
            how = _how(leave)
            why = (
                "is computed from this rank's own batch"
                if origin.data
                else f"reads `{origin.name}`, set on some ranks only (line {origin.node.lineno})"
            )
            if isinstance(leave, ast.Expr) and not _clean_exit(m, leave):
                message = (
                    f"`{_short(node.test)}` {why}, and where it holds this rank exits alone (`{how}`, "
                    f"line {leave.lineno}) while the others go on to {comms.describe(c)} and wait "
                    "for it in the gradient all-reduce: torchrun stops them on one node, but on the "
                    "other nodes (or under srun) they hang until the NCCL timeout"
                )
                hint = "decide on every rank together: all-reduce the loss (or a 'bad' flag) before the test"
            else:
                message = (
                    f"`{_short(node.test)}` {why}, and where it holds the "
                    f"rank {'ends with status 0' if isinstance(leave, ast.Expr) else 'moves on'} (`{how}`, "
                    f"line {leave.lineno}) without {comms.describe(c)}: the other "
                    "ranks run it and wait for this one in its gradient all-reduce, or their collectives "
                    "pair with the wrong step"
                )
                hint = (
                    "make every rank take the same path: all-reduce a 'skip' flag (or the loss) and "
                    "let every rank skip the step together"
                )
            yield m.finding(CODE, node, message, SEVERITY, hint=hint)
    # one finding per batch that decides: first the exit out of the batch's own loop
    decisions = sorted(values.decisions, key=lambda d: d.origin.data and d.region[:1] != (d.origin.node,))
    for d in decisions:
        if id(d.origin.node) in reported:
            continue
        if not d.origin.data and _unbound_elsewhere(values, d.origin):
            continue  # the other ranks have no value at all: they fail on the name first (DDP306)
        if not d.origin.data and round_robin_share(m, d.origin.test) is not None:
            continue  # `if i % world_size == rank: shard.append(x)`: every rank its own share, as a sampler's
        finding = _judge(m, comms, d)
        if finding is None:
            continue
        anchor, message, hint = finding
        if id(anchor) in reported:
            continue
        reported.add(id(anchor))
        if d.origin.data:
            reported.add(id(d.origin.node))
        yield m.finding(CODE, anchor, message, SEVERITY, hint=hint)
    if comms.backwards:
        yield from _skips_on_exception(m, comms)
    yield from _file_system_decisions(m, comms, reported)


# raised on every rank at once (Ctrl-C, exit) or by iteration itself: not a rank's own data
_EVERY_RANK = frozenset(
    ("KeyboardInterrupt", "SystemExit", "StopIteration", "StopAsyncIteration", "GeneratorExit")
)
_LEAVE = (ast.Continue, ast.Break, ast.Return)


def _exits(m, st: ast.stmt) -> bool:
    """``sys.exit(1)``, ``exit()``, ``os._exit(2)``: the process ends here, whatever its status."""
    return (
        isinstance(st, ast.Expr)
        and isinstance(st.value, ast.Call)
        and (m.qualname(st.value.func) or dotted(st.value.func)) in EXIT_CALLS
    )


def _clean_exit(m, st: ast.stmt) -> bool:
    """``exit()``, ``sys.exit(0)``: the process ends with status 0, so the launcher waits for the
    others instead of stopping the job, and they wait in their next collective for this one."""
    if not _exits(m, st):
        return False
    args = st.value.args
    return not args or (isinstance(args[0], ast.Constant) and args[0].value in (0, None))


def _how(leave: ast.stmt) -> str:
    kind = {ast.Continue: "continue", ast.Break: "break", ast.Return: "return"}.get(type(leave))
    return kind or ast.unparse(leave).strip()


def _leaves(handler: ast.ExceptHandler) -> ast.stmt | None:
    """The ``continue``/``break``/``return`` a handler ends with, at its top level; None when it
    re-raises at its top level. A raise nested under a test (an OOM handler that re-raises what it
    does not handle) leaves the skip in place for the errors it does handle."""
    if any(isinstance(st, ast.Raise) for st in handler.body):
        return None
    last = handler.body[-1] if handler.body else None
    return last if isinstance(last, _LEAVE) else None


def _skips_on_exception(m, comms: _Comms):
    """``try: loss = ddp_model(batch); loss.backward() except SomeError: continue``: the error comes
    from this rank's own batch, so the ranks it hits skip the step's gradient all-reduce while the
    others wait in it."""
    tries = [t for t in m.nodes(ast.Try) if any(_leaves(h) is not None for h in t.handlers)]
    if not tries:
        return
    loops, draws = comms.training_loops()
    batch_loops = set(loops) | {id(loop) for _call, loop in draws.values()}
    for node in tries:
        # the step on one batch: an error there comes from this rank's own data (an error around a
        # whole epoch may come from a callback that judges metrics every rank shares)
        loop = m.enclosing_loop(node)
        if loop is None or (id(loop) not in batch_loops and not _steps_itself(comms, loop)):
            continue
        # the step inside the try, or, for an error while fetching the batch, the rest of the
        # iteration that the handler's `continue` skips
        c = next((n for n in _calls_in(node.body) if id(n) in comms.backwards or _in_step(comms, n)), None)
        if c is None:
            c = next((n for n in _calls_in(_after(m, node, loop)) if id(n) in comms.backwards), None)
        if c is None or under_join(m, node):
            continue
        for h in node.handlers:
            names = {(dotted(t) or "").rsplit(".", 1)[-1] for t in ast.walk(h.type)} if h.type else set()
            if names & _EVERY_RANK or (leave := _leaves(h)) is None or comms.first(h.body) is not None:
                continue
            if not isinstance(leave, ast.Return) and m.enclosing_loop(leave) is not loop:
                continue
            caught = ast.unparse(h.type) if h.type is not None else "any exception"
            how = {ast.Continue: "continue", ast.Break: "break", ast.Return: "return"}[type(leave)]
            yield m.finding(
                CODE,
                h,
                f"a `{caught}` raised by this rank's own batch is caught here and the rank moves on "
                f"(`{how}`, line {leave.lineno}) without {comms.describe(c)}: the other ranks run "
                "it and wait for this one in its gradient all-reduce, or their collectives pair "
                "with the wrong step",
                SEVERITY,
                hint="make every rank take the same path: filter such batches before training, or "
                "all-reduce a 'skip' flag and let every rank skip the step together",
            )
            break


def _skips_on_batch_value(m, comms: _Comms, values):
    """``if torch.isnan(loss): continue`` before the backward, in a loop over this rank's batches:
    the test reads a value of the rank's own batch, so the ranks where it holds skip the step's
    gradient all-reduce while the others wait in it. Yields (the if, its exit, the skipped call,
    the origin of the batch value)."""
    loops, draws = comms.training_loops()
    batch_loops = set(loops) | {id(loop) for _call, loop in draws.values()}
    for node in m.nodes(ast.If):
        if node.orelse or not node.body:
            continue
        leave = node.body[-1]
        # a rank that ends its process on its own batch (DINO's `if not math.isfinite(loss):
        # sys.exit(1)`) leaves the others in the all-reduce: torchrun stops them on one node, but
        # the workers of other nodes (or of an srun launch) wait for it until the NCCL timeout
        ends = _exits(m, leave)
        if not ends and not isinstance(leave, _LEAVE):
            continue
        if comms.first(node.body) is not None:
            continue  # the arm that leaves communicates itself
        loop = m.enclosing_loop(node)
        if loop is None or (id(loop) not in batch_loops and not _steps_itself(comms, loop)):
            continue
        if not ends and not isinstance(leave, ast.Return) and m.enclosing_loop(leave) is not loop:
            continue
        fn = m.enclosing_function(node)
        o = values.reads(node.test, fn)
        # (a value set on some ranks only parts them the same way as one of the rank's own batch)
        if o is None or o.clock or values.layout_test(node.test, fn):
            continue
        if not o.data and _unbound_elsewhere(values, o):
            continue  # the other ranks fail on the name first (DDP306)
        c = next(
            (n for n in _calls_in(_after(m, node, loop)) if id(n) in comms.backwards or _in_step(comms, n)),
            None,
        )
        if c is None and not isinstance(leave, ast.Continue):
            # a rank that leaves the loop (`if torch.isnan(total): break` after the step) skips the
            # steps of the iterations the others still run
            c = next(
                (n for n in _calls_in(loop.body) if id(n) in comms.backwards or _in_step(comms, n)),
                None,
            )
        if c is not None and not under_join(m, node):
            yield node, leave, c, o


def _set_by_reported_skip(m, test: ast.AST, skips: set[int]) -> bool:
    """``test`` reads a name that an ``if`` already reported sets (``if torch.isnan(loss):
    need_break = True; break`` then ``if need_break: break`` in the epoch loop)."""
    for n in ast.walk(test):
        if isinstance(n, ast.Name):
            for _v, node in assignments(m, n.id):
                if any(id(a) in skips for a in m.ancestors(node)):
                    return True
    return False


def _steps_itself(comms: _Comms, loop: ast.AST) -> bool:
    """The loop's own body runs the DDP backward (a loop over training steps, however it gets its
    batches), not only through a function that may run a whole epoch."""
    return any(id(n) in comms.backwards for n in _calls_in(loop.body))


def _after(m, node: ast.AST, loop: ast.AST) -> list[ast.stmt]:
    """The statements of the loop's iteration that follow ``node``."""
    out: list[ast.stmt] = []
    cur = node
    while cur is not loop:
        stmt, block = m.statement_in_block(cur)
        if stmt is None or block is None:
            break
        out += block[block.index(stmt) + 1 :]
        cur = m.parents.get(stmt)
        if cur is None:
            break
    return out


def _in_step(comms: _Comms, c: ast.Call) -> bool:
    """A call of the file's own function that runs a backward pass of the DDP model."""
    return comms._own(c) in comms.train_funcs


def _step_one_way(node: ast.If) -> ast.Call | None:
    """An optimizer, scheduler or scaler step in one arm of ``node`` whose owner the other arm does
    not step."""

    def steps(stmts) -> dict[str, ast.Call]:
        out: dict[str, ast.Call] = {}
        for st in stmts:
            for n in ast.walk(st):
                if (
                    isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute)
                    and n.func.attr == "step"
                    and (owner := training_state(n)) is not None
                ):
                    out.setdefault(owner, n)
        return out

    body, other = steps(node.body), steps(node.orelse)
    alone = [c for o, c in (*body.items(), *other.items()) if (o in body) != (o in other)]
    return min(alone, key=lambda c: c.lineno) if alone else None


def _clock_names(m) -> set[str]:
    """Names and attributes the file assigns from a clock reading, directly or through another such
    name (``elapsed = time() - start`` then ``self.run_time += elapsed``), once per file."""
    found = m.__dict__.get("_ddp305_clock_names")
    if found is not None:
        return found
    assigns = [a for a in m.nodes(ast.Assign, ast.AugAssign, ast.AnnAssign) if a.value is not None]
    found: set[str] = set()
    for _ in range(4):
        grew = False
        for a in assigns:
            if not _arithmetic_of(m, a.value, found):
                continue
            for t in a.targets if isinstance(a, ast.Assign) else [a.target]:
                key = dotted(t)
                if key is not None and key not in found:
                    found.add(key)
                    grew = True
        if not grew:
            break
    m.__dict__["_ddp305_clock_names"] = found
    return found


_NUMERIC = frozenset(("float", "int", "round", "abs", "min", "max"))


def _arithmetic_of(m, e: ast.AST, names: set[str]) -> bool:
    """``e`` computes a number from a clock reading or from one of ``names`` by arithmetic,
    comparison and numeric conversions; a container or another call (a checkpoint dict that holds
    the elapsed time among other things) is something else."""
    if isinstance(e, ast.Call):
        if m.qualname(e.func) in CLOCKS:
            return True
        if isinstance(e.func, ast.Attribute) and e.func.attr == "total_seconds":
            return _arithmetic_of(m, e.func.value, names)  # a datetime difference in seconds
        if (dotted(e.func) or "") in _NUMERIC:
            return any(_arithmetic_of(m, a, names) for a in e.args)
        return False
    if isinstance(e, (ast.Name, ast.Attribute)):
        return dotted(e) in names
    if isinstance(e, ast.BinOp):
        return _arithmetic_of(m, e.left, names) or _arithmetic_of(m, e.right, names)
    if isinstance(e, ast.UnaryOp):
        return _arithmetic_of(m, e.operand, names)
    if isinstance(e, ast.Compare):
        return any(_arithmetic_of(m, x, names) for x in (e.left, *e.comparators))
    if isinstance(e, ast.BoolOp):
        return any(_arithmetic_of(m, x, names) for x in e.values)
    return False


def _reads_clock(m, test: ast.AST) -> bool:
    return _arithmetic_of(m, test, _clock_names(m))


# each process's own look at the file system
_FS_TESTS = frozenset(("os.path.exists", "os.path.isfile", "os.path.isdir", "os.path.lexists"))
_PATH_TESTS = frozenset(("exists", "is_file", "is_dir"))


def _file_test(m, test: ast.AST) -> ast.Call | None:
    """The existence check in ``test`` (``os.path.exists(p)``, ``Path(p).exists()``), when the test
    holds no rank test of its own."""
    found = None
    for n in ast.walk(test):
        if not isinstance(n, ast.Call):
            continue
        q = m.qualname(n.func) or ""
        if q in _FS_TESTS or (
            isinstance(n.func, ast.Attribute)
            and n.func.attr in _PATH_TESTS
            and not n.args
            and (dotted(n.func.value) or "").split(".")[0] not in m.aliases
        ):
            found = found or n
    if found is None or guard_kind(m, test) is not None:
        return None
    return found


def _surely_communicates(comms: _Comms, call: ast.Call) -> bool:
    """A collective itself, or a call of this file's function by its own name (``f()``,
    ``self.f()``), not ``obj.eval()`` that only shares a method's name."""
    if id(call) in comms.direct:
        return True
    receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
    return receiver is None or (isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"))


def _file_system_decisions(m, comms: _Comms, reported: set[int]):
    """``if train_state_path.exists(): ... dist.broadcast_object_list(...)``: each rank looks at the
    file system itself, and on a shared one the answers differ (attribute caching, a file rank 0 is
    writing that moment, storage local to a node), so only some ranks reach the collective. Only a
    collective in one arm and not the other, in code every rank runs."""
    for node in m.nodes(ast.If):
        if id(node) in reported or m.rank_guard(node) is not None or under_join(m, node):
            continue
        if in_spawning_parent(m, node):
            continue  # the launching process alone looks, before or after its workers
        check = _file_test(m, node.test)
        if check is None:
            continue
        body, other = comms.first(node.body, unpaired=True), comms.first(node.orelse, unpaired=True)
        if (body is None) == (other is None) or not _surely_communicates(comms, body or other):
            continue
        c = body or other
        reported.add(id(node))
        yield m.finding(
            CODE,
            node,
            f"`{_short(check)}` (line {check.lineno}) is each process's own look at the file system: on "
            "a shared file system the ranks can see it differently (attribute caching, a file another rank "
            f"is writing right now, storage local to a node), and `{_short(node.test)}` then decides whether "
            f"they run {comms.describe(c)}: the ones that do wait for the others until the timeout",
            SEVERITY,
            hint="check on rank 0 and broadcast the answer (dist.broadcast_object_list), then let every "
            "rank take the same branch",
        )


def _judge(m, comms: _Comms, d: Decision):
    if under_join(m, d.node):
        return None
    o = d.origin
    if o.clock and not _reads_clock(m, d.test):
        return None  # the walk's origin for a test that reads no clock-derived name: not trusted
    set_where = (
        f"`{o.name}` is set on some ranks only (line {o.node.lineno}, under the rank test "
        f"`{_short(o.test)}` on line {o.test.lineno})"
    )
    hint = (
        "take the decision on one rank and broadcast it (dist.broadcast / broadcast_object_list), or "
        "compute the value on every rank, so that every rank takes the same path"
    )
    if o.clock:
        set_where = (
            f"`{o.name}` (line {o.node.lineno}) reads this process's own clock, which differs between "
            "ranks (start times, stragglers, time spent saving), and no collective makes it the same first"
        )
        hint = (
            "decide on one rank and broadcast the decision (dist.broadcast / broadcast_object_list), "
            "or count steps instead of seconds, so that every rank stops at the same step"
        )
    elif o.data:
        set_where = (
            f"values of this rank's own batch (`{o.name}` from `{_short(o.test)}`, line {o.node.lineno}) "
            "differ between ranks, and no collective makes them the same first"
        )
        hint = (
            "reduce the value over the ranks first (dist.all_reduce, accelerator.reduce / gather) "
            "so that every rank takes the same decision"
        )
    if d.kind == "after":
        if comms.first(d.node.body) is not None:
            return None  # the leaving ranks communicate too (the rank-0-first idiom)
        c = comms.first(d.region)
        if c is None or _paired(m, c):
            return None
        return (
            d.node,
            f"the ranks that pass `{_short(d.test)}` (line {d.test.lineno}) leave here; the others go "
            f"on to {comms.describe(c)}, which waits for every rank: it hangs",
            "let every rank reach the collective (move it before the early exit, or exit after it)",
        )
    if d.kind == "exit":
        loop = d.region[0]
        test_if = m.parents.get(d.test)
        span = range(test_if.lineno, (test_if.end_lineno or test_if.lineno) + 1) if test_if else None
        c = comms.first(loop.body, skip=span, unpaired=True)
        if c is None:
            return None
        how = "break" if isinstance(d.node, ast.Break) else "return"
        return (
            (test_if or d.node) if o.data else o.node,
            f"{set_where}; `{_short(d.test)}` (line {d.test.lineno}) then decides the `{how}` on line "
            f"{d.node.lineno} out of the loop on line {loop.lineno}, so some ranks leave while the "
            f"others wait in {comms.describe(c)} of the next iteration: it hangs",
            hint,
        )
    if o.data and d.kind == "if":
        # a batch's values pick one of two ways all the time (``if mask is not None: out =
        # model(x, mask) else: out = model(x)``): only a way that communicates where the other does
        # not parts the ranks
        if (comms.first(d.node.body) is None) == (comms.first(d.node.orelse) is None):
            step = _step_one_way(d.node)
            if step is None:
                return None
            owner = training_state(step)
            return (
                d.node,
                f"{set_where}; `{_short(d.test)}` (line {d.test.lineno}) then decides whether this rank "
                f"runs `{owner}.step()` (line {step.lineno}): the ranks whose own batch trips it skip the "
                "update the others make, and the replicas' weights or learning rates silently drift apart",
                "reduce the value (or a 'skip' flag) over the ranks first, so that every rank steps or "
                "skips together",
            )
    # a collective the per-rank walk sees reached by some ranks only (``if rank == 0: dist.gather(x,
    # lst) else: dist.gather(x)``) is not the witness: the next one every rank reaches is
    c = comms.first(d.region, unpaired=True)
    if c is None:
        return None
    what = "whether" if d.kind in ("if", "rest") else "how often"
    return (
        d.node if (o.data and d.kind in ("if", "rest")) or o.clock else o.node,
        f"{set_where}; `{_short(d.test)}` (line {d.test.lineno}) then decides {what} the ranks run "
        f"{comms.describe(c)}: they part ways and the ones in the collective wait forever",
        hint,
    )
