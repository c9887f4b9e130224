"""Who writes files: facts the checkpoint and file-system rules (DDP501, DDP505, DDP506) share.

A write is a problem in a distributed script when every rank reaches it with the same path, or
when the only thing keeping the other ranks out is a test on the node-local rank. These helpers
answer that syntactically, following this file's own calls (a helper called only under a rank
guard is guarded), so they also work where the per-rank interpreter does not reach.
"""

from __future__ import annotations

import ast
import re

from ddpdoctor.script import ranks
from ddpdoctor.script.interp import COLLECTIVES
from ddpdoctor.script.loaders import sharded_passes
from ddpdoctor.script.names import dotted, names_one_rank_function, path_extension
from ddpdoctor.script.nodes import may_show_any, walk
from ddpdoctor.script.ranks import SPAWNS as _SPAWNS
from ddpdoctor.script.ranks import spawn_calls

# Words in a path expression that make it one path per rank, node or process (or a lock file, which
# every process opens on purpose), where a word of the text starts: "rank0", "node_rank",
# "process_index", "gethostname()", "FileLock" name a process; "block_recurrent", "preprocessed",
# "ranking" do not. A temporary file or folder counts when made for this process (`mkdtemp()`, not
# a `tmp/` folder name).
_PER_PROCESS_TEXT = re.compile(
    r"(?<![a-z])(?:rank(?!ing)|shard|host|node|pid|uuid|worker|proc(?!ess(?:ed|ing|or))|lock)"
    r"|getpid|gethostname|filelock|myrank|mkdtemp|mkstemp|temporaryfile|temporarydirectory"
)


def names_a_process(text: str) -> bool:
    """``text`` (lower case) names the rank, node, host or process, or a private temporary file."""
    return _PER_PROCESS_TEXT.search(text) is not None


# a function named like this is where a script starts (its callers, if any, are not in this file)
ENTRY_NAMES = ("main", "train", "run", "worker", "fit", "demo")
_SUBPROCESS = ("subprocess.Popen", "subprocess.run", "subprocess.call", "subprocess.check_call")
_MAX_DEPTH = 6  # caller chains followed this deep


def per_process_path(expr: ast.AST | None, m=None, depth: int = 0) -> bool:
    """The path names the rank, node or process (``f"ckpt_rank{rank}.pt"``, ``gethostname()``); with
    ``m``, a plain variable is looked up in its function's assignments (``p = join(d, pid)``), and a
    parameter in what this file's calls pass for it (``save(x, path_prefix=f"{out}/rank{rank}")``)."""
    if expr is None:
        return False
    if names_a_process(ast.unparse(expr).lower()):
        return True
    if m is None:
        return False
    if _reads_rank_loop(m, expr):
        return True
    if depth < 2 and _per_process_argument(m, expr, depth):
        return True
    if _formats_rank_arithmetic(m, expr):
        return True
    # `os.path.join(scratch, "x")` / `scratch / "x"` where `scratch` is this process's own folder
    parts = _path_parts(expr)
    if depth < 2 and any(isinstance(a, ast.Name) and per_process_path(a, m, depth + 1) for a in parts):
        return True
    # `join(args.save_dir, "x")` after `args.save_dir = join(args.save_dir, f"ensemble_{rank}")`
    if any(isinstance(a, ast.Attribute) and _rebound_per_process(m, a) for a in parts):
        return True
    # a variable, or the variable a method call starts from (`out_path.replace(".npy", "")`)
    if _temp_file_object(m, expr):
        return True
    base = expr
    while isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute):
        base = base.func.value
    if not isinstance(base, ast.Name):
        return False
    scope = m.enclosing_function(base) or m.tree
    models = {id(c) for c in m.ddp_constructors}  # `model = DDP(model, device_ids=[rank])` is no path
    return any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == base.id for t in node.targets)
        and id(node.value) not in models
        and (
            per_process_path(node.value)
            or any(isinstance(a, ast.Attribute) and _rebound_per_process(m, a) for a in _path_parts(node.value))
            or _reads_rank_loop(m, node.value)
            # `save_path = self.exp / filename`, each call passing `f"best_{rank}.pth"`
            or (depth < 2 and _per_process_argument(m, node.value, depth + 1))
        )
        for node in walk(scope)
    )


def named_by_local_rank_only(m, expr: ast.AST | None) -> ast.AST | None:
    """The node-local rank that alone makes ``expr`` this process's path (``f"ckpt_rank{local_rank}.pt"``,
    ``"{}.pkl".format(self.local_rank)``, also through one plain variable): unique on one node, the
    same file for the processes of that index on every node. None when a global rank, a node index,
    the host or a temporary name also tells the processes apart."""
    if expr is None:
        return None
    if isinstance(expr, ast.Name):
        values = [v for v, _n in ranks.assignments_seen_at(m, expr)]
        if len(values) != 1:
            return None
        expr = values[0]
    text = ast.unparse(expr).lower()
    if any(w in text for w in ("host", "node", "uuid", "pid", "mkdtemp", "mkstemp", "temporary", "global", "time")):
        return None
    local = None
    for n in walk(expr):
        if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Load):
            kind = ranks.rank_kind(m, n)
            if kind in (ranks.GLOBAL, ranks.NODE):
                return None
            if kind == ranks.LOCAL and local is None:
                local = n
    return local


def _path_parts(expr: ast.AST) -> list:
    """The pieces a path is joined from: ``join(a, b)``'s arguments, both sides of ``a / b`` and
    ``folder + name``."""
    return expr.args if isinstance(expr, ast.Call) else [expr.left, expr.right] if isinstance(expr, ast.BinOp) else []


