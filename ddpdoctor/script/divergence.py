"""Rank-dependent values: which names hold a value that some ranks set and others do not, and where
such a value decides whether ranks communicate (the "multi-valued" analysis of MPI checkers such as
PARCOACH, on one file).

A value becomes rank-dependent when it is assigned under a rank test (``if rank == 0: best =
evaluate()``), after an early exit on one (``if rank != 0: return`` ... ``state.patience = 0``), or
under a test that reads such a value; it stays so through assignments, attributes (``self.stop``,
``ctx.flag``: by their text, across the file's functions) and the return values of the file's own
functions (by position in a returned tuple). The rank itself is not a source: ``seed + rank`` is
rank-dependent, but rarely decides control flow, and unknown is not guilty. A value handed to a
collective (``dist.broadcast(stop, 0)``) or made by one (``stop = reduce(stop)``) is the same on every
rank again.

``RankValues(m).decisions`` lists the places where such a value decides whether a region runs (an
``if``, a loop condition or bound, a ``break`` or ``return`` out of a loop), each with the assignment
that made the value rank-dependent: rules ask whether the region communicates.

Flow-insensitive but for one kill: a plain assignment of a same-on-every-rank value before the use, in
a block that holds the use, hides the assignments before it (``stop = flag.item()`` after a
broadcast).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ddpdoctor.script.branches import arms
from ddpdoctor.script.names import SAME_MODULE, dist_op, dotted
from ddpdoctor.script.ranks import distributed_when_true, guard_kind

_ROUNDS = 4
# what reads only the shape of a value, not its contents: alike on every rank for a batch (a
# DistributedSampler gives every rank as many samples)
_SHAPE_CALLS = frozenset(("len", "size", "numel", "dim", "nelement"))
_SHAPE_ATTRS = frozenset(("shape", "ndim", "dtype", "device", "is_cuda"))
# a module's mode flag: `.train()` / `.eval()` set it, not what the object was built from
_MODE_ATTRS = frozenset(("training",))
# calls whose result is the same on every rank (a collective or a wrapper of one); a scatter's is
# what the source rank handed out, its decision, not one some ranks made alone
_UNIFYING = (
    "broadcast", "bcast", "all_reduce", "allreduce", "reduce", "gather", "sync", "all_to_all", "scatter"
)  # bcast: mpi4py
# a project's helper named for combining over the ranks, whose body is elsewhere, when its result is
# kept (`preds = distributed_concat(preds, n)`, `m = mean_across_ranks(x)`; not a setup call such as
# `init_distributed_mode(args)`)
_UNIFYING_RESULT = ("distributed", "across", "ranks")
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
CLOCKS = frozenset(
    (
        "time.time",
        "time.perf_counter",
        "time.monotonic",
        "time.time_ns",
        "time.perf_counter_ns",
        "time.monotonic_ns",
        "timeit.default_timer",
        "datetime.datetime.now",
        "datetime.datetime.utcnow",
    )
)
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


@dataclass(frozen=True)
class Origin:
    """Where a value became rank-dependent: the assignment (or return) and the rank test it sits under,
    or (``data``) the training loop whose batch, the rank's own, it comes from."""

    node: ast.AST  # the statement that sets the value on some ranks only (the loop, for data)
    test: ast.AST  # the rank test that decides it (the loop's iterable, for data)
    name: str  # what holds the value there
    data: bool = False  # computed from the rank's own batch: differs between ranks by their data
    clock: bool = False  # (with data) read from this process's own clock: differs between ranks too


@dataclass(frozen=True)
class Decision:
    """A place where a rank-dependent value decides what runs."""

    # "if", "loop" (a loop's condition or bound), "exit" (break/return out of a loop), "after" (the
    # rest of a block after an early exit on a rank test) or "rest" (the rest of a block after an
    # early ``return``/``continue`` on a value)
    kind: str
    node: ast.AST  # the if / loop / exit statement
    test: ast.AST  # the expression that reads the value
    origin: Origin
    region: tuple  # statements that run on some ranks only ("if"/"loop"), or the loop left ("exit")


@dataclass
class _Def:
    key: tuple
    stmt: ast.AST
    fn: ast.AST | None
    # what decides that this def runs: None, or (kind, test, outer, after) from RankValues._decide
    ctrl: object
    value: ast.AST | None
    pos: int | None  # position in a tuple target
    origin: Origin | None = None
    unifying: bool = False  # the value comes out of a collective: the same on every rank
    failure: bool = False  # set in an ``except`` handler: a failure path, see RankValues._solve
    settled: bool = False  # known to be the same on every rank, whatever else turns out
    # a container defined anew by storing one entry (see RankValues._stored): ("key", k) for
    # ``d[k] = v``, ("prefix", text) for ``d[f"text{i}"] = v``
    entry: tuple | None = None


def _pos(node: ast.AST) -> tuple[int, int]:
    return (node.lineno, node.col_offset)


def _within_node(m, node: ast.AST, outer: ast.AST) -> bool:
    return any(a is outer for a in m.ancestors(node))


def _emptiness_operand(test: ast.Compare) -> ast.AST | None:
    """``x`` of ``len(x) == 0``, ``x.numel() == 0``, ``x.shape[0] == 0`` (either side, any
    comparison with 0): a test of whether ``x`` is empty."""
    sides = [test.left, *test.comparators]
    if len(sides) != 2 or not any(isinstance(c, ast.Constant) and c.value == 0 and not isinstance(c.value, bool) for c in sides):
        return None
    other = next(c for c in sides if not (isinstance(c, ast.Constant) and c.value == 0))
    if isinstance(other, ast.Call):
        f = other.func
        if isinstance(f, ast.Name) and f.id == "len" and len(other.args) == 1:
            return other.args[0]
        if isinstance(f, ast.Attribute) and f.attr in ("numel", "nelement") and not other.args:
            return f.value
        if isinstance(f, ast.Attribute) and f.attr == "size" and other.args:
            return f.value
    if isinstance(other, ast.Subscript) and isinstance(other.value, ast.Attribute) and other.value.attr == "shape":
        return other.value.value
    return None


def _is_unifying(call: ast.Call, bound: bool = False) -> bool:
    name = (dotted(call.func) or "").rsplit(".", 1)[-1].lower()
    return any(w in name for w in _UNIFYING) or (bound and any(w in name for w in _UNIFYING_RESULT))


# collectives whose result only one rank (``dst``) holds: the others keep their own value
_TO_ONE_RANK = frozenset(("reduce", "gather", "gather_object", "reduce_multigpu"))


def _reduces_to_one_rank(m, call: ast.Call) -> bool:
    """``reduce_loss(loss)``, this file's helper whose only collectives are ``dist.reduce`` or
    ``dist.gather``: what its name promises holds on the destination rank alone."""
    if not isinstance(call.func, ast.Name):
        return False
    fn = next((f for f in m.functions if f.name == call.func.id), None)
    if fn is None:
        return False
    ops = {dist_op(m.qualname(n.func) or "") for n in ast.walk(fn) if isinstance(n, ast.Call)} - {None}
    return bool(ops) and ops <= _TO_ONE_RANK


