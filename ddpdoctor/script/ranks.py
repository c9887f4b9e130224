"""Which rank a value is, and which rank test guards a statement: global, node-local or node index.

Real scripts keep the rank in many places: ``dist.get_rank()``, ``int(os.environ["LOCAL_RANK"])``,
``args.rank`` (whose argparse flags may say it is the *local* rank: ``"--rank", "--local_rank"``
share one dest), ``self.gpu_id`` set in ``__init__``, ``config["rank"]`` filled from ``vars(args)``,
``rank % ngpus_per_node``, ``args.nr`` (the node index). Rules ask two questions:

* ``rank_kind(m, expr)``: "global", "local", "node" or None (not a rank as far as we can tell);
* ``rank_guard(m, node)``: the rank test that decides whether ``node`` runs (an ``if`` around it, an
  early ``return`` before it in its function, or a guard around every call of its function), with
  its kind and the chain of call lines that leads there.

Pure ast over one ModuleAnalysis; results are cached on it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ddpdoctor.script.branches import arms
from ddpdoctor.script.names import (
    declares_shared,
    dist_op,
    dotted,
    is_distributed_flag,
    is_property,
    names_one_rank_output,
    rebinds,
)
from ddpdoctor.script.nodes import walk
from ddpdoctor.script.values import bound_argument

GLOBAL, LOCAL, NODE = "global", "local", "node"
# Parameters that hand a function its process's rank (``def train(rank, model, ...)``).
RANK_PARAMS = frozenset(("rank", "local_rank", "global_rank"))

_ENV_KIND = {
    "RANK": GLOBAL,
    "SLURM_PROCID": GLOBAL,
    "OMPI_COMM_WORLD_RANK": GLOBAL,
    "PMI_RANK": GLOBAL,
    "PMIX_RANK": GLOBAL,
    "LOCAL_RANK": LOCAL,
    "SLURM_LOCALID": LOCAL,
    "OMPI_COMM_WORLD_LOCAL_RANK": LOCAL,
    "MPI_LOCALRANKID": LOCAL,
    "MV2_COMM_WORLD_LOCAL_RANK": LOCAL,
    "GROUP_RANK": NODE,
    "SLURM_NODEID": NODE,
    "NODE_RANK": NODE,
}
# names that say what they hold when nothing else does
_NAME_KIND = {
    "rank": GLOBAL,
    "global_rank": GLOBAL,
    "world_rank": GLOBAL,
    "ddp_rank": GLOBAL,
    "process_rank": GLOBAL,
    "proc_rank": GLOBAL,
    "local_rank": LOCAL,
    "ddp_local_rank": LOCAL,
    "local_process_index": LOCAL,
    "gpu": LOCAL,
    "gpu_id": LOCAL,
    "gpu_index": LOCAL,
    "gpu_idx": LOCAL,
    "device_id": LOCAL,
    "nr": NODE,
    "node_rank": NODE,
    "node_id": NODE,
    "node_index": NODE,
}
# predicates that answer "am I the main process?", and which rank they look at
_PREDICATES = {
    "is_main_process": GLOBAL,
    "is_master": GLOBAL,
    "is_master_process": GLOBAL,
    "is_rank_zero": GLOBAL,
    "is_rank_0": GLOBAL,
    "is_main": GLOBAL,
    "main_process": GLOBAL,
    "is_global_zero": GLOBAL,
    "master_process": GLOBAL,
    "main_proc": GLOBAL,  # (`proc`: the usual short form of process, `opt.main_proc`)
    "master_proc": GLOBAL,
    "is_rank0": GLOBAL,
    "is_local_main_process": LOCAL,
    "is_local_master": LOCAL,
    "is_local_main": LOCAL,
    "local_master": LOCAL,
    "is_local_rank_zero": LOCAL,
    "primary": GLOBAL,  # `if primary():` (a process that is "the primary one")
}
# and the names built like them: is_global_main, is_local_master_process, is_rank0_worker,
# is_default_gpu (the process that logs and saves, in vision-and-language navigation code)
_PREDICATE_NAME = re.compile(
    r"^i[sf]_(?:(global|local|node)_)?(?:(?:main|master|primary|chief|leader|root|rank_?0|rank_?zero)"
    r"(?:_(?:process|proc|rank|worker))?|(?:first|default)_(?:process|proc|rank|worker|gpu))$"
)
_MAX_DEPTH = 6


def predicate_name_kind(name: str) -> str | None:
    """GLOBAL or LOCAL when ``name`` is a main-process predicate's name, else None."""
    kind = _PREDICATES.get(name)
    if kind is not None:
        return kind
    found = _PREDICATE_NAME.match(name)
    if found is None:
        return None
    return LOCAL if found.group(1) == "local" else None if found.group(1) == "node" else GLOBAL


@dataclass(frozen=True)
class ArgDest:
    dest: str
    flags: tuple[str, ...]
    default: ast.AST | None
    node: ast.Call

    @property
    def kind(self) -> str | None:
        """A flag named for the local rank makes the dest a local rank, whatever the dest is called."""
        words = [f.lstrip("-").replace("-", "_").rsplit(".", 1)[-1] for f in self.flags]
        if any(w in ("local_rank", "localrank") for w in words):
            return LOCAL
        for w in (self.dest, *words):
            if w in _NAME_KIND:
                return _NAME_KIND[w]
        return None


@dataclass(frozen=True)
class Guard:
    """A rank test that decides whether a statement runs."""

    test: ast.AST  # the condition (or the call of a predicate)
    kind: str | None  # GLOBAL, LOCAL, NODE, or None when the test is rank-ish but of unknown kind
    chain: tuple[int, ...] = ()  # lines of the calls between the guard and the statement
    path: str | None = None  # the file of ``test`` and ``chain`` when it is another file of the project

    @property
    def line(self) -> int:
        return self.test.lineno