def _formats_rank_arithmetic(m, expr: ast.AST) -> bool:
    """An f-string formatting a name computed from the rank (``index = i * world_size + rank``, then
    ``f"{out}/{index:06d}.png"``): one file per rank. A name a call returns when handed the rank
    (``save_dir = save_model(model, rank)``) is not: what the call makes of it is unknown."""
    if not isinstance(expr, ast.JoinedStr):
        return False
    names = {v.value.id for v in expr.values if isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Name)}
    if not names:
        return False
    scope = m.enclosing_function(expr) or m.tree
    for node in walk(scope):
        if not (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets)):
            continue
        stack = [node.value]
        while stack:  # the value's own arithmetic, not the arguments of the calls in it
            n = stack.pop()
            if isinstance(n, (ast.Name, ast.Attribute)) and names_a_process(ast.unparse(n).lower()):
                return True
            if isinstance(n, (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.IfExp)):
                stack.extend(ast.iter_child_nodes(n))
    return False


def _rebound_per_process(m, attr: ast.Attribute) -> bool:
    """The attribute (``args.save_dir``) is set, on an earlier line of the file, to a path that names
    the rank (``args.save_dir = join(args.save_dir, f"ensemble_{rank}")``): this process's own folder
    from then on, wherever the object is handed."""
    key = dotted(attr)
    if key is None:
        return False
    return any(
        isinstance(node, ast.Assign)
        and node.lineno < attr.lineno
        and any(dotted(t) == key for t in node.targets)
        and per_process_path(node.value)
        for node in m.nodes(ast.Assign)
    )


def _temp_file_object(m, expr: ast.AST) -> bool:
    """``tmp`` or ``tmp.name`` of ``with tempfile.NamedTemporaryFile() as tmp:``: this process's own."""
    base = expr.value if isinstance(expr, ast.Attribute) and expr.attr == "name" else expr
    if not isinstance(base, ast.Name):
        return False
    scope = m.enclosing_function(base) or m.tree
    return any(
        isinstance(node, ast.withitem)
        and isinstance(node.optional_vars, ast.Name)
        and node.optional_vars.id == base.id
        and per_process_path(node.context_expr)
        for node in walk(scope)
    )


def _per_process_argument(m, expr: ast.AST, depth: int) -> bool:
    """A parameter of the path's function that every call of it in this file (one at least) gives a
    per-process path."""
    fn = m.enclosing_function(expr)
    if fn is None or isinstance(fn, ast.Lambda):
        return False
    positional = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    params = set(positional) | {a.arg for a in fn.args.kwonlyargs}
    used = [n.id for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id in params]
    if not used:
        return False
    offset = 1 if m.is_method(fn) else 0  # `self` is not passed at the call
    sites = [c for c in m.call_sites(fn) if m.enclosing_function(c) is not fn]
    if not sites:
        return False
    for name in used:
        for c in sites:
            given = next((k.value for k in c.keywords if k.arg == name), None)
            if given is None and name in positional:
                i = positional.index(name) - offset
                given = c.args[i] if 0 <= i < len(c.args) and not isinstance(c.args[i], ast.Starred) else None
            if not per_process_path(given, m, depth + 1):
                break
        else:
            return True
    return False


def _reads_rank_loop(m, expr: ast.AST) -> bool:
    """``expr`` reads the variable of a loop around it that walks this rank's share of the work
    (``for i in range(rank, n, world_size)``, ``for f in files[rank::world_size]``, a loader given a
    DistributedSampler): each rank gets other values, so a path built from it is its own."""
    used = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
    if not used:
        return False
    sharded = None
    for a in m.ancestors(expr):
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
        if not isinstance(a, (ast.For, ast.AsyncFor)):
            continue
        if sharded is None:
            # (a loop over a loader given a DistributedSampler walks this rank's own items too:
            # `for caption, name in loader: np.save(f"{d}/{name}.npy", ...)`)
            sharded = sharded_passes(m)
        if "rank" in ast.unparse(a.iter).lower():
            bound = {t.id for t in ast.walk(a.target) if isinstance(t, ast.Name)}
        elif id(a) in sharded:
            bound = _item_names(a)  # (not the step count `enumerate` adds: the same on every rank)
        else:
            continue
        if used & bound or used & _derived_in(a, bound):
            return True
    return False


def _derived_in(loop: ast.For | ast.AsyncFor, bound: set[str]) -> set[str]:
    """The names the loop's body binds from its items (``*_, names = batch``, ``name = names[0]``,
    ``out = join(d, f"{name}")``): they differ between ranks as the items do."""
    assigns = [n for n in ast.walk(loop) if isinstance(n, ast.Assign)]
    derived: set[str] = set()
    grew = True
    while grew:
        grew = False
        known = bound | derived
        for a in assigns:
            if not any(isinstance(n, ast.Name) and n.id in known for n in ast.walk(a.value)):
                continue
            for target in a.targets:
                for n in _bound_names(target):
                    if n not in known:
                        derived.add(n)
                        grew = True
    return derived