def _storage_of(a: ast.AST) -> ast.AST:
    """What an in-place collective changes when handed ``a``: ``logs["loss"].detach()`` and
    ``x.data`` share ``logs``'s and ``x``'s storage."""
    while True:
        if isinstance(a, ast.Subscript):
            a = a.value
        elif isinstance(a, ast.Call) and isinstance(a.func, ast.Attribute) and a.func.attr == "detach" and not a.args:
            a = a.func.value
        elif isinstance(a, ast.Attribute) and a.attr == "data":
            a = a.value
        else:
            return a


def _bound_result(m, call: ast.Call) -> set[str] | None:
    """The names the result of ``call`` is assigned to, or None when the call stands alone."""
    parent = m.parents.get(call)
    if isinstance(parent, ast.Assign) and parent.value is call:
        targets = parent.targets
    elif isinstance(parent, (ast.AnnAssign, ast.AugAssign)) and parent.value is call:
        targets = [parent.target]
    else:
        return None
    return {d for t in targets for n in ast.walk(t) if (d := dotted(n)) is not None}


def _same_block(parent: ast.AST, stmt: ast.stmt, holders: set[int]) -> bool:
    """``stmt`` sits in the list of ``parent`` (a body, an ``else``) that also holds one of
    ``holders`` (the use and its ancestors), not in the other arm."""
    for name in ("body", "orelse", "finalbody", "handlers"):
        block = getattr(parent, name, None)
        if isinstance(block, list) and any(s is stmt for s in block):
            return any(id(s) in holders for s in block)
    return False


def _exits(body: list) -> bool:
    # (also from inside a `with`: `with open(cache) as f: return pickle.load(f)`)
    return any(
        isinstance(s, (ast.Return, ast.Raise, ast.Continue, ast.Break))
        or (isinstance(s, (ast.With, ast.AsyncWith)) and _exits(s.body))
        for s in body
    )


def _skips_rest(body: list) -> bool:
    """The block ends by skipping what follows it and the process goes on (``return``,
    ``continue``): not a ``raise`` or an exit, which end the rank's work another way."""
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Continue))


def _rest_of(m, st: ast.stmt, after: list) -> tuple:
    """What runs after ``st`` until its loop's iteration or its function ends: the rest of its own
    block, then of each block around it (an ``else:`` that returns early skips what follows the
    whole ``if``)."""
    out = list(after)
    node = st
    while True:
        parent = m.parents.get(node)
        if parent is None or isinstance(parent, (*_FUNCS, ast.ClassDef, ast.Module, ast.For, ast.AsyncFor, ast.While)):
            return tuple(out)
        outer = m.parents.get(parent)
        block = next(
            (b for f in ("body", "orelse", "finalbody") if isinstance(b := getattr(outer, f, None), list) and parent in b),
            None,
        )
        if block is None:
            return tuple(out)
        out.extend(block[block.index(parent) + 1 :])
        node = parent