def argparse_dests(m) -> dict[str, ArgDest]:
    """``add_argument`` calls of the file by dest: ``--local_rank`` -> local_rank; ``"--rank",
    "--local_rank"`` -> rank (the first long flag names the dest, both set it)."""
    cached = m.__dict__.get("_argparse_dests")
    if cached is not None:
        return cached
    out: dict[str, ArgDest] = {}
    for call in m.method_calls("add_argument"):
        flags = tuple(a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
        if not flags:
            continue
        dest_kw = m.keyword(call, "dest")
        if isinstance(dest_kw, ast.Constant) and isinstance(dest_kw.value, str):
            dest = dest_kw.value
        else:
            long = [f for f in flags if f.startswith("--")]
            dest = (long[0] if long else flags[0]).lstrip("-").replace("-", "_")
        out[dest] = ArgDest(dest, flags, m.keyword(call, "default"), call)
    m.__dict__["_argparse_dests"] = out
    return out


def _assignments(m) -> dict[str, list[tuple[ast.AST, ast.AST]]]:
    """Target text (``rank``, ``self.gpu_id``, ``args.rank``) -> [(value, assign node)] over the file."""
    cached = m.__dict__.get("_rank_assignments")
    if cached is not None:
        return cached
    out: dict[str, list[tuple[ast.AST, ast.AST]]] = {}
    for node in m.nodes(ast.Assign, ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if node.value is None:
            continue
        for t in targets:
            if isinstance(t, (ast.Tuple, ast.List)) and isinstance(node.value, (ast.Tuple, ast.List)):
                for te, ve in zip(t.elts, node.value.elts):
                    key = dotted(te)
                    if key:
                        out.setdefault(key, []).append((ve, node))
                continue
            key = dotted(t)
            if key is None and isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant):
                key = f"[{t.slice.value!r}]"
            if key:
                out.setdefault(key, []).append((node.value, node))
    m.__dict__["_rank_assignments"] = out
    return out


def _shifted_names(m) -> frozenset[str]:
    """Names the file moves by a non-constant offset in place (``args.local_rank +=
    args.node_index * args.gpu_per_node``): one kind of rank before that line, another after, so a
    question that does not follow the order of lines cannot say which (built once per file)."""
    out = m.__dict__.get("_shifted_rank_names")
    if out is None:
        out = m.__dict__["_shifted_rank_names"] = frozenset(
            key
            for node in m.nodes(ast.AugAssign)
            if isinstance(node.op, (ast.Add, ast.Sub))
            and not _is_plain_constant(node.value)
            and (key := dotted(node.target))
        )
    return out


def _shifted_rank(m, expr: ast.AST) -> bool:
    """A rank name the file shifts in place (see _shifted_names): its kind changes, not its rank-ness."""
    name = dotted(expr)
    if name is None or name not in _shifted_names(m):
        return False
    last = name.rpartition(".")[2]
    dest = argparse_dests(m).get(last)
    return bool(dest is not None and dest.kind) or _by_name(last, m) is not None


def assignments(m, key: str) -> list[tuple[ast.AST, ast.AST]]:
    """(value, assignment) for every assignment of ``key`` (``saver``, ``self.saver``) in the file."""
    return _assignments(m).get(key, [])


def assignments_seen_at(m, expr: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(value, assignment) of what ``expr`` reads, as far as scope shows: a plain name that the
    function holding ``expr`` assigns is that function's own, so another function's assignments to
    the same name say nothing about it (``world_size = torch.cuda.device_count()`` in ``main`` beside
    ``world_size = int(os.environ["WORLD_SIZE"])`` in ``train``). Attributes and names the function
    only reads (a global, a parameter filled by a caller) keep every assignment in the file."""
    name = dotted(expr)
    found = _assignments(m).get(name, []) if name else []
    if not found:
        return found
    fn = m.enclosing_function(expr)
    if fn is None:
        return found
    if isinstance(expr, ast.Name) and not (rebinds(fn, expr.id) and not declares_shared(fn, expr.id)):
        return found
    own = [(v, a) for v, a in found if m.enclosing_function(a) is fn]
    # those that may have run by then: above it, or later in a loop that holds both
    # (`rank = get_rank()` after `init_process_group(rank=rank)` says nothing of its rank)
    loops = [a for a in m.ancestors(expr) if isinstance(a, (ast.For, ast.AsyncFor, ast.While))]
    before = [
        (v, a)
        for v, a in own
        if a.lineno < expr.lineno or any(lp.lineno <= a.lineno <= (lp.end_lineno or 0) for lp in loops)
    ]
    if isinstance(expr, ast.Name):
        return before or own
    # an attribute this function sets before reading it (`cfg.world_size = int(os.environ[
    # "WORLD_SIZE"])` then `init_process_group(world_size=cfg.world_size)`): that value, not the
    # one the function's other path or another method gives it
    return before or found


def reads_launcher_rank(m) -> bool:
    """The file reads a rank the launcher puts in each worker's environment (``os.environ["LOCAL_RANK"]``,
    ``os.getenv("RANK")``, ``SLURM_PROCID``): it is written to run as one of several processes."""
    cached = m.__dict__.get("_reads_launcher_rank")
    if cached is None:
        cached = m.__dict__["_reads_launcher_rank"] = any(
            env_key(m, node) in _ENV_KIND
            for node in (*m.nodes(ast.Subscript), *(c for c, _q in m.calls))
        )
    return cached


def callee_def(m, name: str):
    """(module, def) of the function a call named ``name`` runs: this file's by its last name, else,
    in a project, another file's through the imports; (m, None) when neither shows it."""
    last = name.rsplit(".", 1)[-1]
    head = name.split(".", 1)[0]
    if "." not in name:
        # a bare name calls a function outside the classes (or an import), never a method
        fn = next((f for f in m.plain_functions if f.name == last), None)
    elif head in m.aliases:
        fn = None  # `utils.save_checkpoint(...)`: the imported module's, not this file's method
    else:
        fn = next((f for f in m.functions if f.name == last), None)
    if fn is None and m.project is not None:
        found = m.resolve(name)
        if found is not None:
            return found
    return m, fn


# attributes that hold a process's place in the job (``opt.local_rank``, ``args.world_size``)
_PLACE_ATTRS = frozenset(k for k in _NAME_KIND if not k.startswith(("gpu", "device"))) | {"world_size"}


def rank_carriers(m) -> frozenset[str]:
    """Names of the objects the file keeps a rank or the world size on (``opt.local_rank``,
    ``args.world_size = ...``): a function of another file handed one of them knows where in the job
    it runs and may split its work by it (``data.load_data(opt, tokenizer)``)."""
    cached = m.__dict__.get("_rank_carriers")
    if cached is None:
        cached = m.__dict__["_rank_carriers"] = frozenset(
            base for a in m.nodes(ast.Attribute) if a.attr in _PLACE_ATTRS and (base := dotted(a.value))
        )
    return cached


def hands_rank_carrier(m, call: ast.Call) -> bool:
    """``call`` runs a function this file does not show and hands it an object that carries the
    rank (``rank_carriers``): what it makes may be the caller's part of the job only."""
    name = dotted(call.func)
    if name is None or callee_def(m, name)[1] is not None:
        return False
    carriers = rank_carriers(m)
    return any(dotted(a) in carriers for a in (*call.args, *(k.value for k in call.keywords)))


_RANK_QUERIES = ("get_rank", "get_world_size", "get_global_rank", "get_local_rank")


def callee_reads_rank(m, call: ast.Call, depth: int = 0) -> bool:
    """The function ``call`` runs (this file's or, in a project, another file's) asks for the rank
    or the world size, itself or through its own helpers: ``load_data(opt)`` that splits its
    files with ``np.array_split(files, get_world_size())[get_rank()]`` builds each rank its part."""
    name = dotted(call.func)
    if name is None or depth > 2:
        return False
    mod, fn = callee_def(m, name)
    if fn is None:
        return False
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        inner = dotted(node.func) or ""
        if inner.rsplit(".", 1)[-1] in _RANK_QUERIES or env_key(mod, node) in _ENV_KIND:
            return True
        if node is not call and inner and callee_reads_rank(mod, node, depth + 1):
            return True
    return False


def _pins_here(m) -> bool:
    for node in m.nodes(ast.Assign):
        for t in node.targets:
            if (
                isinstance(t, ast.Subscript)
                and dotted(t.value) == "os.environ"
                and isinstance(t.slice, ast.Constant)
                and t.slice.value == "CUDA_VISIBLE_DEVICES"
                and "rank" in ast.unparse(node.value).lower()
            ):
                return True
    return False


def pins_one_gpu_per_process(m) -> bool:
    """This file, or a project module it imports, sets CUDA_VISIBLE_DEVICES from the rank
    (guided-diffusion's ``dist_util.setup_dist``: ``os.environ["CUDA_VISIBLE_DEVICES"] =
    f"{rank % GPUS_PER_NODE}"``): each process sees one GPU, its own, as cuda:0."""
    cached = m.__dict__.get("_pins_one_gpu")
    if cached is not None:
        return cached
    found = m.mentions("CUDA_VISIBLE_DEVICES") and _pins_here(m)
    if not found and m.project is not None:
        for module, attr, level in m.project_imports.values():
            for mod in (module, f"{module}.{attr}" if module and attr else None):
                path = m.project.module_path(mod, m.path, level) if mod else None
                other = None
                # the text first: parsing every imported module to find the word in a few is costly
                if path is not None and str(path) != m.path and m.project.mentions(path, "CUDA_VISIBLE_DEVICES"):
                    other = m.project.analysis(path)
                if other is not None and other.mentions("CUDA_VISIBLE_DEVICES") and _pins_here(other):
                    found = True
                    break
            if found:
                break
    m.__dict__["_pins_one_gpu"] = found
    return found


def per_node_count(m, expr: ast.AST) -> bool:
    """``expr`` is how many GPUs (processes) one node has: ``torch.cuda.device_count()``, a name
    such as ``ngpus_per_node`` / ``nproc_per_node``, or a name this file assigns from one of those."""
    if isinstance(expr, ast.Call):
        return (m.qualname(expr.func) or "").endswith("cuda.device_count")
    name = dotted(expr)
    if name is None:
        return False
    if "per_node" in name.rsplit(".", 1)[-1].lower():
        return True
    return any(isinstance(v, ast.Call) and per_node_count(m, v) for v, _n in assignments_seen_at(m, expr)[:8])


def always_per_node_count(m, expr: ast.AST) -> bool:
    """Like per_node_count, but every value the file gives the name is such a count: a world size
    that falls back to ``torch.cuda.device_count()`` only when WORLD_SIZE is unset is the launcher's
    on the other paths."""
    if isinstance(expr, ast.Call) or "per_node" in (dotted(expr) or "").rsplit(".", 1)[-1].lower():
        return per_node_count(m, expr)
    values = [v for v, _n in assignments_seen_at(m, expr)[:8] if not _is_plain_constant(v)]
    return bool(values) and all(isinstance(v, ast.Call) and per_node_count(m, v) for v in values)


def takes_local_rank(m) -> bool:
    """A function of the file takes the launcher's node-local rank as a parameter (``def
    fit_one_epoch(..., local_rank=0)``): only a process started as one of several per node has one,
    so the file's helpers run in every process of a distributed job."""
    cached = m.__dict__.get("_takes_local_rank")
    if cached is None:
        cached = m.__dict__["_takes_local_rank"] = any(
            a.arg == "local_rank"
            for fn in m.functions
            for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)
        )
    return cached


def tests_rank_per_node(m) -> bool:
    """The file takes a rank modulo the GPUs of a node (``args.rank % ngpus_per_node == 0``, the
    ``mp.spawn`` scripts' "first process of this node"): it is written to run as several processes
    on each of several nodes, whatever object holds the rank."""
    cached = m.__dict__.get("_tests_rank_per_node")
    if cached is None:
        cached = m.__dict__["_tests_rank_per_node"] = any(
            isinstance(node.op, ast.Mod)
            and rank_kind(m, node.left) in (GLOBAL, LOCAL)
            and per_node_count(m, node.right)
            for node in m.nodes(ast.BinOp)
        )
    return cached