def _bound_names(target: ast.AST) -> list[str]:
    """The plain names an assignment target binds (``a``, ``a, (b, *c)``); not the object of an
    attribute or item it sets (``self.x = ...`` binds no ``self``)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _bound_names(e)]
    return []


def _item_names(loop: ast.For | ast.AsyncFor) -> set[str]:
    """The names a loop binds to the items it walks: for ``for i, (x, y) in enumerate(loader)``
    (also inside ``tqdm(...)``) only ``x`` and ``y``."""
    it, target = loop.iter, loop.target
    while isinstance(it, ast.Call) and it.args:
        wrapper = (dotted(it.func) or "").rsplit(".", 1)[-1]
        if wrapper not in ("tqdm", "enumerate"):
            break
        if wrapper == "enumerate" and isinstance(target, ast.Tuple) and len(target.elts) == 2:
            target = target.elts[1]
        it = it.args[0]
    return {t.id for t in ast.walk(target) if isinstance(t, ast.Name)}


def _entry_like(fn) -> bool:
    name = fn.name.lower().strip("_")
    return any(name.startswith(n) or name.endswith(n) for n in ENTRY_NAMES)


def _dispatched_from(m, fn):
    """The ``functools.singledispatch`` function that ``fn`` is registered on (``@run.register``),
    when this file defines it: calls of that function run ``fn``."""
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Attribute) and target.attr == "register" and isinstance(target.value, ast.Name):
            base = next((f for f in m.functions if f.name == target.value.id and f is not fn), None)
            if base is not None:
                return base
    return None


def _handed_the_rank(fn) -> bool:
    """A function given the rank and the world size (``def get_loaders(..., world_size, rank)``):
    its caller hands every rank its own, so every rank runs it."""
    names = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    return bool(names & ranks.RANK_PARAMS) and bool(names & {"world_size", "num_replicas"})


def entry_by_itself(m, fn) -> bool:
    """A function this file never calls that every process of the job runs: named as an entry point
    (``main``, ``train_worker``), or one that starts the process group itself (``def
    dist_trainer(local_rank, ...): dist.init_process_group(...)``, exported for another module's
    launcher), or the worker this file hands to ``mp.spawn``."""
    return (
        _entry_like(fn)
        or any(m.enclosing_function(c) is fn for c in m.dist_calls("init_process_group"))
        or _handed_to(_launches(m), fn)  # `mp.spawn(worker, ...)`: every spawned process runs it
    )


def _ddp_owner_init(m, fn) -> bool:
    """The constructor of a class that wraps the model in DDP (a trainer or runner): every rank
    builds its own, so every rank runs this ``__init__`` even though this file never calls it."""
    cls = m.parents.get(fn)
    if fn.name != "__init__" or not isinstance(cls, ast.ClassDef):
        return False
    return any(
        cls.lineno <= c.lineno <= cls.end_lineno and any(a is cls for a in m.ancestors(c)) for c in m.ddp_constructors
    )


def _launches(m) -> list[ast.Call]:
    """Where the file starts its workers: ``mp.spawn`` and the like, or a new Python process of its
    own (``subprocess.Popen([sys.executable, "train.py", f"--rank={i}"])``, a hand-written launcher)."""
    cached = m.__dict__.get("_writers_launches")
    if cached is None:
        cached = m.__dict__["_writers_launches"] = spawn_calls(m) + [
            c
            for c, q in m.calls
            if (q in _SUBPROCESS and c.args and "sys.executable" in ast.unparse(c.args[0]))
            or _hands_a_worker(m, c)
        ]
    return cached


def _hands_a_worker(m, call: ast.Call) -> bool:
    """Another module's launcher handed this file's worker function, uncalled (``launch(main_worker,
    args=args)``, detectron2's ``launch``): the worker sets up the process group, so the launcher
    starts the ranks, and the code around the call runs in the parent."""
    first = call.args[0] if call.args else None
    if not isinstance(first, ast.Name) or not isinstance(call.func, (ast.Name, ast.Attribute)):
        return False
    if first.id not in m.function_names:
        return False  # (most calls: decided here, before any walk)
    callee = (dotted(call.func) or "").rsplit(".", 1)[-1]
    if callee in m.function_names or callee in _SPAWNS:
        return False  # this file's own function; or a spawn whose module the imports do not say
    caller = m.enclosing_function(call)
    if any(
        isinstance(n, ast.Name) and n.id == first.id and isinstance(n.ctx, ast.Store)
        for n in walk(caller if caller is not None else m.tree)
    ):
        return False  # a local value of that name, not the function
    # the worker sets up the process group, or talks through one its launcher set up
    # (``run_distributed(train_iteration, proc_qty=n)`` where ``train_iteration`` calls
    # ``torch.distributed.barrier()``)
    if caller is not None and _sets_up_group(m, caller):
        return False  # the caller sets up the process group: a worker itself, handing on a callback
    talks = {id(c) for c in m.dist_calls(*COLLECTIVES)}
    return any(
        fn.name == first.id
        and any(
            isinstance(n, ast.Call)
            and (
                (id(n) in talks and m.enclosing_function(fn) is None)
                or (dotted(n.func) or "").endswith("init_process_group")
            )
            for n in walk(fn)
        )
        for fn in m.functions
    )


def _sets_up_group(m, fn, depth: int = 0, starts: frozenset[int] | None = None) -> bool:
    """``fn`` calls ``init_process_group``, itself or through this file's functions
    (``initialize_distributed(args)``)."""
    if starts is None:
        starts = frozenset(id(c) for c in m.dist_calls("init_process_group"))
    for n in walk(fn):
        if id(n) in starts:
            return True
        if (
            depth < 2
            and isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id in m.function_names
        ):
            if any(
                f.name == n.func.id and f is not fn and _sets_up_group(m, f, depth + 1, starts) for f in m.functions
            ):
                return True
    return False


def in_spawning_parent(m, node) -> bool:
    """Code of the function (or module level) that starts the workers, before it starts them or
    after they have joined: it runs once, in the parent."""
    spawns = _launches(m)
    if not spawns:
        return False
    fn = m.enclosing_function(node)
    if fn is None and not _under_main_guard(m, node):
        return False  # module code outside `if __name__ == "__main__":` runs again in each spawned child
    parents, launchers = _spawning_functions(m)
    if id(fn) in parents:
        return True
    if getattr(fn, "name", None) == "__init__" and _spawns_own_method(m, fn):
        return True
    # a function that calls this file's spawning function (`main(main_worker, args)` at module
    # level, `main` spawning inside) is the parent too: the workers run inside that call
    if not launchers:
        return False
    _stmt, block = m.statement_in_block(node)
    # (in the same statement list: not the other arm of an `if` that picks parent or worker)
    return any(
        isinstance(c.func, ast.Name)
        and c.func.id in launchers
        and m.enclosing_function(c) is fn
        and m.statement_in_block(c)[1] is block
        for c, _q in m.calls
    )


def _spawns_own_method(m, init: ast.AST) -> bool:
    """``init`` is the ``__init__`` of a class whose own method starts the workers on another of its
    methods (``mp.spawn(self.train, ...)``): the object is built, once, in the parent, and each
    worker gets a copy of it; its ``__init__`` never runs in a worker."""
    cls = next((a for a in m.ancestors(init) if isinstance(a, ast.ClassDef)), None)
    if cls is None or not any(st is init for st in cls.body):
        return False
    return any(
        c.args
        and isinstance(c.args[0], ast.Attribute)
        and isinstance(c.args[0].value, ast.Name)
        and c.args[0].value.id == "self"
        and any(a is cls for a in m.ancestors(c))
        for c in _launches(m)
    )


def _spawning_functions(m) -> tuple[set[int], set[str]]:
    """(ids, names) of the file's functions (None: module level) that start the workers; once per file."""
    cached = m.__dict__.get("_writers_spawning")
    if cached is None:
        parents = {id(m.enclosing_function(call)) for call in _launches(m)}
        cached = m.__dict__["_writers_spawning"] = (parents, {f.name for f in m.functions if id(f) in parents})
    return cached


def _handed_to(calls: list[ast.Call], fn: ast.AST) -> bool:
    """``fn`` is the first argument of one of ``calls`` (``mp.spawn(worker, ...)``): each worker runs it."""
    return any(c.args and (dotted(c.args[0]) or "").rsplit(".", 1)[-1] == fn.name for c in calls)


def _launcher_calls(m) -> list[ast.Call]:
    """A project's ``launch(main, args)`` (detectron2's engine and those built like it): it starts
    one process per GPU, each running the function it is handed."""
    return [c for c, q in m.calls if (q or dotted(c.func) or "").rsplit(".", 1)[-1] == "launch" and c.args]


def _under_main_guard(m, node) -> bool:
    return any(
        isinstance(a, ast.If) and "__main__" in ast.unparse(a.test) and "__name__" in ast.unparse(a.test)
        for a in m.ancestors(node)
    )


def parent_only(m, node, depth: int = 0) -> bool:
    """``node`` runs in the spawning parent alone: in the function that starts the workers, or in
    one of this file's functions called only from there (``plot_curves(ckpt)`` after the join)."""
    if in_spawning_parent(m, node):
        return True
    fn = m.enclosing_function(node)
    if fn is None or depth > 3:
        return False
    if _handed_to(_launches(m), fn):
        return False  # the worker every spawned rank runs (its direct call is the one-process run)
    sites = _callers(m, fn)
    return bool(sites) and all(parent_only(m, s, depth + 1) for s in sites)


def _memo(m, name: str) -> dict:
    """A per-file cache for these helpers: big files call them for many nodes of one function."""
    return m.__dict__.setdefault(name, {})


def _callers(m, fn) -> list[ast.Call]:
    return [s for s in m.call_sites(fn) if m.enclosing_function(s) is not fn]


def every_rank_reaches(m, node: ast.AST, depth: int = 0) -> bool:
    """Some path from where this script starts reaches ``node`` with no rank test on the way: no
    ``if rank == 0`` around it or around a call that leads to it, no early return on a rank test.
    A function this file never calls counts only when it looks like an entry point (a library
    helper's caller decides who writes)."""
    if depth > _MAX_DEPTH or rank_guards(m, node) or _rank_function(m, node) or in_spawning_parent(m, node):
        return False
    if ranks.single_process_arm(m, node):
        return False  # the `else` of `if ddp:`: one process, no other rank to collide with
    fn = m.enclosing_function(node)
    if fn is None:
        return True
    memo = _memo(m, "_writers_reaches")
    if id(fn) in memo:
        return memo[id(fn)]
    busy = _memo(m, "_writers_reaching")
    if id(fn) in busy:
        return False  # a recursive call adds no new way in
    busy[id(fn)] = True
    try:
        found = _reached_from_callers(m, fn, depth)
    finally:
        del busy[id(fn)]
    # a "no" found below the top may rest on a caller still being explored (or on the depth
    # limit): kept only from a top-level question, so that no other rule gets a stale answer
    if found or depth == 0:
        memo[id(fn)] = found
    return found


def _reached_from_callers(m, fn, depth: int) -> bool:
    if _handed_to(spawn_calls(m), fn) or _handed_to(_launcher_calls(m), fn):
        found = True  # the worker function every spawned rank runs
    else:
        sites = _callers(m, fn)
        base = None if sites else _dispatched_from(m, fn)
        if base is not None:
            # `@run_training.register def _(config: dict)`: runs wherever run_training is called,
            # and run_training is an entry of its own (its other overloads call it again)
            found = _entry_like(base) or any(every_rank_reaches(m, s, depth + 1) for s in _callers(m, base))
        else:
            found = (
                any(every_rank_reaches(m, s, depth + 1) for s in sites)
                if sites
                else entry_by_itself(m, fn) or _ddp_owner_init(m, fn) or _handed_the_rank(fn)
            )
    return found


def enclosing_statements(m, node: ast.AST) -> list[ast.stmt]:
    """The compound statements of ``node``'s own function (or the module) whose body, ``else``,
    handler or ``finally`` holds it, outermost first. Found by position, so the file's parent map
    (a walk over every node of a big file) is not needed."""
    fn = m.enclosing_function(node)
    block: list | None = fn.body if fn is not None else m.tree.body
    start = (node.lineno, node.col_offset)
    end = (getattr(node, "end_lineno", None) or node.lineno, getattr(node, "end_col_offset", None) or 0)
    out: list[ast.stmt] = []
    while block:
        holder = None
        for st in block:
            if (st.lineno, st.col_offset) <= start and (st.end_lineno, st.end_col_offset) >= end:
                holder = st
                break
        if holder is None or holder is node or isinstance(holder, _DEFS):
            break
        blocks = [getattr(holder, f, None) for f in ("body", "orelse", "finalbody")]
        blocks += [h.body for h in getattr(holder, "handlers", ())]
        blocks += [c.body for c in getattr(holder, "cases", ())]
        block = next(
            (
                b
                for b in blocks
                if isinstance(b, list)
                and b
                and (b[0].lineno, b[0].col_offset) <= start
                and (b[-1].end_lineno, b[-1].end_col_offset) >= end
            ),
            None,
        )
        if block is None:
            break  # in the statement's own header (an if's test, a loop's iterable)
        out.append(holder)
    return out


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def rank_guards(m, node: ast.AST) -> list[ast.AST]:
    """The rank tests that keep ranks away from ``node`` in its own function: the ``if`` tests
    around it and the tests of early ``return``s before it. A test lets one rank through on one
    side only: the ``else`` of ``if rank == 0`` (and what follows ``if rank == 0: return``) is run
    by all the other ranks, so there it guards nothing."""
    out: list[ast.AST] = [
        st.test
        for st in enclosing_statements(m, node)
        if isinstance(st, (ast.If, ast.While))
        and _is_rank_test(m, st.test)
        and one_rank_side(m, st.test) != ("orelse" if _in_body(st, node) else "body")
    ]
    # `Logger(out) if rank == 0 else None`: the same test, inside an expression
    child = node
    for a in m.ancestors(node):
        if isinstance(a, _DEFS):
            break
        if isinstance(a, ast.IfExp) and child is not a.test and _is_rank_test(m, a.test):
            if one_rank_side(m, a.test) != ("body" if child is a.orelse else "orelse"):
                out.append(a.test)
        child = a
    fn = m.enclosing_function(node)
    if fn is not None:
        for st in fn.body:
            if st.lineno >= node.lineno:
                break
            if (
                isinstance(st, ast.If)
                and any(isinstance(s, (ast.Return, ast.Raise)) for s in st.body)
                and _is_rank_test(m, st.test)
                and one_rank_side(m, st.test) != "body"
            ):
                out.append(st.test)
    return out


def other_ranks_arm(m, node: ast.AST) -> ast.If | None:
    """The ``if`` whose one-rank test sends ``node`` to the arm that all the other ranks run (the
    ``else`` of ``if rank == 0``), if there is one: findings name it."""
    for st in reversed(enclosing_statements(m, node)):
        if isinstance(st, ast.If) and _is_rank_test(m, st.test):
            side = one_rank_side(m, st.test)
            if side is not None and side != ("body" if _in_body(st, node) else "orelse"):
                return st
    return None


def _in_body(st: ast.stmt, node: ast.AST) -> bool:
    body = getattr(st, "body", None) or []
    return bool(body) and body[0].lineno <= node.lineno <= (body[-1].end_lineno or body[-1].lineno)


def one_rank_side(m, test: ast.AST) -> str | None:
    """Which side of a rank test at most one rank takes: "body" for ``rank == 0``,
    ``is_main_process()``, ``ddp and rank == 0``, ``not ddp or rank == 0``; "orelse" for ``rank != 0``,
    ``rank > 0``, ``not is_main``; None when it cannot tell (``rank < 2``, mixed tests)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = one_rank_side(m, test.operand)
        return {"body": "orelse", "orelse": "body"}.get(inner or "")
    if isinstance(test, ast.BoolOp):
        sides = {one_rank_side(m, v) for v in test.values if _is_rank_test(m, v)}
        if isinstance(test.op, ast.And):
            return "body" if "body" in sides else None  # one rank and anything: still one rank at most
        return "body" if sides == {"body"} else None  # `not ddp or rank == 0`: one process either way
    presence = _presence_operand(test)
    if presence is not None and presence_kind(m, test) is not None:
        return "body" if presence[1] else "orelse"  # `if saver is not None:`: the ranks that hold it
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op = test.ops[0]
        if isinstance(op, (ast.Eq, ast.Is)):
            return "body"
        if isinstance(op, (ast.NotEq, ast.IsNot)):
            return "orelse"
        right = test.comparators[0]
        if isinstance(op, ast.Gt) and isinstance(right, ast.Constant) and right.value == 0:
            return "orelse"
        if isinstance(right, ast.Constant) and (
            (isinstance(op, ast.LtE) and right.value == 0) or (isinstance(op, ast.Lt) and right.value == 1)
        ):
            return "body"  # `local_rank <= 0`: rank 0, or -1 when the run is not distributed
        return None
    if isinstance(test, (ast.Call, ast.Name, ast.Attribute)):
        if ranks.rank_kind(m, test) is not None:
            return "orelse"  # `if dist.get_rank():` is every rank but 0
        return "body"  # a predicate: is_main_process(), self.is_master, should_save
    return None


def every_process_side(m, test: ast.AST) -> tuple[ast.expr, ast.Assign] | None:
    """An ``or`` rank test whose other side holds on every process of some distributed run:
    ``not F or (F and rank == 0)`` where the file makes the run distributed without ``F`` too
    (``args.distributed = args.world_size > 1 or F``). With the job distributed and ``F`` false every
    rank passes. Returns that side (``not F``) and the assignment (the evidence), or None."""
    if not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or)) or not _is_rank_test(m, test):
        return None
    sides = {
        ast.dump(v.operand): v
        for v in test.values
        if isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Not) and not _is_rank_test(m, v)
    }
    for node in _distributed_flag_assignments(m):
        ways = [ast.dump(v) for v in node.value.values]
        for flag, side in sides.items():
            if flag in ways and any(w != flag for w in ways):
                return side, node
    return None


def _distributed_flag_assignments(m) -> list[ast.Assign]:
    """``distributed = A or B``: the ways this file makes a run distributed."""
    cached = m.__dict__.get("_writers_dist_flags")
    if cached is None:
        cached = m.__dict__["_writers_dist_flags"] = [
            node
            for node in m.nodes(ast.Assign)
            if len(node.targets) == 1
            and isinstance(node.value, ast.BoolOp)
            and isinstance(node.value.op, ast.Or)
            and ranks.distributed_when_true(node.targets[0])
        ]
    return cached


def guarded_here(m, node: ast.AST) -> bool:
    """A rank test in ``node``'s own function keeps all but one rank away from it (see rank_guards),
    or the function is one rank's by its name or decorator."""
    return bool(rank_guards(m, node)) or _rank_function(m, node)


def _rank_function(m, node: ast.AST) -> bool:
    """Inside a function that only one rank runs by its name or decorator (``save_on_master``,
    ``@rank_zero_only``)."""
    fn = m.enclosing_function(node)
    if fn is None:
        return False
    if names_one_rank_function(fn.name):
        return True
    return any(
        _is_rank_test(m, d.func if isinstance(d, ast.Call) else d) or ranks.decorator_guard_kind(m, d) is not None
        for d in fn.decorator_list
    )


# "am I the writer?" predicates of training libraries that name no rank
_WRITER_PREDICATES = ("process_zero", "rank_zero_only", "is_chief")


def _is_rank_test(m, test: ast.AST) -> bool:
    # asked again for every statement after an early exit: remembered per test
    memo = _memo(m, "_writers_rank_test")
    found = memo.get(id(test))
    if found is None:
        found = memo[id(test)] = _rank_test(m, test)
    return found


def _rank_test(m, test: ast.AST) -> bool:
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and any(_every_rank_may_pass(v) for v in test.values):
        return False  # `(rank == 0 and step % k == 0) or step >= last`: every rank at the last step
    if m.is_rank_guard(test):
        return True
    if may_show_any(test, _WRITER_PREDICATES, fold=True):  # (most tests: no text to build)
        text = ast.unparse(test).lower()
        if any(w in text for w in _WRITER_PREDICATES):
            return True
    if _should_save_flag(test):
        return True
    return ranks.guard_kind(m, test) is not None or presence_kind(m, test) is not None


def _should_save_flag(test: ast.AST) -> bool:
    """Hugging Face's ``args.should_save``: a flag true on the process that writes. A method of the
    project's own named so (``accelerator.should_save()``) may test the step count instead."""
    called = {id(n.func) for n in walk(test) if isinstance(n, ast.Call)}
    return any(
        isinstance(n, ast.Attribute) and n.attr == "should_save" and id(n) not in called for n in walk(test)
    )


_JOB_WORDS = ("rank", "dist", "world", "gpu", "local", "main", "master", "ddp", "parallel", "process", "node")


def _every_rank_may_pass(test: ast.AST) -> bool:
    """A comparison of the training's progress (``step >= max_steps``, ``epoch == epochs - 1``) that
    says nothing about the process: when it holds, it holds on every rank."""
    if not isinstance(test, ast.Compare):
        return False
    text = ast.unparse(test).lower()
    return not any(w in text for w in _JOB_WORDS) and any(w in text for w in ("step", "epoch", "iter"))


def writer_guard_kind(m, test: ast.AST | None):
    """ranks.guard_kind, where a test of a value that only some ranks hold counts as the rank test
    that gave it to them (see presence_kind): ``(kind,)``, or None when no part of ``test`` looks at
    the rank."""
    if test is None:
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return writer_guard_kind(m, test.operand)
    if isinstance(test, ast.BoolOp):
        found = [g for v in test.values if (g := writer_guard_kind(m, v)) is not None]
        if not found:
            return None
        kinds = {g[0] for g in found if g[0]}
        return (kinds.pop() if len(kinds) == 1 else None,)
    return ranks.guard_kind(m, test) or presence_kind(m, test)


def _presence_operand(test: ast.AST) -> tuple[ast.AST, bool] | None:
    """``x`` / ``x is not None`` -> (x, True); ``x is None`` -> (x, False); else None."""
    if isinstance(test, (ast.Name, ast.Attribute)):
        return test, True
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        if isinstance(test.ops[0], (ast.IsNot, ast.NotEq)):
            return test.left, True
        if isinstance(test.ops[0], (ast.Is, ast.Eq)):
            return test.left, False
    return None


_PENDING = object()


def presence_kind(m, test: ast.AST):
    """A test of a value that only the ranks past a rank test hold: ``saver = None`` then ``if
    args.local_rank == 0: saver = CheckpointSaver(...)``, and later ``if saver is not None:
    saver.save_checkpoint()``. Testing the value is testing the rank again, of the same kind:
    ``(kind,)``. None unless every other assignment of the name is ``None`` (or, for a plain truth
    test, another false constant such as ``""``) and every one that gives it a value sits where one
    rank test lets only one side of the ranks through."""
    found = _presence(m, test)
    return found[0] if found is not None else None


def presence_origin(m, test: ast.AST) -> ast.AST | None:
    """The rank test that gives the value ``test`` looks at to some ranks only (see presence_kind)."""
    found = _presence(m, test)
    return found[1] if found is not None else None


def _presence(m, test: ast.AST):
    found = _presence_operand(test)
    if found is None:
        return None
    expr, _positive = found
    key = dotted(expr)
    if key is None or ranks.rank_kind(m, expr) is not None:
        return None  # ``if rank:`` is a rank test of its own (guard_kind)
    memo = _memo(m, "_writers_presence")
    cache_key = (key, isinstance(test, ast.Compare))
    if cache_key in memo:
        hit = memo[cache_key]
        return None if hit is _PENDING else hit
    memo[cache_key] = _PENDING
    if not isinstance(test, ast.Compare):
        revoked = _revoked_flag(m, key)
        if revoked is not None:
            memo[cache_key] = revoked
            return revoked
    absent = held = 0
    kinds: set[str | None] = set()
    origin = None
    for value, node in ranks.assignments(m, key)[:32]:
        if isinstance(value, ast.Constant) and (
            value.value is None if isinstance(test, ast.Compare) else not value.value
        ):
            absent += 1
            continue
        tests = [t for t in rank_guards(m, node) if one_rank_side(m, t) is not None]
        if not tests:
            held = -1
            break
        held += 1
        origin = origin or tests[-1]
        kinds.update(g[0] for t in tests if (g := writer_guard_kind(m, t)) is not None)
    out = None
    if absent and held > 0:
        out = ((kinds.pop() if len(kinds) == 1 else None,), origin)
    memo[cache_key] = out
    return out


def _revoked_flag(m, key: str):
    """``save = True`` for everyone, then ``if rank != args.main_gpu: save = False``: the flag stays
    true on the ranks the test spares (at most one). ((kind,), the test) or None."""
    truthy = revoking = 0
    origin = None
    kinds: set[str | None] = set()
    for value, node in ranks.assignments(m, key)[:32]:
        if not isinstance(value, ast.Constant):
            return None
        if value.value:
            if rank_guards(m, node):
                return None  # set true under a rank test: the other reading (_presence)
            truthy += 1
            continue
        tests = [
            st.test
            for st in enclosing_statements(m, node)
            if isinstance(st, ast.If)
            and _is_rank_test(m, st.test)
            and one_rank_side(m, st.test) == ("orelse" if _in_body(st, node) else "body")
        ]
        if not tests:
            return None  # cleared on every rank somewhere: not a rank's flag
        revoking += 1
        origin = origin or tests[-1]
        kinds.update(g[0] for t in tests if (g := writer_guard_kind(m, t)) is not None)
    if not (truthy and revoking):
        return None
    return ((kinds.pop() if len(kinds) == 1 else None,), origin)


# a call named like this saves a checkpoint (`save`, `save_checkpoint`, `save_model`,
# `saver.save_checkpoint`, `ckpt_save`); pictures and plots are not checkpoints
_CHECKPOINT_CALL = re.compile(r"save.*(checkpoint|ckpt|model|module|state|weight|network)|(checkpoint|ckpt).*save")
# the extensions of checkpoint files (pictures, tables and configs are DDP505's)
CHECKPOINT_FILES = frozenset((".ckpt", ".pt", ".pth", ".tar", ".bin", ".safetensors", ".pkl", ".model"))
# libraries whose own writers other rules know (torch.save is DDP501, a picture or table DDP505)
WRITING_LIBRARIES = ("torch", "numpy", "PIL", "matplotlib", "scipy", "imageio", "cv2", "pandas", "json", "pickle")


def checkpoint_named(name: str) -> bool:
    """A call's name says it saves a checkpoint or a model (``save_checkpoint``, ``save_modules``)."""
    return bool(_CHECKPOINT_CALL.search(_joined(name)))


def _joined(name: str) -> str:
    """The name in lower case without underscores: ``save_check_point`` says checkpoint too."""
    return name.lower().replace("_", "")


def checkpoint_helper_call(m, call: ast.Call) -> bool:
    """A call of a checkpoint-saving helper whose body this file does not hold: an imported
    function (``from utils import save``; ``save_checkpoint(...)``) or a method
    (``saver.save_checkpoint(epoch)``). This file's own helpers are followed to their
    ``torch.save`` instead."""
    f = call.func
    q = m.qualname(f) or ""
    if q.split(".", 1)[0] in WRITING_LIBRARIES or q.split(".", 1)[0] in ("torchvision", "torchaudio"):
        return False
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
    if name == "save" and isinstance(f, ast.Attribute) and _ddp_model_itself(m, f.value):
        # `self.model.module.save(path)`: the DDP model's own module saving its weights (not this
        # file's `def save` of a trainer, whatever its name)
        return True
    inherited = isinstance(f, ast.Attribute) and _is_super(f.value)
    # (a bare `save_checkpoint(...)` is never a method of the file's classes: beside a method of that
    # name it is the imported function)
    own = m.plain_function_names if isinstance(f, ast.Name) else m.function_names
    if not name or (name in own and not inherited):
        return False  # this file's own helper (followed to its torch.save)
    if saved_by_caller(m, call):
        return False  # `torch.save(save_state(model, opt), path)`: it makes what is saved
    if inherited:
        # `super().save_checkpoint(fname)`: the base class's method, of another file when the base
        # class is not this file's
        return checkpoint_named(name) and not _base_defined_here(m, call)
    module_function = (
        isinstance(f, ast.Attribute)
        and isinstance(f.value, ast.Name)
        and f.value.id in m.aliases
        and q.split(".", 1)[0] not in _SELF_CHOOSING
    )
    if isinstance(f, ast.Name):
        # (`from utils import *`: the helper is utils'; `from .checkpoint import save_ckpt`: a
        # relative import, the package's own)
        imported = q != f.id or m.star_imported(f.id) or m.project_imports.get(f.id, ("", None, 0))[2] > 0
        named = imported and (name.lower() == "save" or checkpoint_named(name))
    elif module_function:
        # an imported function through its module (`utils.save_checkpoint(state)`): named for a
        # checkpoint, not a bare `save` (`profiler.save(...)`, `OmegaConf.save(cfg, ...)`)
        named = checkpoint_named(name)
    else:
        root = (dotted(f.value) or "").split(".", 1)[0]
        named = root not in m.aliases and (
            checkpoint_named(name)
            # an object's `save` to a checkpoint file (`train_state.save(f"{root}/{step}.ckpt")`)
            or (name == "save" and bool(call.args) and path_extension(call.args[0]) in CHECKPOINT_FILES)
        )
        if not named and root not in m.aliases and name.lower().startswith("save") and _hands_model(call):
            # `self.ioer.save_file(self.model, epoch)`: whatever the object is, it is handed the model
            # (or its weights) to save: a checkpoint write
            return ranks.callee_guard(m, call) is None
    # the name first: callee_guard may read and parse another file of the project to look inside
    if not named or ranks.callee_guard(m, call) is not None:
        return False  # not a checkpoint helper, or one that picks its rank
    # (an object handed in, `algorithm.save_model("latest_model.pth", d)`: the checkpoint file it is
    # given says what it writes; not a library's trainer or engine, which picks its writer itself)
    return (
        isinstance(f, ast.Name)
        or module_function
        or _saver_made_here(m, f.value)
        or (
            (dotted(f.value) or "").rsplit(".", 1)[-1].lower() not in _LIBRARY_RECEIVERS
            and any(path_extension(a) in CHECKPOINT_FILES for a in call.args)
        )
    )


def _ddp_model_itself(m, receiver: ast.AST) -> bool:
    """``receiver`` is a model this file wraps in DDP (``self.model = DDP(...)``), or its ``.module``."""
    name = dotted(receiver)
    if name is None:
        return False
    name = name.removesuffix(".module")
    return any(m.assigned_to(c) == name for c in m.ddp_constructors)


def saved_by_caller(m, call: ast.Call) -> bool:
    """``call``'s result is what a library write stores (``torch.save(save_transformer(model, opt),
    path)``): a helper that returns the state; the write, and its rank test, is the outer call's."""
    parent = m.parents.get(call)
    return (
        isinstance(parent, ast.Call)
        and call in parent.args
        and (m.qualname(parent.func) or "").split(".", 1)[0] in WRITING_LIBRARIES
    )


def _is_super(e: ast.AST) -> bool:
    return isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "super"


def _base_defined_here(m, call: ast.Call) -> bool:
    """The class around ``call`` has a base class this file defines (its method is followed instead)."""
    own = {c.name for c in m.nodes(ast.ClassDef)}
    for a in m.ancestors(call):
        if isinstance(a, ast.ClassDef):
            return any((dotted(b) or "").rsplit(".", 1)[-1] in own for b in a.bases)
    return False


def _hands_model(call: ast.Call) -> bool:
    """An argument is a model or its weights: ``model``, ``self.net``, ``model.module``,
    ``model.state_dict()``."""
    for a in (*call.args, *(k.value for k in call.keywords)):
        if isinstance(a, ast.Call) and isinstance(a.func, ast.Attribute) and a.func.attr == "state_dict":
            return True
        last = (dotted(a) or "").rsplit(".", 1)[-1].lower()
        if last in ("model", "net", "network", "module") or last.endswith("_model"):
            return True
    return False


# libraries whose trainers and accelerators pick the process that writes themselves
# (`accelerator.save_model`, `trainer.save_checkpoint`, a DeepSpeed engine's per-rank shards)
_SELF_CHOOSING = ("accelerate", "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed", "transformers")
# what those libraries' objects are called where a file is handed one (`trainer.save_checkpoint(p)`)
_LIBRARY_RECEIVERS = frozenset(("trainer", "accelerator", "fabric", "strategy", "engine", "model_engine", "ds_engine"))


def _saver_made_here(m, receiver: ast.AST) -> bool:
    """The object was built in this file by a class that is not one of those libraries'
    (``saver = CheckpointSaver(...)``): what it does is a plain write. An object from elsewhere (a
    parameter, an attribute set in another file) is unknown, and unknown is not guilty."""
    key = dotted(receiver)
    made = [v for v, _n in ranks.assignments(m, key)] if key else []
    made += [i.context_expr for i in _with_items(m) if key and dotted(i.optional_vars) == key]
    made = [v for v in made if not (isinstance(v, ast.Constant) and v.value is None)]
    return bool(made) and all(
        isinstance(v, ast.Call)
        and (m.qualname(v.func) or "").split(".", 1)[0] not in _SELF_CHOOSING
        and (dotted(v.func) or "").rsplit(".", 1)[-1] not in ("Accelerator", "Trainer", "Fabric")
        for v in made
    )


def _with_items(m) -> list[ast.withitem]:
    """``with Engine(...) as engine:`` items that bind a name (built once per file)."""
    out = m.__dict__.get("_named_with_items")
    if out is None:
        out = m.__dict__["_named_with_items"] = [
            i for w in m.nodes(ast.With) for i in w.items if i.optional_vars is not None
        ]
    return out


_MAX_CHAINS = 32  # ways into one function looked at; beyond that the answer would not change


def guard_chains(m, node: ast.AST, depth: int = 0) -> list[list[tuple[ast.AST, ast.AST]]]:
    """Every way this file reaches ``node``, as the list of (rank test, the statement or call it
    guards) met on the way, innermost first. An empty list inside: a way with no rank test."""
    here = [(t, node) for t in rank_guards(m, node)]
    fn = m.enclosing_function(node)
    if fn is None or depth > _MAX_DEPTH or here:
        return [here]
    return _function_chains(m, fn, depth)


def _function_chains(m, fn, depth: int) -> list[list[tuple[ast.AST, ast.AST]]]:
    """The ways into ``fn`` (see guard_chains), worked out once per function."""
    memo = _memo(m, "_writers_chains")
    if id(fn) in memo:
        return memo[id(fn)]
    memo[id(fn)] = [[]]  # a recursive call: no new guard on that way
    sites = _callers(m, fn)
    out: list[list[tuple[ast.AST, ast.AST]]] = [] if sites else [[]]
    for s in sites:
        out.extend(guard_chains(m, s, depth + 1))
        if len(out) >= _MAX_CHAINS:
            break
    memo[id(fn)] = out
    return out


def to_stream(m, call: ast.Call, arg: ast.AST | None) -> bool:
    """Writing into a buffer or a file object opened here (``with open(p, "wb") as f``): whoever opened
    it chose the path; an in-memory BytesIO writes nothing."""
    streams = ("BytesIO", "StringIO", "open", "NamedTemporaryFile", "TemporaryFile", "SpooledTemporaryFile")
    if isinstance(arg, ast.Call):
        return (dotted(arg.func) or "").rsplit(".", 1)[-1] in streams
    if not isinstance(arg, ast.Name):
        return False
    scope = m.enclosing_function(call) or m.tree
    for node in walk(scope):
        if isinstance(node, ast.withitem) and isinstance(node.optional_vars, ast.Name):
            if node.optional_vars.id == arg.id:
                return True
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and any(isinstance(t, ast.Name) and t.id == arg.id for t in node.targets)
            and (dotted(node.value.func) or "").rsplit(".", 1)[-1] in streams
        ):
            return True
    return False