class RankValues:
    def __init__(
        self,
        m,
        data_loops: frozenset[int] = frozenset(),
        data_draws: dict | None = None,
        to_one_rank: bool = False,
        clocks: bool = False,
    ):
        """``data_loops``: ids of the ``for`` loops whose items are the rank's own batches (a DDP
        training loop: each rank trains on its own shard of the data); ``data_draws``: id of a
        ``next(it)`` call that draws such a batch -> the loop it trains in. What is computed from
        them differs between ranks until a collective makes it the same."""
        self.m = m
        # ``to_one_rank``: a reduce or gather to rank 0 counts as reducing (for questions about what
        # rank 0 reports, where it holds the whole)
        self.to_one_rank = to_one_rank
        self.data_loops = data_loops
        self._data_defs: list[_Def] = []
        self._draws: dict[int, Origin] = {
            i: Origin(loop, call, dotted(call.args[0]) or "batch" if call.args else "batch", data=True)
            for i, (call, loop) in (data_draws or {}).items()
        }
        # batches drawn by `next(it)`: what the file's own functions compute from their arguments is
        # the rank's own too; a clock read alone does not make every such call suspect
        self._batch_draws = bool(self._draws)
        if clocks:
            # each process reads its own clock: a deadline or a time budget (`while time.time() <
            # end`) expires at a different step on each rank
            for call, q in m.calls:
                if q in CLOCKS and not call.args:
                    self._draws[id(call)] = Origin(call, call, f"{dotted(call.func) or q}()", data=True, clock=True)
        self.defs: list[_Def] = []
        self.by_key: dict[tuple, list[_Def]] = {}
        self.returns: dict[str, dict[int | None, Origin]] = {}  # function name -> position -> origin
        self.unified: set[tuple] = set()  # keys handed to a collective somewhere
        self._unified_by: dict[tuple, list[ast.Call]] = {}  # key -> the collectives it is handed to
        self._sinks: list[tuple] = []  # (kind, node, test, ctrl, region) found by the walk
        self.funcs = {fn.name for fn in m.functions}
        self._defs_named: dict[str, list] = {}
        for f in m.functions:
            self._defs_named.setdefault(f.name, []).append(f)
        self._own_calls: list[tuple] = []  # (call, the function it is in): the file's own functions
        self._params_done: set[tuple] = set()
        self._return_sites: list[tuple] = []  # (Return, fn, ctrl)
        self._handlers = 0  # depth of ``except`` handlers the walk is in
        self._entries_whole = True  # False while return values are read (see _stored)
        self._item_bases: dict[tuple, tuple] = {}  # an entry's key -> its container's key
        self._leaf_memo: dict[int, tuple] = {}
        self.tainted: set[tuple] = set()  # keys with a rank-dependent definition
        self._any_rank = False
        # (per file: several rules build their own RankValues)
        self._stateful = m.__dict__.get("_rv_stateful")
        if self._stateful is None:
            self._stateful = m.__dict__["_rv_stateful"] = _stateful_objects(m)
        self._lists = m.__dict__.get("_rv_lists")
        if self._lists is None:
            self._lists = m.__dict__["_rv_lists"] = _made_lists(m)
        self._keep: list[ast.AST] = []  # synthetic values made by the walk (their ids stay theirs)
        self._classes = {c.name: c for c in m.nodes(ast.ClassDef)} if self._stateful else {}
        self._effect_calls: dict[str, dict[int, tuple]] = {}  # own function -> {id of call: (ctrl, call)}
        for fn in (m.tree, *m.functions):
            self._walk(fn.body, fn if fn is not m.tree else None, None, [])
        if self._any_rank:
            self._walk_rank_only_functions()
        if not (self._any_rank or self._data_defs or self._draws):  # nothing can differ between ranks
            self.decisions: list[Decision] = []
            return
        self._note_unifying()
        if self._data_defs or self._batch_draws:
            for call, _q in m.calls:
                callee = (dotted(call.func) or "").rsplit(".", 1)[-1]
                if callee in self._defs_named and (call.args or call.keywords):
                    self._own_calls.append((call, m.enclosing_function(call)))
        for d in self.defs:
            self.by_key.setdefault(d.key, []).append(d)
        self._data_keys = frozenset(d.key for d in self._data_defs)  # names a data loop binds
        self._solve()
        self.decisions = self._decisions()

    # -- keys --------------------------------------------------------------------------------
    def _key(self, target: ast.AST, fn) -> tuple | None:
        name = dotted(target) if isinstance(target, (ast.Name, ast.Attribute)) else None
        if name is None:
            return None
        if "." in name:
            return ("attr", name)
        return (id(fn) if fn is not None else None, name)

    # -- the walk: definitions, returns and tests, with what controls them ---------------------
    def _decide(self, test: ast.AST, ctrl, after: bool = False):
        """What controls a region under ``test``: ("rank", test, outer, after) for a rank test,
        ("test", test, outer, after) for any other (rank-dependent once it reads such a value, which
        _solve decides). ``after``: the region is the rest of a block after an early exit."""
        kind = "rank" if guard_kind(self.m, test) is not None else "test"
        self._any_rank |= kind == "rank"
        return (kind, test, ctrl, after)

    def _walk(self, body: list, fn, ctrl, loops: list) -> None:
        for i, st in enumerate(body):
            t = type(st)
            if t in _FUNCS or t is ast.ClassDef:
                continue  # walked on its own (methods are in m.functions)
            if t is ast.If:
                inner = self._decide(st.test, ctrl)
                rank = inner[0] == "rank"
                if not rank:
                    self._sinks.append(("if", st, st.test, ctrl, (*st.body, *st.orelse), fn))
                self._walk(st.body, fn, inner, loops)
                self._walk(st.orelse, fn, inner, loops)
                if _exits(st.body):
                    if rank and ctrl is None and not _every_rank_exits_when_distributed(st.test):
                        # an early exit on the rank: the rest of this block runs on the others only
                        self._sinks.append(("after", st, st.test, None, tuple(body[i + 1 :]), fn))
                    elif not rank and _skips_rest(st.body):
                        # ``if elapsed < every: return``: the test decides whether the rest runs
                        rest = _rest_of(self.m, st, body[i + 1 :])
                        if rest:
                            self._sinks.append(("rest", st, st.test, ctrl, rest, fn))
                    self._walk(body[i + 1 :], fn, self._decide(st.test, ctrl, after=True), loops)
                    return
            elif t is ast.While:
                inner = self._decide(st.test, ctrl)
                if inner[0] != "rank":
                    self._sinks.append(("loop", st, st.test, ctrl, tuple(st.body), fn))
                    inner = ctrl  # walked as many times as the test says: not a region of its own
                self._walk(st.body, fn, inner, [*loops, st])
                self._walk(st.orelse, fn, ctrl, loops)
            elif t in (ast.For, ast.AsyncFor):
                bound = _range_bound(st.iter)
                if bound is not None:  # not ``for b in tqdm(loader)``: a wrapper keeps the length
                    self._sinks.append(("loop", st, bound, ctrl, tuple(st.body), fn))
                if id(st) in self.data_loops:
                    self._data_def(st, fn, ctrl)
                else:
                    self._def(st.target, st, fn, ctrl, None)
                self._walk(st.body, fn, ctrl, [*loops, st])
                self._walk(st.orelse, fn, ctrl, loops)
            elif t in (ast.With, ast.AsyncWith):
                for item in st.items:
                    if item.optional_vars is not None:
                        self._def(item.optional_vars, st, fn, ctrl, item.context_expr)
                self._walk(st.body, fn, ctrl, loops)
            elif t is ast.Try or t.__name__ == "TryStar":
                for part in (st.body, st.orelse, st.finalbody):
                    self._walk(part, fn, ctrl, loops)
                self._handlers += 1
                try:
                    for h in st.handlers:
                        self._walk(h.body, fn, ctrl, loops)
                finally:
                    self._handlers -= 1
            elif t is ast.Assign:
                for target in st.targets:
                    if isinstance(target, ast.Subscript):
                        self._stored(target, st, fn, ctrl, st.value)
                    else:
                        self._def(target, st, fn, ctrl, st.value)
            elif t in (ast.AugAssign, ast.AnnAssign):
                if st.value is not None:
                    if isinstance(st.target, ast.Subscript):
                        self._stored(st.target, st, fn, ctrl, st.value)
                    else:
                        self._def(st.target, st, fn, ctrl, st.value, aug=t is ast.AugAssign)
            elif t is ast.Expr and isinstance(st.value, ast.Call):
                self._note_effect_call(st.value, ctrl)
                self._grown(st.value, st, fn, ctrl)
                if self._stateful:
                    self._fed(st.value, st, fn, ctrl)
            elif t is ast.Return:
                if fn is not None:
                    self._return_sites.append((st, fn, ctrl))
                if loops:
                    self._sinks.append(("exit", st, None, ctrl, (loops[0],), fn))
            elif t in (ast.Break,) and loops:
                self._sinks.append(("exit", st, None, ctrl, (loops[-1],), fn))

    def _note_effect_call(self, call: ast.Call, ctrl) -> None:
        """A call of the file's own function (``self.load(ckpt)``, ``restore()``) made for its effect."""
        f = call.func
        if isinstance(f, ast.Name):
            name = f.id
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            name = f.attr
        else:
            return
        if name in self._defs_named:
            self._effect_calls.setdefault(name, {})[id(call)] = (ctrl, call)

    def _walk_rank_only_functions(self) -> None:
        """A function of the file that only some ranks call (``if is_leader: self.load_from_latest(d)``,
        which calls ``self.load(ckpt)``, which sets ``self.start_epoch``): the attributes it sets are
        set on those ranks only. Walked again under the rank test of its calls, for those attributes
        alone (its own tests and exits were judged in the first walk); then what it calls, in turn."""
        done: set[str] = set()
        counts = _own_call_counts(self.m)
        for _ in range(3):
            walked = False
            for name, sites in list(self._effect_calls.items()):
                fns = self._defs_named[name]
                # one def to walk, called under a rank test somewhere (not in both arms of one)
                ranked = [c for c, _call in sites.values() if _under_rank(c)]
                if name in done or len(fns) != 1 or not ranked or _both_arms(self.m, [c for _, c in sites.values()]):
                    continue
                done.add(name)
                walked = True
                kept, sinks = len(self.defs), len(self._sinks)
                returns, data = len(self._return_sites), len(self._data_defs)
                self._walk(fns[0].body, fns[0], ranked[0], [])
                fresh = [d for d in self.defs[kept:] if d.key[0] == "attr"]
                before = self.defs[:kept]
                del self._sinks[sinks:]
                if counts.get(name) == len(ranked):
                    # every call is under a rank test: its defs of the first walk, as if every rank
                    # ran it, are replaced, and its own tests part no ranks (one rank runs them; the
                    # call's rank test is where they part, DDP301's question)
                    redone = {id(d.stmt) for d in fresh}
                    before = [d for d in before if id(d.stmt) not in redone]
                    self._sinks[:] = [k for k in self._sinks if k[5] is not fns[0]]
                self.defs[:] = before + fresh
                del self._return_sites[returns:]
                del self._data_defs[data:]
            if not walked:
                return

    def _def(self, target, stmt, fn, ctrl, value, aug: bool = False) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for pos, elt in enumerate(target.elts):
                if isinstance(elt, ast.Starred):
                    elt = elt.value
                key = self._key(elt, fn)
                if key is not None:
                    v = value
                    if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                        v, p = value.elts[pos], None
                    else:
                        p = pos
                    self.defs.append(_Def(key, stmt, fn, ctrl, v, p, failure=self._handlers > 0))
            return
        key = self._key(target, fn)
        if key is not None and not aug and _moved_in_place(target, value):
            return  # `model = model.to(device)` on some ranks: the same module, moved; no new value
        if key is not None:
            if aug and isinstance(target, (ast.Name, ast.Attribute)):
                # `loss /= steps`: the new value reads the old one as well as the operand
                value = ast.Tuple(elts=[target, value], ctx=ast.Load())
                self._keep.append(value)
            self.defs.append(_Def(key, stmt, fn, ctrl, value, None, failure=self._handlers > 0))

    def _stored(self, target: ast.Subscript, stmt, fn, ctrl, value: ast.AST) -> None:
        """``metrics["acc"] += acc`` or ``sums[0] = x``: the container holds the new item beside
        its old contents (the def reads both, so a clean item hides nothing)."""
        item = _item_key(target, fn)
        if item is not None:
            # `metrics["acc"] += acc`: that entry alone (a step counter in the same dict is another)
            both = value
            if not isinstance(stmt, ast.Assign):
                both = ast.Tuple(elts=[target, value], ctx=ast.Load())
                self._keep.append(both)
            self.defs.append(_Def(item, stmt, fn, ctrl, both, None, failure=self._handlers > 0))
            # the container read whole (`calc_metric(val_data)`) holds that entry too
            self._entry_def(target.value, target, ("key", target.slice.value), stmt, fn, ctrl)
            return
        head = target.slice.values[0] if isinstance(target.slice, ast.JoinedStr) and target.slice.values else None
        if isinstance(head, ast.Constant) and self._entry_def(
            target.value, value, ("prefix", str(head.value)), stmt, fn, ctrl
        ):
            return  # `image_logs[f"image/{i}"] = img`: entries whose keys start with that text
        base = _storage_of(target)
        if isinstance(base, (ast.Name, ast.Attribute)):
            both = ast.Tuple(elts=[base, value], ctx=ast.Load())
            self._keep.append(both)
            self._def(base, stmt, fn, ctrl, both)

    def _entry_def(self, base: ast.AST, item: ast.AST, entry: tuple, stmt, fn, ctrl) -> bool:
        """The container ``base`` defined anew by storing ``item`` at ``entry``, from its old contents
        and the item; read by key, only that entry's defs count (not where the function returns the
        container, whose callers read other entries by their keys). False when ``base`` has no key."""
        key = self._key(base, fn) if isinstance(base, (ast.Name, ast.Attribute)) else None
        if key is None:
            return False
        whole = ast.Tuple(elts=[base, item], ctx=ast.Load())
        self._keep.append(whole)
        self.defs.append(_Def(key, stmt, fn, ctrl, whole, None, failure=self._handlers > 0, entry=entry))
        return True

    def _grown(self, call: ast.Call, stmt, fn, ctrl) -> None:
        """``top1.append(acc)``: a list the file made (``top1 = []``) holds what it is handed, so
        the call defines it anew from its old contents and the new item."""
        f = call.func
        if not (isinstance(f, ast.Attribute) and call.args):
            return
        if isinstance(f.value, ast.Subscript) and f.attr in _GROWS | _FEEDS:
            # `meters["val_acc"].update(acc)`: the container of meters keeps it
            self._stored(f.value, stmt, fn, ctrl, call)
            return
        if f.attr not in _GROWS:
            return
        name = dotted(f.value)
        if name is None or name not in self._lists:
            return
        self._def(f.value, stmt, fn, ctrl, call)

    def _fed(self, call: ast.Call, stmt, fn, ctrl) -> None:
        """``stopper(val_loss)`` or ``meter.update(loss)`` on an object the file made from a class:
        what it keeps (``stopper.early_stop``, ``meter.avg``) comes from what it was handed, so the
        object is defined anew by the call, from its arguments."""
        if not (call.args or call.keywords):
            return
        if isinstance(call.func, ast.Attribute) and call.func.attr not in _FEEDS:
            return  # ``evaluator.evaluate(model)``, ``cfg.write(log)``: not a value it keeps
        obj = call.func.value if isinstance(call.func, ast.Attribute) else call.func
        name = dotted(obj)
        if not self._kept(name):
            return
        method = call.func.attr if isinstance(call.func, ast.Attribute) else "__call__"
        cls = self._classes.get(self._stateful.get(name, ""))
        if cls is not None and any(
            isinstance(n, ast.Call) and _is_unifying(n)
            for f in cls.body
            if isinstance(f, _FUNCS) and f.name == method
            for n in ast.walk(f)
        ):
            return  # this file's ``Metric.update`` all-reduces what it is handed: the same everywhere
        # its own key: what the object keeps (``stopper.early_stop``) is fed, not the object
        # itself (``stopper is None`` still reads the same on every rank)
        self.defs.append(_Def(_fed_key(name, fn), stmt, fn, ctrl, call, None, failure=self._handlers > 0))

    def _kept(self, name: str | None) -> bool:
        """``name`` is an object the file made from a class, or a part of one (``self.val_message.miou``
        in ``self.val_message = Message(miou=MeanIoU(n))``): what it is fed, it keeps."""
        while name and self._stateful:
            if name in self._stateful:
                return True
            if "." not in name:
                return False
            name = name.rsplit(".", 1)[0]
        return False

    def _data_def(self, loop, fn, ctrl) -> None:
        """The names a training loop binds to the rank's batch (not the index of ``enumerate``)."""
        target = loop.target
        it = loop.iter
        if _enumerated(self.m, it, fn) and isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 2:
            target = target.elts[1]
        stack = [target]
        while stack:
            t = stack.pop()
            if isinstance(t, (ast.Tuple, ast.List)):
                stack.extend(t.elts)
                continue
            if isinstance(t, ast.Starred):
                t = t.value
            key = self._key(t, fn)
            if key is None:
                continue
            d = _Def(key, loop, fn, ctrl, None, None, origin=Origin(loop, it, key[1], data=True))
            self.defs.append(d)
            self._data_defs.append(d)
            self.tainted.add(key)

    def _note_unifying(self) -> None:
        """Names handed to a collective: ``dist.broadcast(stop, 0)`` makes ``stop`` the same everywhere."""
        m = self.m
        for call, q in m.calls:
            if not _is_unifying(call, bound=isinstance(m.parents.get(call), (ast.Assign, ast.AnnAssign))):
                continue
            if not self.to_one_rank and (dist_op(q or "") in _TO_ONE_RANK or _reduces_to_one_rank(m, call)):
                continue
            fn = None
            bound = _bound_result(m, call)
            for a in (*call.args, *(k.value for k in call.keywords)):
                a = _storage_of(a)
                if isinstance(a, (ast.Name, ast.Attribute)):
                    if fn is None:
                        fn = m.enclosing_function(call)
                    key = self._key(a, fn)
                    # `reduced = reduce_dict(losses)`: the result is the same everywhere, `losses`
                    # stays this rank's own (an in-place call stands alone or is bound back)
                    if key is not None and (bound is None or dotted(a) in bound):
                        self.unified.add(key)
                        # where: torch's own collectives, which change the tensor in place at that
                        # line; a helper matched by its name (`sync_*`, `reduce_dict`) is taken as
                        # making the value the same everywhere, wherever it is read
                        self._unified_by.setdefault(key, []).append(call if dist_op(q or "") else None)

    # -- solving: which defs and returns are rank-dependent -----------------------------------------
    def _ctrl_origin(self, ctrl, stmt, name, fn, local: bool = False) -> Origin | None:
        """Why ``stmt`` runs on some ranks only: under a rank test (the origin is ``stmt`` itself), else
        under a test that reads a rank-dependent value (that value's origin); None when it runs on all.
        ``local``: a local name, which the ranks that left the function early never read, so the rest
        of a block after an early exit does not make it rank-dependent."""
        c = ctrl
        while c is not None:
            if c[0] == "rank" and not (local and c[3]):
                return Origin(stmt, c[1], name)
            c = c[2]
        c = ctrl
        while c is not None:
            if not (local and c[3]) and c[0] == "test":
                found = self.reads(c[1], fn)
                if found is not None:
                    return found
            c = c[2]
        return None

    def _solve(self) -> None:
        for _ in range(_ROUNDS):
            changed = False
            for d in self.defs:
                if d.origin is not None or d.unifying or d.settled:
                    continue
                if d.ctrl is None and not self._may_read_tainted(d):
                    continue
                if (d.key in self.unified and not self._before_collective(d.key, d.stmt, d.fn)) or (
                    d.value is not None and self._unifying_value(d.value, d.fn)
                ):
                    # ``stop = box[0]`` after ``broadcast_object_list(box)``: rank 0's value, also
                    # where only the receiving ranks assign it
                    d.unifying = changed = True
                    continue
                if d.ctrl is not None and self._repeats_everywhere(d):
                    d.settled = True
                    continue
                name = d.key[1]
                # a value changed where something failed on one rank (``except ImportError: use_wandb
                # = False``) parts the ranks only on that failure: not followed, the usual run is
                o = (
                    None
                    if d.failure
                    else self._ctrl_origin(d.ctrl, d.stmt, name, d.fn, local=d.key[0] not in ("attr", "fed", "item"))
                )
                if o is None and d.value is not None:
                    o = self.reads(d.value, d.fn, d.pos)
                if o is not None:
                    d.origin = o
                    self.tainted.add(d.key)
                    changed = True
            changed |= self._data_parameters()
            self._entries_whole = False
            for r, fn, ctrl in self._return_sites:
                have = self.returns.setdefault(fn.name, {})
                if None in have:
                    continue
                o = self._ctrl_origin(ctrl, r, f"{fn.name}()", fn)
                if o is not None:
                    have[None] = o
                    changed = True
                    continue
                if isinstance(r.value, ast.Tuple):
                    for pos, v in enumerate(r.value.elts):
                        o = self.reads(v, fn)
                        if o is not None and pos not in have:
                            have[pos] = o
                            changed = True
                elif r.value is not None:
                    o = self.reads(r.value, fn)
                    if o is not None:
                        have[None] = o
                        changed = True
            self._entries_whole = True
            if not changed:
                break

    def _data_parameters(self) -> bool:
        """The rank's batch handed to the file's own function: the parameter that takes it holds the
        rank's own data inside (``self.train_step(batch)``: ``batch`` in ``train_step``)."""
        changed = False
        for call, caller in self._own_calls:
            callee = (dotted(call.func) or "").rsplit(".", 1)[-1]
            for a_pos, a in enumerate(call.args):
                o = self.reads(a, caller) if not isinstance(a, ast.Starred) else None
                if o is None or not o.data:
                    continue
                for f in self._defs_named[callee]:
                    params = [*f.args.posonlyargs, *f.args.args]
                    if isinstance(call.func, ast.Attribute) and params and params[0].arg in ("self", "cls"):
                        params = params[1:]
                    if a_pos < len(params):
                        changed |= self._taint_param(f, params[a_pos].arg, o)
            for k in call.keywords:
                if k.arg is None:
                    continue
                o = self.reads(k.value, caller)
                if o is None or not o.data:
                    continue
                for f in self._defs_named[callee]:
                    if any(p.arg == k.arg for p in (*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs)):
                        changed |= self._taint_param(f, k.arg, o)
        return changed

    def _taint_param(self, f, name: str, o: Origin) -> bool:
        key = (id(f), name)
        if key in self._params_done:
            return False
        self._params_done.add(key)
        d = _Def(key, f, f, None, None, None, origin=o)
        self.defs.append(d)
        self.by_key.setdefault(key, []).append(d)
        self.tainted.add(key)
        return True

    def _unifying_value(self, e: ast.AST, fn) -> bool:
        return any(
            leaf[0] == "unify" or (leaf[0] == "name" and self._unified(leaf[2], leaf[1], fn))
            for leaf in self._leaves(e, fn)[1]
        )

    def _may_read_tainted(self, d: _Def) -> bool:
        """Cheap test before ``reads``: the value reads a key or calls a function already known to be
        rank-dependent."""
        if d.value is None or not (self.tainted or self._draws or any(self.returns.values())):
            return False
        for leaf in self._leaves(d.value, d.fn)[1]:
            if leaf[0] == "unify":
                continue
            if leaf[0] == "call":
                if self.returns.get(leaf[1]):
                    return True
            elif leaf[0] in ("args", "data"):
                return True  # decided by ``reads``
            elif leaf[2] in self.tainted or (None, leaf[2][1]) in self.tainted:
                return True
        return False

    def _repeats_everywhere(self, d: _Def) -> bool:
        """A rank-only assignment of what every rank already assigned (``epochs = opt.epochs`` again
        under ``if rank == 0:``) changes nothing between ranks."""
        if d.value is None:
            return False
        others = [
            o
            for o in self.by_key.get(d.key, ())
            # (not the same statement as every rank runs it: a function also called on one rank)
            if o is not d and o.stmt is not d.stmt and o.ctrl is None and o.value is not None and o.fn is d.fn
        ]
        if not others:
            return False
        if self._data_defs and any(
            leaf[0] == "name" and leaf[2] in self._data_keys for leaf in self._leaves(d.value, d.fn)[1]
        ):
            return False  # `batch = to_device(data)` again in a second loop: another shard's batch
        text = ast.dump(d.value)
        return any(ast.dump(o.value) == text for o in others)

    # -- queries ---------------------------------------------------------------------------------
    def _model_input(self, e: ast.AST, fn) -> bool:
        """``e`` is what a call hands first to a model (``model(x)``, ``self.net(x)``): the batch
        itself, whose size every rank shares; not a field whose count varies (boxes, labels)."""
        name = dotted(e)
        if name is None:
            return True  # not a plain name: its emptiness says nothing certain
        for n in ast.walk(fn if fn is not None else self.m.tree):
            if isinstance(n, ast.Call) and n.args and dotted(n.args[0]) == name:
                full = dotted(n.func) or ""
                callee = full.rsplit(".", 1)[-1].lower()
                if "model" in callee or "net" in callee or full in self.m.ddp_model_names:
                    return True
        return False

    def _leaves(self, e: ast.AST, fn) -> tuple:
        """What ``e`` reads, found once per expression: ("name", node, key) for the names and
        attributes it reads, ("call", name) for calls of the file's own functions (whose return
        values decide; their arguments may not reach them). A collective's result reads nothing."""
        found = self._leaf_memo.get(id(e))
        if found is not None:
            return found
        out: list = []
        stack: list = [(e, False, frozenset())]
        while stack:
            n, shape, bound = stack.pop()
            if isinstance(n, _COMPS):
                # a comprehension's own loop names are its own (Python 3 scoping): `[p for p in ps]`
                # does not read the `p` a loop around it sets on some ranks
                inner_bound = bound | {t.id for g in n.generators for t in ast.walk(g.target) if isinstance(t, ast.Name)}
                for i, g in enumerate(n.generators):
                    stack.append((g.iter, shape, bound if i == 0 else inner_bound))
                    stack.extend((c, shape, inner_bound) for c in g.ifs)
                elts = (n.key, n.value) if isinstance(n, ast.DictComp) else (n.elt,)
                stack.extend((c, shape, inner_bound) for c in elts)
                continue
            if (
                isinstance(n, ast.Compare)
                and (emptied := _emptiness_operand(n)) is not None
                and not self._model_input(emptied, fn)
            ):
                # `len(targets) == 0`: whether this rank's batch holds anything at all (no boxes in
                # these images) is its data, not the batch size every rank shares
                stack.append((emptied, False, bound))
                continue
            if isinstance(n, ast.Call):
                if id(n) in self._draws:
                    if not shape:
                        out.append(("data", n))
                    continue
                if _is_unifying(n, bound=True):  # (its result is part of a value)
                    out.append(("unify",))
                    continue
                f = n.func
                if (
                    isinstance(f, ast.Attribute)
                    and f.attr == "get"
                    and n.args
                    and isinstance(n.args[0], ast.Constant)
                    and isinstance(f.value, (ast.Name, ast.Attribute))
                    and (key := self._key(f.value, fn)) is not None
                ):
                    # `config.get("lr")` reads that entry, as `config["lr"]` does (and its default)
                    item = _item_key(ast.Subscript(value=f.value, slice=n.args[0]), fn)
                    out.append(("name", n, item, shape))
                    out.append(("name", f.value, key, shape, n.args[0].value))
                    stack.extend((a, shape, bound) for a in n.args[1:])
                    continue
                callee = (dotted(f) or "").rsplit(".", 1)[-1]
                if callee in self.funcs:
                    out.append(("call", callee))
                    if (self._data_defs or self._batch_draws) and not shape:
                        # the rank's batch handed to the file's own function: what it computes
                        # from it (the loss, a statistic) is the rank's own too
                        out.append(("args", n))
                    continue
                inner = shape or callee in _SHAPE_CALLS
                stack.extend((a, inner, bound) for a in n.args)
                stack.extend((k.value, inner, bound) for k in n.keywords)
                if isinstance(n.func, ast.Attribute):
                    stack.append((n.func.value, inner, bound))
                    if self._kept(base := dotted(n.func.value)):
                        out.append(("name", n.func, _fed_key(base, fn), inner))  # stopper.should_stop()
                continue
            if isinstance(n, ast.Subscript) and (item := _item_key(n, fn)) is not None:
                out.append(("name", n, item, shape))  # metrics["acc"]: that entry's own defs
                base = n.value
                if isinstance(base, (ast.Name, ast.Attribute)) and not (isinstance(base, ast.Name) and base.id in bound):
                    key = self._key(base, fn)
                    if key is not None:
                        self._item_bases[item] = key
                        # the container's other defs, not those that stored another entry
                        out.append(("name", base, key, shape, n.slice.value))
                    continue
            if isinstance(n, ast.Name) and n.id in bound:
                continue
            if isinstance(n, (ast.Name, ast.Attribute)):
                key = self._key(n, fn)
                if key is not None:
                    out.append(("name", n, key, shape))
                if isinstance(n, ast.Attribute) and self._kept(base := dotted(n.value)):
                    out.append(("name", n, _fed_key(base, fn), shape))  # stopper.early_stop
                if isinstance(n, ast.Attribute) and n.attr not in _MODE_ATTRS:
                    stack.append((n.value, shape or n.attr in _SHAPE_ATTRS, bound))
                continue
            if isinstance(n, (ast.Lambda, *_FUNCS)):
                continue
            stack.extend((c, shape, bound) for c in ast.iter_child_nodes(n))
        found = self._leaf_memo[id(e)] = (e, tuple(out))  # (e kept: its id stays its own)
        return found

    def reads(self, e: ast.AST | None, fn, pos: int | None = None) -> Origin | None:
        """The origin of a rank-dependent value that ``e`` (in function ``fn``) reads, or None."""
        if e is None:
            return None
        for leaf in self._leaves(e, fn)[1]:
            if leaf[0] == "unify":
                continue
            if leaf[0] == "call":
                rets = self.returns.get(leaf[1])
                if rets:
                    o = rets.get(None) or (
                        rets.get(pos) if pos is not None else next(iter(rets.values()), None)
                    )
                    if o is not None:
                        return o
                continue
            if leaf[0] == "data":
                return self._draws[id(leaf[1])]
            if leaf[0] == "args":
                call = leaf[1]
                for a in (*call.args, *(k.value for k in call.keywords)):
                    o = self.reads(a, fn)
                    if o is not None and o.data:
                        return o
                continue
            key = leaf[2]
            if self._unified(key, leaf[1], fn):
                continue
            # the same name bound at module level, read in a function
            module = ("item", key[1], None) if key[0] == "item" and len(key) == 3 else (None, key[1])
            if key not in self.tainted and (key[0] in (None, "attr") or module not in self.tainted):
                continue  # the usual answer, without looking at the definitions
            defs = self.by_key.get(key)
            if not defs and key[0] != "attr":
                defs = self.by_key.get(module)
            if defs and (not self._entries_whole or len(leaf) > 4):
                defs = [d for d in defs if d.entry is None]
            if defs:
                o = self._reaching(defs, leaf[1], fn)
                if o is not None and len(leaf) > 4 and self._entry_clean(defs, leaf[4], fn):
                    o = None  # `logs["loss"]` of `logs = {**reduced, **local}`: that entry's value
                if o is not None and not (o.data and leaf[3]):
                    # (the shape of a batch, ``len(batch)``, ``x.size(0)``, is alike on every rank)
                    return o
        return None

    def _unified(self, key: tuple, at: ast.AST | None = None, fn=None) -> bool:
        """Handed to a collective, or an entry of a container that was (``flag[0]`` after
        ``dist.broadcast_object_list(flag, src=0)``). ``at``: where it is read, in ``fn``; a read
        before the collectives, of the value this pass of the loop computed, is this rank's own."""
        base = key if key in self.unified else self._item_bases.get(key)
        if base not in self.unified:
            return False
        return at is None or not self._local_at(base, at, fn)

    def _before_collective(self, key: tuple, at: ast.AST, fn) -> bool:
        """Every collective ``key`` is handed to comes after ``at``, in the same function:
        ``loss = l1 + lpips`` then ``if torch.isnan(loss): continue`` reads this rank's own ``l1``,
        which ``dist.all_reduce(l1)`` only averages later in the step, for the log."""
        calls = self._unified_by.get(key)
        if not calls or fn is None:
            return False
        m = self.m
        return all(c is not None and m.enclosing_function(c) is fn and _pos(at) < _pos(c) for c in calls)

    def _local_at(self, key: tuple, at: ast.AST, fn) -> bool:
        """The read at ``at`` comes before the collectives and reads a value this same pass (of the
        loop around both) assigned: not one a collective of the pass before made the same."""
        if not self._before_collective(key, at, fn):
            return False
        m = self.m
        defs = [d.stmt for d in self.by_key.get(key, ()) if d.fn is fn and _pos(d.stmt) < _pos(at)]
        for c in self._unified_by[key]:
            loop = next((a for a in m.ancestors(at) if isinstance(a, _LOOPS) and _within_node(m, c, a)), None)
            if not any(loop is None or _within_node(m, s, loop) for s in defs):
                return False
        return True

    def _entry_clean(self, defs: list[_Def], entry, fn, depth: int = 0) -> bool:
        """Every rank-dependent def among ``defs`` (of one container) gives the entry at ``entry``
        a value that is the same on every rank: a dict literal's own item (``{"loss": reduced}``),
        or the entry of the dicts it spreads (``{**reduced, **local}``), also through the file's
        own function that returns it. A def that says nothing of its entries is not clean."""
        if depth > 3:
            return False
        for d in defs:
            if d.origin is None:
                continue
            if d.entry is not None:
                kind, text = d.entry
                if text == entry or (kind == "prefix" and isinstance(entry, str) and entry.startswith(text)):
                    return False  # `logs["loss"] = local`: that very entry
                continue
            if d.value is None or self._ctrl_origin(d.ctrl, d.stmt, d.key[1], d.fn) is not None:
                return False  # (set on some ranks only: every entry differs)
            if not self._value_entry_clean(d.value, d.pos, entry, d.fn, depth):
                return False
        return True

    def _value_entry_clean(self, v: ast.AST, pos, entry, fn, depth: int) -> bool:
        if isinstance(v, ast.Dict):
            for k, item in zip(v.keys, v.values):
                if k is None:  # `**other`
                    if not self._name_entry_clean(item, entry, fn, depth):
                        return False
                elif isinstance(k, ast.Constant) and k.value == entry and self.reads(item, fn) is not None:
                    return False
            return True
        if isinstance(v, ast.DictComp):
            # `{f"grad/{c}": g[c] for c in ...}`: keys that start with other text
            head = v.key.values[0] if isinstance(v.key, ast.JoinedStr) and v.key.values else v.key
            return (
                isinstance(head, ast.Constant)
                and isinstance(head.value, str)
                and isinstance(entry, str)
                and not entry.startswith(head.value)
                and (head is not v.key or head.value != entry)
            )
        if isinstance(v, ast.Name):
            return self._name_entry_clean(v, entry, fn, depth)
        if isinstance(v, ast.Call) and (callee := (dotted(v.func) or "").rsplit(".", 1)[-1]) in self.funcs:
            sites = [(r, f) for r, f, _c in self._return_sites if f.name == callee]
            for r, f in sites:
                value = r.value
                if pos is not None:
                    if not (isinstance(value, ast.Tuple) and pos < len(value.elts)):
                        return False
                    value = value.elts[pos]
                if value is None or not self._value_entry_clean(value, None, entry, f, depth + 1):
                    return False
            return bool(sites)
        return False

    def _name_entry_clean(self, name: ast.AST, entry, fn, depth: int) -> bool:
        key = self._key(name, fn) if isinstance(name, (ast.Name, ast.Attribute)) else None
        if key is None:
            return False
        if key not in self.tainted:
            return True
        return self._entry_clean(self.by_key.get(key, []), entry, fn, depth + 1)

    def _reaching(self, defs: list[_Def], use: ast.AST, fn) -> Origin | None:
        """The origin of a rank-dependent def that may reach ``use``: a clean plain assignment of the
        same function before it, in a block that holds it, hides the defs before that one."""
        line = use.lineno
        holders = {id(a) for a in self.m.ancestors(use)}
        kill = None
        for d in defs:
            if d.fn is not fn or d.origin is not None or d.stmt.lineno >= line:
                continue
            parent = self.m.parents.get(d.stmt)
            # (a clean def in the very statement list that holds the use runs before it on every
            # way there, also inside an `if` on something else: `t = clock()` then `if t < buf:`)
            if d.unifying or (
                parent is not None
                and (id(parent) in holders or parent is fn)
                and (d.ctrl is None or _same_block(parent, d.stmt, holders | {id(use)}))
            ):
                if kill is None or d.stmt.lineno > kill.stmt.lineno:
                    kill = d
        # `if main: x = a` and `if not main: x = b`: together every rank sets it, the later one last
        for d in defs:
            if d.fn is fn and d.origin is not None and d.stmt.lineno < line and _complemented(d, defs, line):
                if kill is None or d.stmt.lineno > kill.stmt.lineno:
                    kill = d
        loop = next((a for a in self.m.ancestors(use) if isinstance(a, _LOOPS)), None)
        parent = self.m.parents.get(use)
        if isinstance(parent, ast.AugAssign) and parent.target is use:
            # the old value `n -= 1` reads: the one before it on this pass, not one a later arm of
            # the loop may have left (that arm's test often holds for the whole run: `if args.x:`)
            loop = None
        for d in defs:
            if d.origin is None:
                continue
            if d.fn is not fn:
                if kill is None:
                    return d.origin  # set elsewhere (an attribute, a global): not hidden here
                continue
            after_kill = kill is None or d.stmt.lineno > kill.stmt.lineno
            if d.stmt.lineno < line and after_kill:
                return d.origin
            # a def later in the loop that holds the use reaches it on the next iteration, unless
            # the clean one is inside that loop too
            if (
                loop is not None
                and d.stmt.lineno >= line
                and loop.lineno <= d.stmt.lineno <= (loop.end_lineno or loop.lineno)
                and (kill is None or kill.stmt.lineno < loop.lineno)
            ):
                return d.origin
        return None

    def layout_test(self, test: ast.AST, fn) -> bool:
        """A test of a batch's layout, alike on every rank: a key or type test, or ``x is None`` on
        a value read out of the batch as it is (a field a collate function leaves out for a whole
        dataset), not on one computed from its contents (a score that is None on silent audio)."""
        if _schema_test(test):
            return True
        if not (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Is, ast.IsNot))
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value is None
        ):
            return False
        x = test.left
        if not isinstance(x, ast.Name):
            return _accessed(x)
        defs = [d for d in self.by_key.get(self._key(x, fn), ()) if d.origin is not None and d.origin.data]
        return all(d.value is None or _accessed(d.value) for d in defs)

    # -- decisions --------------------------------------------------------------------------------
    def _decisions(self) -> list[Decision]:
        out: list[Decision] = []
        for kind, node, test, ctrl, region, fn in self._sinks:
            if kind == "after":  # the rest of a block after an early exit on a rank test
                out.append(Decision(kind, node, test, Origin(node, test, ""), region))
                continue
            if _under_rank(ctrl):
                continue  # inside a rank test's own region: the per-rank rules judge it
            if kind == "exit":
                if ctrl is None or ctrl[0] != "test" or ctrl[3]:
                    continue
                o = self._ctrl_origin(ctrl, node, "", fn)
                if o is not None:
                    out.append(Decision("exit", node, ctrl[1], o, region))
                continue
            o = self.reads(test, fn)
            if o is not None and not (o.data and kind in ("if", "rest") and self.layout_test(test, fn)):
                # a batch's layout decides ``if``s all the time (``if "labels" in batch``), alike on
                # every rank: not followed
                out.append(Decision(kind, node, test, o, region))
        return out