def env_key(m, expr: ast.AST) -> str | None:
    """``RANK`` for ``os.environ["RANK"]``, ``os.environ.get("RANK", ...)``, ``os.getenv("RANK")``."""
    if isinstance(expr, ast.Subscript) and m.qualname(expr.value) == "os.environ":
        s = expr.slice
        return s.value if isinstance(s, ast.Constant) and isinstance(s.value, str) else None
    if isinstance(expr, ast.Call) and m.qualname(expr.func) in ("os.environ.get", "os.getenv") and expr.args:
        s = expr.args[0]
        return s.value if isinstance(s, ast.Constant) and isinstance(s.value, str) else None
    return None


_DEVICE_NAMES = frozenset(("device", "cuda_device", "gpu_device"))


def _device_index_test(test: ast.Compare) -> bool:
    """``self.device == 0``: a device kept as its GPU index (one process per GPU), compared with an
    index, tells the processes of a node apart like the local rank. (A device compared with a string
    or a ``torch.device`` is the same on every rank, and a bare ``device`` says nothing.)"""
    if len(test.ops) != 1 or not isinstance(test.ops[0], (ast.Eq, ast.NotEq, ast.LtE, ast.Gt)):
        return False
    left, right = test.left, test.comparators[0]
    name = (dotted(left) or "").rsplit(".", 1)[-1].lower()
    return (
        name in _DEVICE_NAMES
        and isinstance(right, ast.Constant)
        and type(right.value) is int
        and right.value == 0
    )


def _by_name(name: str, m=None) -> str | None:
    if m is not None and m.__dict__.get("_rank_strict"):
        return None  # strict_rank_kind: evidence only, not what a name suggests
    name = name.lower()  # `cfg.GPU_ID`, `LOCAL_RANK` as a config constant
    return _NAME_KIND.get(name) or (LOCAL if "local_rank" in name else None)


def _group_rank_names(m) -> set[tuple[int, str]]:
    """(id of the function, name) for each plain name a function hands ``init_process_group`` as its
    ``rank=`` and never rebinds: that name is the process's global rank there."""
    out = m.__dict__.get("_group_rank_names")
    if out is None:
        out = set()
        for call in m.dist_calls("init_process_group"):
            rank = m.keyword(call, "rank")
            fn = m.enclosing_function(call)
            if isinstance(rank, ast.Name) and "local" not in rank.id.lower() and fn is not None and not rebinds(fn, rank.id):
                out.add((id(fn), rank.id))
        m.__dict__["_group_rank_names"] = out
    return out


def rank_kind(m, expr: ast.AST | None, depth: int = 0) -> str | None:
    """GLOBAL, LOCAL or NODE when ``expr`` holds a rank of that kind, else None."""
    if expr is None or depth > _MAX_DEPTH:
        return None
    key = env_key(m, expr)
    if key is not None:
        return _ENV_KIND.get(key)
    if isinstance(expr, ast.Call):
        q = m.qualname(expr.func) or ""
        last = q.rsplit(".", 1)[-1]
        if last.startswith("_") and not last.startswith("__"):
            last = last.lstrip("_")  # a project's private helper: `_get_global_rank()` says the same
        if last in ("int", "str") and expr.args:
            return rank_kind(m, expr.args[0], depth + 1)
        if isinstance(expr.func, ast.Name) and not expr.args and not expr.keywords:
            own = _returned_kind(m, expr.func.id, depth)  # what this file's helper returns beats its name
            if own is not None:
                return own
        op = dist_op(q)
        if op in ("get_rank", "get_global_rank") and not expr.args and m.keyword(expr, "group") is None:
            return GLOBAL
        if op == "get_node_local_rank" or last in ("get_local_rank", "local_rank"):
            return LOCAL
        if last in ("get_rank", "get_global_rank", "global_rank") and not expr.args:
            return GLOBAL
        if last == "get_node_rank":
            return NODE
        return None
    if isinstance(expr, ast.BinOp):
        left = rank_kind(m, expr.left, depth + 1)
        if isinstance(expr.op, ast.Mod) and left == GLOBAL:
            return LOCAL  # rank % ngpus_per_node: the index on this node
        if isinstance(expr.op, (ast.Add, ast.Sub)):
            right = rank_kind(m, expr.right, depth + 1)
            if {left, right} == {LOCAL, None} and isinstance(expr.op, ast.Add):
                # node_rank * n + local_rank (or offset + local_rank): a global rank
                other = expr.right if left == LOCAL else expr.left
                return GLOBAL if not isinstance(other, ast.Constant) else LOCAL
            if NODE in (left, right) and LOCAL in (left, right):
                return GLOBAL
            return left or right
        if isinstance(expr.op, ast.Mult):
            return None
        return left
    if isinstance(expr, ast.IfExp):
        return rank_kind(m, expr.body, depth + 1) or rank_kind(m, expr.orelse, depth + 1)
    if isinstance(expr, ast.BoolOp):
        for v in expr.values:
            k = rank_kind(m, v, depth + 1)
            if k:
                return k
        return None
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant):
        k = expr.slice.value
        if isinstance(k, str) and k in _ENV_KIND:
            return _ENV_KIND[k]  # env["LOCAL_RANK"] from a copy of the environment, keyed by its name
        if isinstance(k, str):
            dest = argparse_dests(m).get(k)
            if dest is not None and dest.kind:
                return dest.kind  # config["rank"] filled from the parsed arguments
            found = _from_assignments(m, f"[{k!r}]", depth)
            return found or _by_name(k, m)
        return None
    name = dotted(expr)
    if name is None:
        return None
    if name in _shifted_names(m):
        return None  # `args.local_rank += node_index * gpus`: local before that line, global after
    found = _from_assignments(m, name, depth)
    if found:
        return found
    head, _, last = name.rpartition(".")
    if head and head != "self":
        dest = argparse_dests(m).get(last)
        if dest is not None and dest.kind:
            return dest.kind
    if head == "self" or head:
        found = _from_assignments(m, f"self.{last}", depth) if head != "self" else None
        if found:
            return found
    by_name = _by_name(last or name, m)
    if by_name is None and isinstance(expr, ast.Name) and (id(m.enclosing_function(expr)), expr.id) in _group_rank_names(m):
        return GLOBAL  # `init_process_group(..., rank=worker_idx)`: nothing else said, it is the rank
    return by_name


_PENDING = object()


def strict_rank_kind(m, expr: ast.AST) -> str | None:
    """rank_kind from evidence only (the environment, get_rank(), argparse flags, assignments), not
    from names alone (``self.device_id`` is often just a device): what the interpreter may trust."""
    m.__dict__["_rank_strict"] = True
    try:
        return rank_kind(m, expr)
    finally:
        m.__dict__["_rank_strict"] = False


def _from_assignments(m, key: str, depth: int) -> str | None:
    """The one kind every non-constant value assigned to ``key`` has; memoised per file (a name is
    looked up many times, and through chains of assignments: without it the work is exponential)."""
    memo = m.__dict__.setdefault(
        "_rank_kind_memo_strict" if m.__dict__.get("_rank_strict") else "_rank_kind_memo", {}
    )
    hit = memo.get(key, None)
    if hit is _PENDING:
        return None  # a cycle of assignments (x = y; y = x)
    if key in memo:
        return hit
    memo[key] = _PENDING
    kinds = set()
    for value, _node in _assignments(m).get(key, ())[:32]:
        if not _is_plain_constant(value):
            k = rank_kind(m, value, depth + 1)
            if k:
                kinds.add(k)
    memo[key] = out = kinds.pop() if len(kinds) == 1 else None
    return out


def _returned_kind(m, name: str, depth: int) -> str | None:
    """``def _get_rank(): return int(os.environ.get("LOCAL_RANK", 0))``: the one kind every value
    this file's function returns has (a helper called without arguments, so its result does not
    depend on what the caller hands it). Memoised per file, name and strictness."""
    memo = m.__dict__.setdefault("_returned_kind_memo", {})
    key = (name, bool(m.__dict__.get("_rank_strict")))
    if key in memo:
        return None if memo[key] is _PENDING else memo[key]
    memo[key] = _PENDING  # a helper that calls itself
    kinds = {rank_kind(m, v, depth + 1) for v in _own_returns(m, name) if not _is_plain_constant(v)}
    memo[key] = out = kinds.pop() if len(kinds) == 1 else None
    return out


def _own_returns(m, name: str) -> list[ast.AST]:
    """The values the file's function ``name`` returns: of the def that runs (a later def of the
    name replaces an earlier one)."""
    fns = _functions_named(m).get(name, ())
    return [n.value for fn in fns[-1:] for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]


def _is_plain_constant(v: ast.AST) -> bool:
    return isinstance(v, ast.Constant) or (isinstance(v, ast.UnaryOp) and isinstance(v.operand, ast.Constant))


def _functions_named(m) -> dict[str, list]:
    """This file's defs by name, in source order (built once per file)."""
    out = m.__dict__.get("_functions_by_name")
    if out is None:
        out = m.__dict__["_functions_by_name"] = {}
        for fn in m.functions:
            out.setdefault(fn.name, []).append(fn)
    return out


