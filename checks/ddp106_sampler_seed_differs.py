"""DDP106: a DistributedSampler whose seed differs between ranks.

## What it does
Finds `DistributedSampler(..., seed=S)` (shuffling) where `S` comes from the rank
(`dist.get_rank()`, `RANK`, a rank variable) or from a source each process draws for itself
(`random.randint`, `np.random`, `time.time()`, `os.getpid()`), inline or through an assignment in
the same function or module, and is not broadcast from one rank; and a `DistributedSampler`
subclass whose own shuffle draws from the process's global random state (`torch.randperm(n)`
without a generator seeded by `seed + epoch`) before slicing by `self.rank`.

## Why is this bad?
DistributedSampler shuffles with a generator seeded by `seed + epoch` and then gives each rank every
`world_size`-th index of that permutation. Its documentation says the seed "should be identical
across all processes in the distributed group": with a different seed per rank, each rank slices a
different permutation, so some samples are seen several times per epoch and others never, silently.

## Example
```python
seed = args.seed if args.seed is not None else random.randint(0, 10_000)
sampler = DistributedSampler(train_set, shuffle=True, seed=seed)
```

## Use instead
```python
sampler = DistributedSampler(train_set, shuffle=True, seed=args.seed)   # the same on every rank
# or draw it on rank 0 and broadcast it: dist.broadcast_object_list(box, src=0)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dist_op, dotted

CODE = "DDP106"
TITLE = "DistributedSampler seed differs between ranks"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

# Sources each process draws for itself: two processes get different values.
_PER_PROCESS = frozenset(
    (
        "random.randint",
        "random.random",
        "random.randrange",
        "random.getrandbits",
        "random.choice",
        "numpy.random.randint",
        "numpy.random.rand",
        "numpy.random.random",
        "numpy.random.choice",
        "torch.randint",
        "torch.seed",
        "torch.initial_seed",
        "time.time",
        "time.time_ns",
        "time.perf_counter",
        "os.getpid",
        "uuid.uuid4",
        "secrets.randbits",
        "secrets.randbelow",
    )
)
_BROADCASTS = ("broadcast", "broadcast_object_list")


def _source(m, expr: ast.AST) -> tuple[ast.AST, str] | None:
    """(the node, what it is) for the first per-rank or per-process source inside ``expr``."""
    for n in ast.walk(expr):
        if isinstance(n, ast.Call):
            q = m.qualname(n.func) or ""
            if q in _PER_PROCESS:
                return n, f"`{ast.unparse(n)}`, drawn by each process for itself"
            if dist_op(q) in ("get_rank", "get_global_rank") or m.rank_kind(n) is not None:
                return n, f"`{ast.unparse(n)}`, the rank"
        elif isinstance(n, (ast.Name, ast.Attribute, ast.Subscript)) and m.rank_kind(n) is not None:
            return n, f"`{ast.unparse(n)}`, the rank"
    return None


def _reaching(m, name: str, use: ast.AST) -> list[ast.Assign]:
    """The assignments to ``name`` in ``use``'s function that may reach it: the last one before it
    that every path passes, and any later ones under a branch (``if seed is None: seed = ...``)."""
    fn = m.enclosing_function(use)
    found = sorted(
        (
            a
            for a in m.nodes(ast.Assign)
            if a.lineno < use.lineno
            and m.enclosing_function(a) is fn
            and any(dotted(t) == name for t in a.targets)
        ),
        key=lambda a: a.lineno,
    )
    out = []
    for a in reversed(found):
        out.append(a)
        if not any(
            isinstance(p, (ast.If, ast.Try, ast.For, ast.While)) and p is not fn
            for p in m.ancestors_below(a, fn)
        ):
            break  # unconditional: nothing earlier reaches the use
    return out


def _broadcasts(m) -> list[tuple[int, int, str]]:
    """(function, line, name) for each name handed to a broadcast: from that line on, its value is
    rank 0's on every rank in that function."""
    out = []
    for call in m.dist_calls(*_BROADCASTS):
        fn = id(m.enclosing_function(call))
        for arg in call.args:
            for n in ast.walk(arg):
                name = dotted(n)
                if name:
                    out.append((fn, call.lineno, name))
    return out


def _why(m, seed: ast.AST, shared, depth: int = 0) -> tuple[ast.AST, str] | None:
    found = _source(m, seed)
    name = dotted(seed)
    if found is not None or name is None or depth > 2:
        return found
    fn = id(m.enclosing_function(seed))
    for a in _reaching(m, name, seed):
        names = {dotted(n) for n in ast.walk(a.value)} | {name}
        if any(f == fn and a.lineno <= line <= seed.lineno and n in names for f, line, n in shared):
            continue  # broadcast after this assignment: every rank holds rank 0's value
        found = _why(m, a.value, shared, depth + 1) if dotted(a.value) else _source(m, a.value)
        if found is not None:
            return found
    return None


# draws of a permutation from the process's global random state
_GLOBAL_SHUFFLES = frozenset(
    ("torch.randperm", "numpy.random.permutation", "numpy.random.shuffle", "random.shuffle", "random.sample")
)
# what a method does when it seeds its own draw (a generator, a seeded state, `self.seed + self.epoch`)
_SEEDED = ("generator", "Generator", "manual_seed", "RandomState", "default_rng", ".seed", "epoch")


def _own_shuffles(m):
    """(draw, class) for each DistributedSampler subclass of this file that draws its permutation
    from the global random state, ignoring the seed and epoch, and slices it by ``self.rank``."""
    for cls in m.nodes(ast.ClassDef):
        if not any((m.qualname(b) or dotted(b) or "").endswith("DistributedSampler") for b in cls.bases):
            continue
        if "self.rank" not in ast.unparse(cls):
            continue
        for fn in cls.body:
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            text = ast.unparse(fn)
            if any(w in text for w in _SEEDED):
                continue
            for n in ast.walk(fn):
                if isinstance(n, ast.Call) and (m.qualname(n.func) or "") in _GLOBAL_SHUFFLES:
                    yield n, cls
                    break


def check(m):
    if not m.uses_distributed and not m.distributed_context:
        return
    for draw, cls in _own_shuffles(m):
        yield m.finding(
            CODE,
            draw,
            f"`{cls.name}` is a DistributedSampler that shuffles with `{ast.unparse(draw.func)}` from "
            "each process's own random state, not from its seed and epoch: the ranks slice "
            "different permutations, so samples repeat or go unseen",
            SEVERITY,
            hint="draw from `g = torch.Generator(); g.manual_seed(self.seed + self.epoch)` "
            "(`torch.randperm(n, generator=g)`), as DistributedSampler does",
        )
    samplers = m.calls_named("DistributedSampler")
    if not samplers:
        return
    shared = _broadcasts(m)
    reported: set[int] = set()
    for call in samplers:
        seed = m.keyword(call, "seed")
        if seed is None or m.keyword_is(call, "shuffle", False):
            continue
        found = _why(m, seed, shared)
        if found is None:
            continue
        node, what = found
        if id(node) in reported:
            continue  # one finding per cause: the samplers of both arms share this seed
        reported.add(id(node))
        yield m.finding(
            CODE,
            seed,  # the argument to change (its own line in a call written over several)
            f"this DistributedSampler's seed comes from {what} (line {node.lineno}): it differs between "
            "ranks, so each rank slices a different permutation and samples repeat or go unseen",
            SEVERITY,
            hint="give every rank the same seed (a config value), or draw it on rank 0 and "
            "`dist.broadcast_object_list` it",
        )