_GROWS = frozenset(("append", "extend", "insert"))


# progress bars that hand on what they wrap (``tqdm(enumerate(loader))`` yields its pairs)
_BARS = frozenset(("tqdm", "track", "progress_bar", "auto_tqdm"))


def _enumerated(m, it: ast.AST, fn) -> bool:
    """The loop runs over ``enumerate(...)``, also through a progress bar and a name the function
    gives it (``pbar = tqdm.tqdm(enumerate(loader)); for it, batch in pbar:``)."""
    for _ in range(4):
        if isinstance(it, ast.Call):
            name = (dotted(it.func) or "").rsplit(".", 1)[-1]
            if name == "enumerate":
                return True
            if name not in _BARS or not it.args:
                return False
            it = it.args[0]
        elif isinstance(it, ast.Name):
            values = [
                a.value
                for a in m.nodes(ast.Assign)
                if m.enclosing_function(a) is fn
                and len(a.targets) == 1
                and isinstance(a.targets[0], ast.Name)
                and a.targets[0].id == it.id
            ]
            if len(values) != 1:
                return False
            it = values[0]
        else:
            return False
    return False


def _made_lists(m) -> frozenset[str]:
    """Names the file binds to a list it makes (``losses = []``, ``top1 = list()``)."""
    out = set()
    for a in m.nodes(ast.Assign):
        v = a.value
        if isinstance(v, (ast.List, ast.ListComp)) or (
            isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "list"
        ):
            out |= {name for t in a.targets if (name := dotted(t)) is not None}
    return frozenset(out)