def _local_predicate_kind(m, name: str, depth: int) -> str | None:
    """``def is_main_process(): return get_rank() == 0`` in this file: the kind of its test. Memoised
    per file, name, depth and strictness: a big file asks about one predicate from many places, and
    each answer walks the function and follows the tests it returns."""
    memo = m.__dict__.setdefault("_predicate_kind_memo", {})
    key = (name, depth, bool(m.__dict__.get("_rank_strict")))
    if key in memo:
        return memo[key]
    out = None
    for fn in _functions_named(m).get(name, ()):
        for node in walk(fn):
            if isinstance(node, ast.Return) and node.value is not None:
                k = guard_kind(m, node.value, depth + 1)
                if k is not None:
                    out = k[0] if isinstance(k, tuple) else k
                    break
        if out is not None:
            break
    memo[key] = out
    return out


def _logical_operands(test: ast.AST) -> list[ast.AST] | None:
    """The operands of ``a and b`` / ``a or b``, and of ``(a == 1) & (b == 0)`` / ``|`` between
    comparisons or their negations, which scripts write for ``and`` and ``or``; None for other
    arithmetic."""
    if isinstance(test, ast.BoolOp):
        return test.values
    if not (isinstance(test, ast.BinOp) and isinstance(test.op, (ast.BitAnd, ast.BitOr))):
        return None
    out = []
    for side in (test.left, test.right):
        if isinstance(side, ast.BinOp):
            inner = _logical_operands(side)
            if inner is None:
                return None
            out.extend(inner)
        elif isinstance(side, (ast.Compare, ast.BoolOp)) or (
            isinstance(side, ast.UnaryOp) and isinstance(side.op, ast.Not)
        ):
            out.append(side)
        else:
            return None
    return out


def guard_kind(m, test: ast.AST | None, depth: int = 0):
    """For a condition that looks at the rank: (kind or None,); None if it does not look at the rank."""
    if test is None or depth > _MAX_DEPTH:
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return guard_kind(m, test.operand, depth + 1)
    if _boolean_of(test) is not None:  # `True if local_rank == 0 else False`: the test itself
        return guard_kind(m, _boolean_of(test), depth + 1)
    if isinstance(test, (ast.BoolOp, ast.BinOp)):
        values = _logical_operands(test)
        if values is None:
            return None
        found = [g for v in values if (g := guard_kind(m, v, depth + 1)) is not None]
        if not found:
            return None
        kinds = {g[0] for g in found if g[0]}
        return (kinds.pop() if len(kinds) == 1 else None,)
    if isinstance(test, ast.Compare):
        if _only_negative_constants(test.comparators) or _every_rank_holds(test):
            return None  # local_rank == -1: "not distributed", the same on every rank of a run
        if all(isinstance(op, (ast.Is, ast.IsNot)) for op in test.ops) and all(
            isinstance(c, ast.Constant) and c.value is None for c in test.comparators
        ):
            return None  # args.gpu is None: whether it was set, the same on every rank of a run
        if any(
            isinstance(c, ast.Constant) and isinstance(c.value, str) and not c.value.strip().lstrip("-").isdigit()
            for c in (test.left, *test.comparators)
        ):
            return None  # `device != "cpu"` (a device that holds the rank or "cpu"): no rank is a word
        for side in (test.left, *test.comparators):
            k = rank_kind(m, side, depth + 1)
            if k is not None:
                return (k,)
        if any(_shifted_rank(m, side) for side in (test.left, *test.comparators)):
            return (None,)  # a rank, local or global depending on the line: a rank test all the same
        if _device_index_test(test):
            return (LOCAL,)
        return None
    if isinstance(test, ast.Call):
        name = (dotted(test.func) or "").rsplit(".", 1)[-1]
        if predicate_name_kind(name) is not None:
            local = _local_predicate_kind(m, name, depth)
            return (local or predicate_name_kind(name),)
        if name in _functions_named(m):
            k = _local_predicate_kind(m, name, depth)
            if k is not None and any(w in name.lower() for w in ("main", "master", "rank", "zero")):
                return (k,)
        found = m.resolve(dotted(test.func)) if m.project is not None else None
        if found is not None:  # a predicate defined in another file of the project
            other, fn = found
            k = _local_predicate_kind(other, fn.name, depth)
            if k is not None:
                return (k,)
        return None
    name = dotted(test)
    if name is not None:
        last = name.rsplit(".", 1)[-1]
        if predicate_name_kind(last) is not None:
            found = _from_guard_assignments(m, name, depth)  # already (kind,)
            return found or (predicate_name_kind(last),)
        found = _from_guard_assignments(m, name, depth)
        if found is not None:
            return found
        k = rank_kind(m, test, depth + 1)
        if k is not None:
            return (k,)  # ``if rank:`` / ``if not local_rank:``
        if "." in name:
            found = predicate_attribute_kind(m, last, depth)
            if found is not None:
                return found
        if name in _output_silencing_flags(m):
            return (None,)
    return None


# what a script rebinds to silence a process's output (``sys.stdout = NullWriter()``)
_SILENCED = frozenset(("sys.stdout", "sys.stderr", "builtins.print", "__builtin__.print"))


def _output_silencing_flags(m) -> frozenset[str]:
    """Flags whose falsehood silences this process's output (``if not opt.log: sys.stdout =
    NullWriter()``, or the ``else`` of ``if opt.log:``): only the process that logs keeps its
    output, so the flag says which rank this is, though the file does not show how it is set."""
    found = m.__dict__.get("_silencing_flags")
    if found is not None:
        return found
    out: set[str] = set()
    for node in m.nodes(ast.If):
        test, silent = node.test, node.orelse
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, silent = test.operand, node.body
        name = dotted(test) if isinstance(test, (ast.Name, ast.Attribute)) else None
        if name is None:
            continue
        if any(
            isinstance(st, ast.Assign) and any(dotted(t) in _SILENCED for t in st.targets) for st in silent
        ):
            out.add(name)
    found = m.__dict__["_silencing_flags"] = frozenset(out)
    return found


def predicate_attribute_kind(m, attr: str, depth: int = 0):
    """``ctx.is_main`` is a rank test when this file makes ``is_main`` one on some object
    (``self.is_main = rank == 0``, ``cfg.is_main = ...``) or as a property (``@property def is_main(self):
    return self.rank == 0``): the attribute carries the test to every object that holds it. One
    kind over every definition, else None; a definition that is not a rank test makes it unknown
    (a plain ``is_main = True`` elsewhere says nothing about ranks: stay quiet)."""
    memo = m.__dict__.setdefault("_predicate_attr_memo", {})
    key = (attr, bool(m.__dict__.get("_rank_strict")))
    if key in memo:
        hit = memo[key]
        return None if hit is _PENDING else hit
    memo[key] = _PENDING
    found: list = []
    for target, values in _assignments(m).items():
        if target.rpartition(".")[2] != attr or "." not in target:
            continue
        for value, _node in values[:32]:
            found.append(None if _is_plain_constant(value) else guard_kind(m, value, depth + 1))
    for fn in _functions_named(m).get(attr, ()):
        if not is_property(fn):
            continue
        returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
        found.extend(guard_kind(m, r.value, depth + 1) for r in returns)
    out = None
    if found and all(g is not None for g in found):
        kinds = {g[0] for g in found}
        out = (kinds.pop() if len(kinds) == 1 else None,)
    memo[key] = out
    return out


def _every_rank_holds(test: ast.Compare) -> bool:
    """``local_rank >= 0`` / ``rank < 0``: true (false) for every rank of a distributed run, so it asks
    whether the run is distributed (or set up yet), not which rank this is. So does ``rank >= size``
    against the world size: false for every rank there is."""
    if len(test.ops) != 1:
        return False
    c = test.comparators[0]
    if isinstance(test.ops[0], (ast.GtE, ast.Lt)):
        if isinstance(c, ast.Constant) and c.value == 0 and not isinstance(c.value, bool):
            return True
        return names_world_size(c)  # `rank >= size`: no rank of the world is past its size
    if isinstance(test.ops[0], (ast.Gt, ast.LtE)):  # `rank > world_size - 1`
        return (
            isinstance(c, ast.BinOp)
            and isinstance(c.op, ast.Sub)
            and isinstance(c.right, ast.Constant)
            and c.right.value == 1
            and names_world_size(c.left)
        )
    return False