def _item_key(target: ast.AST, fn) -> tuple | None:
    """``("item", 'metrics["acc"]')`` for an entry of a named container at a constant key; per
    function for a local name (two functions' ``checkpoint`` dicts are two dicts)."""
    if not (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant)):
        return None
    base = dotted(target.value)
    if base is None:
        return None
    if "." in base:
        return ("item", f"{base}[{target.slice.value!r}]")
    return ("item", f"{base}[{target.slice.value!r}]", id(fn) if fn is not None else None)


def _fed_key(name: str, fn) -> tuple:
    """The key of what an object was fed: per function for a local name (two functions' ``stopper``
    are two objects), per attribute path for ``self.stopper``."""
    return ("fed", name) if "." in name else ("fed", name, id(fn) if fn is not None else None)


# methods that hand an object a value to keep (an early stopper, a running meter)
_FEEDS = frozenset(("step", "update", "add", "record", "observe", "check", "__call__"))
# libraries whose metric objects reduce over the ranks themselves (torchmetrics' ``compute()``)
_SELF_REDUCING = ("torch.", "torchmetrics", "ignite", "accelerate", "lightning", "pytorch_lightning")


def _stateful_objects(m) -> dict[str, str]:
    """Names (``stopper``, ``self.meter``) the file binds to an instance of a class it makes or
    imports (``EarlyStopping(patience=5)``, ``AverageMeter()``), not of torch's own or a library's
    whose metrics reduce themselves, and not the DDP model: name -> the class's name."""
    out = {}
    wraps = {id(c) for c in (*m.ddp_constructors, *m.ddp_wrapper_calls)}
    for a in m.nodes(ast.Assign):
        v = a.value
        if not isinstance(v, ast.Call) or id(v) in wraps or len(a.targets) != 1:
            continue
        callee = dotted(v.func)
        if callee is None or not callee.rsplit(".", 1)[-1][:1].isupper():
            continue
        if (m.qualname(v.func) or "").startswith(_SELF_REDUCING):
            continue
        name = dotted(a.targets[0])
        if name is not None and name.split(".", 1)[0] != "cls" and name != "self":
            out[name] = callee.rsplit(".", 1)[-1]
    return out


def _negated(test: ast.AST) -> str:
    """The text of ``not test``: ``rank != 0`` for ``rank == 0``, ``main`` for ``not main``."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return ast.unparse(test.operand)
    flip = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in flip:
        return ast.unparse(ast.Compare(test.left, [flip[type(test.ops[0])]()], test.comparators))
    return ast.unparse(ast.UnaryOp(ast.Not(), test))


def _complemented(d: _Def, defs: list[_Def], line: int) -> bool:
    """``d`` sits right under a rank test and an earlier def of the same name in the same function
    sits right under its negation (``if main: x = a`` ... ``if not main: x = b``): every rank sets it."""
    c = d.ctrl
    if not (isinstance(c, tuple) and c[0] == "rank" and c[2] is None and not c[3]):
        return False
    want = _negated(c[1])
    return any(
        e is not d
        and e.fn is d.fn
        and e.stmt.lineno < line
        and isinstance(e.ctrl, tuple)
        and e.ctrl[0] == "rank"
        and e.ctrl[2] is None
        and not e.ctrl[3]
        and ast.unparse(e.ctrl[1]) == want
        for e in defs
    )


def _range_bound(it: ast.AST) -> ast.AST | None:
    """The call ``range(...)`` a for loop counts over (also inside ``enumerate``/``tqdm``), else None."""
    while isinstance(it, ast.Call):
        name = (dotted(it.func) or "").rsplit(".", 1)[-1]
        if name == "range":
            return it
        if not it.args:
            return None
        it = it.args[0]
    return None


_ACCESSORS = frozenset(("get", "pop", "setdefault", "to", "cuda", "cpu", "detach", "float", "half", "long"))


def _accessed(v: ast.AST | None) -> bool:
    """A value read out of a batch as it is (``batch["mask"]``, ``batch.get("mask")``,
    ``inputs.labels.to(device)``), not computed from it."""
    while isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in _ACCESSORS:
        v = v.func.value
    return isinstance(v, (ast.Subscript, ast.Attribute, ast.Name))


def _schema_test(test: ast.AST) -> bool:
    """A test of a batch's layout, not of its values: a key or type (``"mask" in batch``,
    ``isinstance(x, dict)``, ``hasattr``)."""
    for n in ast.walk(test):
        if isinstance(n, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops):
            return True
        if isinstance(n, ast.Call) and (dotted(n.func) or "") in (
            "isinstance",
            "hasattr",
            "callable",
            "type",
        ):
            return True
    return False


def _own_call_counts(m) -> dict[str, int]:
    """By last name, the calls that may run a function of the file (not ``torch.load`` beside
    ``self.load``); once per file, for every RankValues built on it."""
    counts = m.__dict__.get("_rv_call_counts")
    if counts is None:
        counts = m.__dict__["_rv_call_counts"] = {}
        for call, _q in m.calls:
            name = dotted(call.func) or ""
            if name.split(".", 1)[0] not in m.aliases:
                last = name.rsplit(".", 1)[-1]
                counts[last] = counts.get(last, 0) + 1
    return counts


def _both_arms(m, calls: list) -> bool:
    """Two of the calls sit in the two arms of one ``if`` (``if rank == 0: run(...) else: run(...)``):
    every rank makes one of them."""
    seen: dict[int, str] = {}
    for call in calls:
        for test, arm in arms(m, call, m.tree).items():
            if seen.setdefault(test, arm) != arm:
                return True
    return False


def _under_rank(ctrl) -> bool:
    while ctrl is not None:
        if ctrl[0] == "rank":
            return True
        ctrl = ctrl[2]
    return False


def _every_rank_exits_when_distributed(test: ast.AST) -> bool:
    """``if not is_main or world_size != 1: return``: one side of the ``or`` holds on every rank of a
    distributed run, so there every rank leaves; the rest runs in a one-process job only."""
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and any(
        distributed_when_true(v) for v in test.values
    )


def _moved_in_place(target: ast.AST, value: ast.AST | None) -> bool:
    """``x = x.to(device)`` / ``x = x.cpu().cuda()``: the name given back its own value, moved."""
    name = dotted(target) if isinstance(target, (ast.Name, ast.Attribute)) else None
    if name is None or not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
        return False
    v = value
    while isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in SAME_MODULE:
        v = v.func.value
    return v is not value and dotted(v) == name