def round_robin_share(m, test: ast.AST) -> str | None:
    """How ``test`` splits a loop's items between the ranks, one in every world size: "mine" for
    ``i % world_size == rank`` (the arm keeps this rank's items), "others" for ``i % world_size !=
    rank`` (the arm skips them), else None."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq))):
        return None
    for a, b in ((test.left, test.comparators[0]), (test.comparators[0], test.left)):
        if (
            isinstance(a, ast.BinOp)
            and isinstance(a.op, ast.Mod)
            and names_world_size(a.right)
            and rank_kind(m, a.left) is None
            and rank_kind(m, b) is not None
        ):
            return "mine" if isinstance(test.ops[0], ast.Eq) else "others"
    return None


def round_robin_split(m, loop: ast.AST) -> tuple[ast.If, str, list] | None:
    """The first ``if`` at the top of ``loop`` that deals its items out round-robin, how, and the
    statements that run on this rank's items: after ``if i % world_size != rank: continue``
    ("others"), or inside ``if i % world_size == rank:`` ("mine")."""
    for i, st in enumerate(loop.body):
        if not isinstance(st, ast.If):
            continue
        share = round_robin_share(m, st.test)
        if share == "others" and st.body and isinstance(st.body[-1], ast.Continue) and not st.orelse:
            return st, share, loop.body[i + 1 :]
        if share == "mine":
            return st, share, st.body
    return None


_WORLD_SIZE_NAMES = frozenset(("size", "world_size", "world", "nprocs", "num_processes", "num_replicas"))


def names_world_size(e: ast.AST) -> bool:
    """``size``, ``args.world_size``, ``dist.get_world_size()``: the number of ranks in the job."""
    if isinstance(e, ast.Call) and not e.args:
        return (dotted(e.func) or "").rsplit(".", 1)[-1] == "get_world_size"
    name = dotted(e) if isinstance(e, (ast.Name, ast.Attribute)) else None
    if name is None:
        return False
    last = name.rsplit(".", 1)[-1].lower()
    # (`ddp_world_size`, nanoGPT's name for it; not the per-node `local_world_size`)
    return last in _WORLD_SIZE_NAMES or (last.endswith("_world_size") and "local" not in last and "node" not in last)


def _only_negative_constants(nodes) -> bool:
    vals = []
    for n in nodes:
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) and isinstance(n.operand, ast.Constant):
            vals.append(-n.operand.value if isinstance(n.operand.value, (int, float)) else 0)
        elif (
            isinstance(n, ast.Constant)
            and isinstance(n.value, (int, float))
            and not isinstance(n.value, bool)
        ):
            vals.append(n.value)
        else:
            return False
    return bool(vals) and all(v < 0 for v in vals)


def _boolean_of(e: ast.AST) -> ast.AST | None:
    """The condition of ``True if cond else False`` (or its negation's, ``False if cond else
    True``): a flag that holds exactly where ``cond`` does, or does not."""
    if not (
        isinstance(e, ast.IfExp)
        and isinstance(e.body, ast.Constant)
        and isinstance(e.orelse, ast.Constant)
        and {e.body.value, e.orelse.value} == {True, False}
        and all(type(c.value) is bool for c in (e.body, e.orelse))
    ):
        return None
    return e.test if e.body.value is True else ast.UnaryOp(op=ast.Not(), operand=e.test)


def _from_guard_assignments(m, key: str, depth: int):
    """``is_master = args.rank == 0`` then ``if is_master:``; also a flag this file's function hands
    back, whatever it is called (``is_main_process = setup_distributed(cfg)``, which ends with
    ``return cfg.local_rank == 0``)."""
    found = _assignments(m).get(key, ())
    for value, _node in found:
        if not _is_plain_constant(value):
            g = guard_kind(m, value, depth + 1)
            if g is not None:
                return g
            if isinstance(value, ast.Call) and (fname := (dotted(value.func) or "").rsplit(".", 1)[-1]) in _functions_named(m):
                k = _local_predicate_kind(m, fname, depth)
                if k is not None:
                    return (k,)
    return _flag_set_by_rank_test(m, found, depth)


def _flag_set_by_rank_test(m, found: list, depth: int):
    """``default_gpu = False``, then ``default_gpu = True`` only under ``if rank == 0:`` and in the
    arm of a one-process run (``else:`` of ``if args.local_rank != -1:``): a main-process flag with
    that test's kind."""
    if depth > 2 or len(found) < 2 or not all(
        isinstance(v, ast.Constant) and isinstance(v.value, bool) for v, _n in found
    ):
        return None
    kinds = []
    for value, node in found:
        if value.value is not True:
            continue
        if single_process_arm(m, node):
            continue
        test, child = None, node
        for a in m.ancestors(node):  # the nearest `if` whose body (not its else) holds it
            if isinstance(a, ast.If) and any(child is st for st in a.body):
                test = a.test
                break
            child = a
        g = guard_kind(m, test, depth + 1) if test is not None else None
        if g is None:
            return None  # set True where every rank may pass: not a rank flag
        kinds.append(g)
    return kinds[0] if kinds else None


_WRAPPER_WORDS = ("on_master", "on_main", "on_rank0", "on_rank_0", "rank_zero_only", "main_process_only")


_RANK_DECORATOR_WORDS = ("rank_zero", "main_process", "master")


def decorator_guard_kind(m, d: ast.AST) -> str | None:
    """The kind of rank (GLOBAL, LOCAL) a decorator lets run the function it decorates, None when it
    lets every rank: a rank test used as one (``@rank_zero_only``, ``@master_only`` by name), or a
    decorator of this file (or, in a project, another) whose wrapper calls the function only under
    a rank test (``def exec_if_main(func): def wrapper(*a): if is_main_process(): func(*a)``)."""
    memo = m.__dict__.setdefault("_decorator_guard_kind", {})
    key = id(d)
    if key not in memo:
        memo[key] = _decorator_guard_kind(m, d)
    return memo[key]


def _decorator_guard_kind(m, d: ast.AST) -> str | None:
    target = d.func if isinstance(d, ast.Call) else d
    g = guard_kind(m, target)
    if g is not None:
        return g[0]
    name = dotted(target)
    if name is None:
        return None
    text = name.lower()
    if any(w in text for w in _RANK_DECORATOR_WORDS) and "first" not in text:
        # (not `main_process_first`: every rank runs what it wraps, the main one first)
        return LOCAL if "local" in text else GLOBAL
    mod, fn = callee_def(m, name)
    if fn is None or not fn.args.args and not isinstance(d, ast.Call):
        return None
    for inner in ast.walk(fn):
        if inner is fn or not isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = [s for s in inner.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        first = body[0] if body else None
        if isinstance(first, ast.If) and (_early_exit(first) or len(body) == 1 and not first.orelse):
            g = guard_kind(mod, first.test)
            if g is not None:
                return g[0]
    return None


def callee_guard(m, call: ast.Call) -> Guard | None:
    """The rank test inside the function ``call`` runs (this file's or, in a project, another file's):
    ``def save_on_master(*a): if is_main_process(): torch.save(*a)`` guards everything it does. A
    wrapper named for it (``save_on_master``) counts even when its body is not visible."""
    name = dotted(call.func)
    if name is None:
        return None
    mod, fn = callee_def(m, name)
    last = name.rsplit(".", 1)[-1]
    if fn is not None:
        body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        # an early return on the rank first, or a body that is one `if <rank test>:`
        first = body[0] if body else None
        if _early_exit(first) or (isinstance(first, ast.If) and len(body) == 1 and not first.orelse):
            g = guard_kind(mod, first.test)
            if g is not None:
                return Guard(first.test, g[0], (call.lineno,))
        for d in fn.decorator_list:
            kind = decorator_guard_kind(mod, d)
            if kind is not None:
                return Guard(d, kind, (call.lineno,))
    if any(w in last.lower() for w in _WRAPPER_WORDS) or names_one_rank_output(last):
        return Guard(call, LOCAL if "local" in last.lower() else GLOBAL, ())
    return None


def _guard_in_other_files(m, fn: ast.AST, depth: int) -> Guard | None:
    """A top-level function of this file called only from other project files, each time under a
    rank test there (``if rank == 0: utils.save_checkpoint(...)``)."""
    if m.project is None or fn not in m.tree.body:
        return None
    sites = m.project.callers(m.path, fn.name)
    if not sites:
        return None
    guards = [(other, rank_guard(other, c, depth + 1), c) for other, c in sites]
    if not all(g for _o, g, _c in guards):
        return None
    other, first, call = guards[0]
    kinds = {g.kind for _o, g, _c in guards}
    return Guard(
        first.test, kinds.pop() if len(kinds) == 1 else None, (*first.chain, call.lineno), other.path
    )


def own_call_sites(m, fn: ast.AST) -> list[ast.Call]:
    """Calls of this file's function or method ``fn``: ``f(...)``; for a method also ``self.f(...)`` and ``obj.f(...)``, but
    not ``torch.save`` for a method named ``save`` (a name reached through an import)."""
    out = []
    seen = set()
    # a function of the module is called by its bare name here: `callbacks.run(...)` is some object's
    # method, not this file's `def run`
    method = m.is_method(fn)
    for c in (*m.call_sites(fn), *m.method_calls(getattr(fn, "name", ""))):
        if id(c) in seen:
            continue
        seen.add(id(c))
        func = c.func
        if isinstance(func, ast.Name):
            out.append(c)
        elif isinstance(func, ast.Attribute) and method:
            head = dotted(func.value)
            root = head.split(".", 1)[0] if head else None
            # `self.model.train()` is an object the instance holds (nn.Module.train), not this method
            if (root is None or root not in m.aliases) and not (head or "").startswith("self."):
                out.append(c)
    return out


# flags that say "this run is distributed" (``if args.distributed:``, ``if ddp:``)
def _flag(word: str) -> bool:
    """A switch whose being off means one process. Not ``multiprocessing_distributed``: the ImageNet
    example's switch says who starts the processes (``mp.spawn`` here, or a launcher such as srun
    that starts one per GPU), not whether there are several."""
    low = word.lower()
    return (is_distributed_flag(word) and low != "multiprocessing_distributed") or low in ("multi_gpu", "multigpu")


def _single_when(test: ast.AST, m=None) -> bool | None:
    """True when ``test`` holds in a single-process run only (``not args.distributed``,
    ``world_size == 1``, ``local_rank == -1``, a flag the script refuses under DDP), False when in a
    distributed run only (``ddp``, ``world_size > 1``, ``LOCAL_RANK != -1``), else None."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _single_when(test.operand, m)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        # ``args.distributed and world_size > 1``: parts that each hold exactly in the one kind of
        # run hold together exactly there too (one unknown part leaves the whole unknown)
        parts = {_single_when(v, m) for v in test.values}
        if len(parts) == 1:
            return parts.pop()
        # ``FLAGS.parallel and world_size > 1``: a conjunction with a part that holds in a distributed
        # run only holds there only, when no other part tests the rank (``ddp and rank == 0`` holds
        # on one rank: its ``else`` is every other rank's)
        if (
            isinstance(test.op, ast.And)
            and False in parts
            and m is not None
            and not any(guard_kind(m, v) is not None for v in test.values)
        ):
            return False
        return None
    if isinstance(test, ast.Subscript) and isinstance(test.slice, ast.Constant):
        key = test.slice.value  # `cfg["DDP"]`
        return False if isinstance(key, str) and _flag(key) else None
    if isinstance(test, ast.Call) and not test.args and not test.keywords:
        # a predicate asked: `is_distributed()`, `dist.is_initialized()` (the group is up: many processes)
        called = (dotted(test.func) or "").rsplit(".", 1)[-1]
        return False if _flag(called) or called == "is_initialized" else None
    name = dotted(test)
    if name is not None:
        last = name.rsplit(".", 1)[-1].lower()
        if _flag(last) or ("." in name and last == "dist"):  # `args.dist`, not the module
            return False
        return True if m is not None and name in _refused_under_ddp(m) else None
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and isinstance(test.comparators[0].value, bool)
        and isinstance(test.ops[0], (ast.Eq, ast.NotEq, ast.Is, ast.IsNot))
    ):
        # `args.distributed == False`, `ddp is True`: the flag's own answer, or its negation
        inner = _single_when(test.left, m)
        if inner is None:
            return None
        same = test.comparators[0].value == isinstance(test.ops[0], (ast.Eq, ast.Is))
        return inner if same else not inner
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = dotted(test.left) or "", test.comparators[0]
        if isinstance(test.left, ast.Call) and not test.left.args:
            left = dotted(test.left.func) or ""  # dist.get_world_size() != 1
        last = left.rsplit(".", 1)[-1]
        if last == "get_world_size":
            last = "world_size"
        if (last in ("world_size", "num_gpus", "ngpus") or last.endswith(("_world_size", "_num_gpus"))) and isinstance(
            right, ast.Constant
        ):
            if right.value == 1 and isinstance(test.ops[0], (ast.Eq, ast.LtE)):
                return True
            if right.value == 1 and isinstance(test.ops[0], (ast.Gt, ast.NotEq)):
                return False
        if last.lower() in ("local_rank", "rank") and _only_negative_constants([right]):
            # -1: the launcher set no rank, so the run is not distributed
            if isinstance(test.ops[0], (ast.Eq, ast.Is)):
                return True
            if isinstance(test.ops[0], (ast.NotEq, ast.IsNot)):
                return False
    return None


def _refused_under_ddp(m) -> frozenset[str]:
    """Options the script refuses in a distributed run: ``assert not opt.evolve`` (or ``if
    opt.evolve: raise``) inside ``if LOCAL_RANK != -1:``. Code that runs only with such an option
    on runs in a single process."""
    cached = m.__dict__.get("_refused_under_ddp")
    if cached is not None:
        return cached
    out: set[str] = set()
    for node in m.nodes(ast.If):
        if _single_when(node.test) is not False:
            continue
        for st in node.body:
            if isinstance(st, ast.Assert):
                test = st.test
            elif isinstance(st, ast.If) and st.body and isinstance(st.body[0], ast.Raise):
                test = ast.UnaryOp(op=ast.Not(), operand=st.test)
            else:
                continue
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                name = dotted(test.operand)
                if name is not None:
                    out.add(name)
    m.__dict__["_refused_under_ddp"] = frozenset(out)
    return m.__dict__["_refused_under_ddp"]


def distributed_when_true(test: ast.AST) -> bool:
    """``test`` holds only in a distributed run (``args.distributed``, ``world_size > 1``)."""
    return _single_when(test) is False


def _group_starts(m) -> list[tuple[int, int]]:
    """(line, column) of the calls that start the process group or wrap the model in DDP
    (``init_process_group``, ``init_distributed_mode(args)``, ``DDP(model)``)."""
    cached = m.__dict__.get("_group_starts")
    if cached is None:
        calls = [*m.dist_calls("init_process_group"), *m.ddp_constructors]
        calls += [c for c, q in m.calls if (q or "").rsplit(".", 1)[-1].startswith("init_dist")]
        cached = m.__dict__["_group_starts"] = [(c.lineno, c.col_offset) for c in calls]
    return cached


def _starts_group(m, stmts: list) -> bool:
    if not stmts:
        return False
    lo, hi = stmts[0].lineno, stmts[-1].end_lineno or stmts[-1].lineno
    return any(lo <= ln <= hi for ln, _c in _group_starts(m))


def _mode_value(test: ast.AST) -> tuple[str, object] | None:
    """``args.dist == "OFF"``: (the name, the constant) of a test of a mode option."""
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.comparators[0], ast.Constant)
    ):
        name = dotted(test.left)
        if name is not None:
            return name, test.comparators[0].value
    return None


def _other_mode_starts_group(m, test: ast.AST) -> bool:
    """``if args.dist == "OFF":`` where the file starts the process group under ``if args.dist ==
    "ON":`` and not under this test: the mode option picks one process or many, and this arm is
    the one process."""
    mine = _mode_value(test)
    if mine is None or not _group_starts(m):
        return False
    for other in m.nodes(ast.If):
        theirs = _mode_value(other.test)
        if theirs is not None and theirs[0] == mine[0] and theirs[1] != mine[1] and _starts_group(m, other.body):
            return True
    return False


def _starts_job(m, stmts: list) -> bool:
    """``stmts`` spawn the workers, also through a call of this file's own function that does
    (``distributed_main()``, whose ``mp.spawn`` starts them): the launching parent's choice. (Not a
    mere ``init_process_group``: a spawned worker that sets up its group in one arm and not the
    other is still one of many processes in both.)"""
    if _spawns(m, stmts):
        return True
    starters = m.__dict__.get("_job_starters")
    if starters is None:
        starters = m.__dict__["_job_starters"] = {fn.name for fn in m.functions if _spawns(m, fn.body)}
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in starters
        for st in stmts
        for n in ast.walk(st)
    )


SPAWNS = ("spawn", "start_processes")


def multi_process(m) -> bool:
    """The file runs as one of several processes: it uses torch.distributed, is the code of a
    distributed job, spawns workers, or reads the launcher's ``LOCAL_RANK``."""
    return m.uses_distributed or m.distributed_context or bool(spawn_calls(m)) or m.mentions("LOCAL_RANK")


def spawn_calls(m) -> list[ast.Call]:
    """torch.multiprocessing's ``spawn``/``start_processes`` calls of the file (found once)."""
    cached = m.__dict__.get("_writers_spawns")
    if cached is None:
        cached = m.__dict__["_writers_spawns"] = [
            c
            for c, q in m.calls
            if q and q.rsplit(".", 1)[-1] in SPAWNS and ("multiprocessing" in q or q.startswith("torch."))
        ]
    return cached


def _spawns(m, stmts: list) -> bool:
    if not stmts:
        return False
    lo, hi = stmts[0].lineno, stmts[-1].end_lineno or stmts[-1].lineno
    return any(lo <= c.lineno <= hi for c in spawn_calls(m))


def _arm_of_one_process(m, branch: ast.If, child: ast.AST) -> bool:
    """``if FLAGS.dist_backend is not None: distributed_main() else: single_main()``: one arm spawns
    the distributed job's workers and the arm holding ``child`` does not, so that arm is the
    one-process run."""
    mine, other = (branch.body, branch.orelse) if child in branch.body else (branch.orelse, branch.body)
    return _starts_job(m, other) and not _starts_job(m, mine)


def single_process_arm(m, node: ast.AST) -> bool:
    """``node`` runs only when the job is not distributed (the ``else`` of ``if ddp:``, the body of
    ``if world_size == 1:``, of ``if args.dist == "OFF":`` beside ``if args.dist == "ON":
    init_process_group(...)``): one process, so no rank test there can part ranks."""
    child = node
    for a in m.ancestors(node):
        if isinstance(a, ast.If) and child is not a.test:
            single = _single_when(a.test, m)
            if single is not None and (child in a.body) == single:
                return True
            if child in a.body and _single_conjunct(a.test, m):
                return True
            if child in a.body and not _starts_group(m, a.body) and _other_mode_starts_group(m, a.test):
                return True
            if a.orelse and _arm_of_one_process(m, a, child):
                return True
            # `if args.eval: assert args.distributed == False; ...`: the arm refuses a distributed run
            if _refuses_many_before(m, a.body if child in a.body else a.orelse, node):
                return True
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return not isinstance(a, ast.Lambda) and _refuses_many_before(m, a.body, node)
        child = a
    return False


def _single_conjunct(test: ast.AST, m) -> bool:
    """``RANK == -1 and stopper(fi)``: a conjunction with a part that holds in a single-process run
    only holds there only (its ``else`` runs in both kinds of run)."""
    return (
        isinstance(test, ast.BoolOp)
        and isinstance(test.op, ast.And)
        and any(_single_when(v, m) is True for v in test.values)
    )


def distributed_arm(m, node: ast.AST) -> ast.If | None:
    """The ``if`` of ``node``'s own function whose test sends it to the distributed arm (the body of
    ``if args.distributed:``, of ``if local_rank != -1:``, the ``else`` of ``if world_size == 1:``):
    ``node`` runs in a multi-process run only."""
    child = node
    for a in m.ancestors(node):
        if isinstance(a, ast.If) and child is not a.test:
            single = _single_when(a.test, m)
            if single is not None and (child in a.body) != single:
                return a
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return None
        child = a
    return None


def dataparallel_in_distributed_run(m, call: ast.Call) -> bool:
    """The distributed run itself goes through this ``DataParallel(...)``: it is not behind any
    ``if`` of its function, or it is in the arm of a distributed-mode test that runs under DDP."""
    node: ast.AST = call
    fn = m.enclosing_function(node)
    while fn is not None and m.enclosing_function(fn) is not None and not m.is_method(fn):
        node, fn = fn, m.enclosing_function(fn)  # a def nested in a function runs where it is defined
    if single_process_only(m, node):
        return False  # `else: train(args)` of `if args.dist:`: one process
    return not m.conditional(node) or distributed_arm(m, node) is not None


def _refuses_many_before(m, body: list, node: ast.AST) -> bool:
    """A statement of ``body`` before ``node`` leaves every distributed run (``if
    dist.get_world_size() != 1: raise``, ``assert world_size == 1``): what follows runs in one
    process only."""
    for st in body:
        if st.lineno >= node.lineno:
            return False
        if isinstance(st, ast.Assert) and _single_when(st.test, m) is True:
            return True
        if (
            isinstance(st, ast.If)
            and st.body
            and _leaves_run(st.body[-1])
            and _single_when(st.test, m) is False
        ):
            return True
    return False


def _leaves_run(st: ast.stmt) -> bool:
    if isinstance(st, (ast.Return, ast.Raise)):
        return True
    if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
        return (dotted(st.value.func) or "") in ("sys.exit", "exit", "quit", "os._exit")
    return False


def single_process_only(m, node: ast.AST, depth: int = 0) -> bool:
    """``node`` is on a single-process arm, or in a function of this file that is called, and only
    from such arms, directly or through other functions (``else: train(args)`` of ``if args.ddp:``,
    where ``train`` loads a checkpoint): one process runs it."""
    if single_process_arm(m, node):
        return True
    fn = m.enclosing_function(node)
    if fn is None or depth > 3:
        return False
    method = m.is_method(fn)
    if not method and _handed_on(m, fn):
        return False  # `mp.spawn(main_worker, ...)` in the other arm: many processes run it too
    sites = [
        c
        for c in m.call_sites(fn)
        if m.enclosing_function(c) is not fn
        # `train(args)` calls the file's function `train`; `model.train()` does not
        and (isinstance(c.func, ast.Attribute) if method else isinstance(c.func, ast.Name))
    ]
    return bool(sites) and all(single_process_only(m, c, depth + 1) for c in sites)


def _handed_on(m, fn) -> bool:
    """The function is passed by name to some call (``mp.spawn(main_worker, ...)``, a launcher)."""
    handed = m.__dict__.get("_names_handed_on")
    if handed is None:
        handed = m.__dict__["_names_handed_on"] = {
            a.id
            for call, _q in m.calls
            for a in (*call.args, *(k.value for k in call.keywords))
            if isinstance(a, ast.Name)
        }
    return fn.name in handed


def _early_exit(st: ast.stmt) -> bool:
    return isinstance(st, ast.If) and any(
        isinstance(s, (ast.Return, ast.Raise, ast.Continue)) for s in st.body
    )


def arm_of(m, node: ast.AST, test: ast.AST) -> str | None:
    """Which arm of the ``if`` whose condition is ``test`` holds ``node``: "body" or "orelse"."""
    child = node
    for a in m.ancestors(node):
        if isinstance(a, ast.If) and a.test is test:
            return "body" if any(child is s for s in a.body) else "orelse"
        child = a
    return None


def _both_arms(m, sites: list[ast.Call], guards: list[Guard]) -> bool:
    """Calls of one function on both arms of the same rank test (``if rank == 0: f(a, log) else:
    f(a, None)``): between them every rank makes the call, so the test guards nothing."""
    arms: dict[int, set[str | None]] = {}
    for site, g in zip(sites, guards):
        if not g.chain:  # the test is in the caller's own function, around the call
            arms.setdefault(id(g.test), set()).add(arm_of(m, site, g.test))
    return any({"body", "orelse"} <= found for found in arms.values())


def rank_guard(m, node: ast.AST, depth: int = 0, follow_callers: bool = True) -> Guard | None:
    """The rank test that decides whether ``node`` runs, or None when every rank runs it as far as
    this file shows. Follows the file's own calls: a function whose every call is guarded is guarded
    (the chain names those calls). ``follow_callers=False``: only a test in ``node``'s own function
    (the place where ranks part ways, when ``node`` is a call)."""
    if depth > 3:
        return None
    # remembered per node and depth: a file of many helpers calling each other asks for the same
    # call sites again and again on the way up (tens of seconds in torch's test utilities)
    memo = m.__dict__.setdefault("_rank_guard_memo", {})
    key = (id(node), depth, follow_callers)
    found = memo.get(key)
    if found is not None and found[0] is node:
        return found[1]
    guard = _rank_guard(m, node, depth, follow_callers)
    memo[key] = (node, guard)
    return guard


def _rank_guard(m, node: ast.AST, depth: int, follow_callers: bool) -> Guard | None:
    child = node
    for a in m.ancestors(node):
        if isinstance(a, (ast.If, ast.IfExp, ast.While)) and child is not a.test:
            g = guard_kind(m, a.test)
            if g is not None:
                return Guard(a.test, g[0])
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for st in a.body:
                if st.lineno >= node.lineno:
                    break
                if _early_exit(st):
                    g = guard_kind(m, st.test)
                    if g is not None:
                        return Guard(st.test, g[0])
            for d in a.decorator_list:
                kind = decorator_guard_kind(m, d)
                if kind is not None:
                    return Guard(d, kind)
            if not follow_callers:
                return None
            sites = [
                c
                for c in own_call_sites(m, a)
                if m.enclosing_function(c) is not a and not single_process_arm(m, c)
            ]
            if not sites:
                return _guard_in_other_files(m, a, depth)
            guards = [rank_guard(m, c, depth + 1) for c in sites]
            if all(guards) and not _both_arms(m, sites, guards):
                first = guards[0]
                kinds = {g.kind for g in guards}
                return Guard(
                    first.test, kinds.pop() if len(kinds) == 1 else None, (*first.chain, sites[0].lineno)
                )
            return None
        if isinstance(a, ast.Lambda):
            return None
        child = a
    return None


_WORLD_ENV = frozenset(("WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"))


def _launcher_world_size(m, expr: ast.AST | None, depth: int = 0) -> bool:
    """``expr`` is the world size a launcher put in the environment (``WORLD_SIZE``, also through
    ``int()``, names assigned from it and this file's argument-free helpers), or absent, when
    ``env://`` reads it there. A count of this machine's GPUs is not: that script is one node's."""
    if expr is None:
        return True
    if depth > _MAX_DEPTH:
        return False
    if env_key(m, expr) in _WORLD_ENV:
        return True
    if isinstance(expr, ast.Call):
        if (m.qualname(expr.func) or "").rsplit(".", 1)[-1] == "int" and expr.args:
            return _launcher_world_size(m, expr.args[0], depth + 1)
        if isinstance(expr.func, ast.Name) and not expr.args:
            returns = _own_returns(m, expr.func.id)
            return bool(returns) and all(_launcher_world_size(m, r, depth + 1) for r in returns)
        return False
    if _minus_one(expr):
        return True  # torch's own default: env:// reads WORLD_SIZE
    name = dotted(expr)
    # (`args.world_size = dist.get_world_size()` runs after the group exists: it feeds no rendezvous)
    values = [
        v
        for v, _n in (assignments_seen_at(m, expr)[:8] if name else [])
        if not (isinstance(v, ast.Call) and (m.qualname(v.func) or "").endswith("distributed.get_world_size"))
    ]
    if not values and isinstance(expr, ast.Attribute):
        # `--world-size` left at its default of -1 (the ImageNet example's convention): env:// again
        dest = m.argparse_dests().get(expr.attr)
        return dest is not None and _minus_one(dest.default)
    return bool(values) and all(_launcher_world_size(m, v, depth + 1) for v in values)


def _minus_one(e: ast.AST | None) -> bool:
    return (
        isinstance(e, ast.UnaryOp)
        and isinstance(e.op, ast.USub)
        and isinstance(e.operand, ast.Constant)
        and e.operand.value == 1
    )


@dataclass(frozen=True)
class LocalAsGroupRank:
    """An ``init_process_group`` given the node-local rank: its rank argument, and where the file's
    setup helper holds it, the call that passes the local rank in (``setup(local_rank, world)``)."""

    init: ast.Call
    rank: ast.AST
    passed_by: ast.Call | None = None
    passed: ast.AST | None = None
    path_given: ast.AST | None = None  # the assignment that gives it the local rank on one launch path


def group_rank_argument(m, call: ast.Call) -> ast.AST | None:
    """The rank an ``init_process_group(...)`` call gives this process (``rank=`` or its fifth
    positional argument), else None (the launcher's RANK)."""
    return m.keyword(call, "rank") or (call.args[4] if len(call.args) > 4 else None)


def local_rank_as_group_rank(m) -> list[LocalAsGroupRank]:
    """``init_process_group(rank=int(os.environ["LOCAL_RANK"]), world_size=int(os.environ["WORLD_SIZE"]))``:
    the calls that hand the process group this node's rank where the world is the launcher's, with
    the rank expression. Evidence only (the environment, argparse flags, assignments), not names.
    Where the rank and world size are parameters of the file's own setup helper (``def
    setup(rank, world_size): dist.init_process_group(..., rank=rank, ...)``), the helper's calls are
    judged instead, each by what it passes (the first that passes a local rank is named)."""
    found = m.__dict__.get("_local_rank_as_group_rank")
    if found is not None:
        return found
    found = []
    # a rendezvous pinned to this machine (``tcp://127.0.0.1``): one node, where local is global
    for call in () if m.single_node else m.dist_calls("init_process_group"):
        rank = group_rank_argument(m, call)
        world = m.keyword(call, "world_size") or (call.args[3] if len(call.args) > 3 else None)
        if rank is None:
            continue
        passed = _passed_through(m, call, rank)
        if passed is not None:
            site_world = _passed_through(m, call, world) if world is not None else None
            world_at = {id(s): v for s, v in site_world} if site_world is not None else None
            for site, value in passed:
                w = world if world_at is None else world_at.get(id(site), _NOT_PASSED)
                kind = strict_rank_kind(m, value)
                local = kind == LOCAL or kind is None and _named_local_rank(m, value)
                if w is not _NOT_PASSED and local and _launcher_world_size(m, w):
                    found.append(LocalAsGroupRank(call, rank, site, value))
                    break  # one finding per process group: the first call that passes a local rank
            continue
        if not _launcher_world_size(m, world):
            continue
        kind = _kind_at_rendezvous(m, rank)
        if kind == LOCAL or kind is None and _named_local_rank(m, rank):
            found.append(LocalAsGroupRank(call, rank))
        elif (path := _local_on_one_launch_path(m, rank, call)) is not None:
            found.append(LocalAsGroupRank(call, rank, path_given=path))
    m.__dict__["_local_rank_as_group_rank"] = found
    return found


def _kind_at_rendezvous(m, rank: ast.AST) -> str | None:
    """The kind of the rank handed to ``init_process_group``: ``args.local_rank`` that the file only
    sets again from ``dist.get_rank()`` (which needs the group, so runs after it) is still the
    ``--local_rank`` option there."""
    if isinstance(rank, ast.Attribute):
        dest = m.argparse_dests().get(rank.attr)
        found = assignments(m, dotted(rank) or "")
        if (
            dest is not None
            and dest.kind == LOCAL
            and found
            and all(
                isinstance(v, ast.Call) and (m.qualname(v.func) or "").endswith("distributed.get_rank")
                for v, _a in found
            )
        ):
            return LOCAL
    return strict_rank_kind(m, rank)


def _named_local_rank(m, expr: ast.AST) -> bool:
    """``args.local_rank`` filled where this file does not show (another file's argument parser, a
    base class), or a name assigned only from such (``args.device_id = args.local_rank``): the name
    is the launcher's ``--local_rank`` / ``LOCAL_RANK`` by every convention that writes it. Not a
    name the file shifts to a global one (``args.local_rank += node * gpus``)."""

    def named(e: ast.AST) -> bool:
        name = dotted(e)
        return bool(name) and "local_rank" in name.rsplit(".", 1)[-1].lower() and name not in _shifted_names(m)

    if named(expr):
        return True
    values = [v for v, _a in assignments_seen_at(m, expr)[:8]]
    return bool(values) and all(isinstance(v, (ast.Name, ast.Attribute)) and named(v) for v in values)


def _local_on_one_launch_path(m, rank: ast.AST, call: ast.Call) -> ast.AST | None:
    """``if args.local_rank != -1: args.rank = args.local_rank`` / ``elif "SLURM_PROCID" in
    os.environ: args.rank = int(os.environ["SLURM_PROCID"])`` before ``init_process_group(rank=
    args.rank)``: on one launch path the group's rank is the node-local one. The assignment on that
    path (one arm of an ``if`` that does not hold the call, before it in the same function)."""
    fn = m.enclosing_function(call)
    scope = fn or m.tree
    here = arms(m, call, scope)
    for value, node in assignments_seen_at(m, rank)[:16]:
        if m.enclosing_function(node) is not fn or node.lineno >= call.lineno:
            continue
        there = arms(m, node, scope)
        if set(there.items()) <= set(here.items()):
            continue  # on every path to the call: its kind would be the name's
        if strict_rank_kind(m, value) == LOCAL and not _after_rank_env_test(m, node, scope):
            return node
    return None


def _after_rank_env_test(m, node: ast.AST, scope: ast.AST) -> bool:
    """``if "RANK" in os.environ: rank = int(os.environ["RANK"]) elif "LOCAL_RANK" in os.environ:
    rank = int(os.environ["LOCAL_RANK"])``: the local rank only where the launcher gave no global
    one, which a launcher that starts several nodes always gives."""
    child = node
    for a in m.ancestors(node):
        if a is scope:
            return False
        if isinstance(a, ast.If) and any(child is s for s in a.orelse):
            if any(
                isinstance(c, ast.Constant) and c.value == "RANK" or env_key(m, c) == "RANK" for c in ast.walk(a.test)
            ):
                return True
        child = a
    return False


def same_as_group_local_rank(m, expr: ast.AST) -> bool:
    """``expr`` is the very value that a call reported by ``local_rank_as_group_rank`` hands the
    process group as its rank (the same name, read in the same function): a sampler given it too
    (``DistributedSampler(ds, rank=local_rank)``) is the same mistake, fixed by the same change."""
    name = dotted(expr)
    if name is None:
        return False
    fn = m.enclosing_function(expr)
    return any(
        dotted(given) == name and m.enclosing_function(given) is fn
        for hit in local_rank_as_group_rank(m)
        for given in (hit.rank, hit.passed)
        if given is not None
    )


_NOT_PASSED = object()


def _passed_through(m, node: ast.AST, expr: ast.AST) -> list[tuple[ast.Call, ast.AST]] | None:
    """``expr`` is a parameter of the plain function of this file that holds ``node``, never
    rebound there: (call, the argument it passes) for each of the function's calls in the file
    (None when it is not such a parameter, has no calls, or one call's argument cannot be told)."""
    fn = m.enclosing_function(node)
    if not isinstance(expr, ast.Name) or fn is None or isinstance(m.parents.get(fn), ast.ClassDef):
        return None
    a = fn.args
    if expr.id not in {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)} or rebinds(fn, expr.id):
        return None
    sites = [c for c in m.call_sites(fn) if isinstance(c.func, ast.Name) and c.func.id == fn.name]
    if not sites:
        return None
    defaults = {id(d) for d in (*a.defaults, *a.kw_defaults) if d is not None}
    out = []
    for call in sites:
        if any(isinstance(x, ast.Starred) for x in call.args) or any(k.arg is None for k in call.keywords):
            return None
        known, value = bound_argument(fn, call, expr.id)
        if not known or value is None or id(value) in defaults:
            return None  # (a parameter the call leaves to its default is not passed through)
        out.append((call, value))
    return out


def last_value_before(m, name: str, node: ast.AST) -> ast.AST | None:
    """What the last plain assignment of ``name`` (a name or an attribute) before ``node``, in the
    same function, gave it: ``args.proc_id = args.local_rank`` then ``str(args.proc_id)``."""
    fn = m.enclosing_function(node)
    before = [
        a for a in m.nodes(ast.Assign)
        if a.lineno < node.lineno and m.enclosing_function(a) is fn and any(dotted(t) == name for t in a.targets)
    ]
    return max(before, key=lambda a: a.lineno).value if before else None


def under_join(m, node: ast.AST) -> bool:
    """Inside ``with model.join():`` or ``with Join([...]):``: DDP's context for uneven inputs, made
    for ranks that run different numbers of iterations (torch.distributed.algorithms.join)."""
    for a in m.ancestors(node):
        if isinstance(a, (ast.With, ast.AsyncWith)):
            for item in a.items:
                e = item.context_expr
                if isinstance(e, ast.Call) and (dotted(e.func) or "").rsplit(".", 1)[-1] in ("join", "Join"):
                    return True
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
    return False
