"""DDP306: a name bound only on some ranks, then read on every rank.

## What it does
Finds a variable whose every assignment sits under a rank test (`if rank == 0: writer =
SummaryWriter()`, after `if rank != 0: return`) and that a later line reads on every rank: in the
same function, or, for a name bound at module level, in a function that every rank runs. Names
bound anywhere outside a rank test (`writer = None` first), parameters and reads under a rank test
of their own are left alone. A function's `global logger` binds the module's name: its bindings
count with the module's.

## Why is this bad?
On the ranks that skipped the test the name was never bound, so the read raises `NameError`
(`UnboundLocalError` in a function) there: those ranks die, often at the end of training or at the
first step, and the ranks still alive wait for them in the next collective until the timeout.

## Example
```python
if rank == 0:
    losses = []
for batch in loader:
    loss = model(batch).mean()
    losses.append(loss.item())
```

## Use instead
```python
losses = []
for batch in loader:
    loss = model(batch).mean()
    losses.append(loss.item())
```
"""

from __future__ import annotations

import ast
import builtins
from itertools import accumulate

from ddpdoctor.script import ranks
from ddpdoctor.script.nodes import FIELDS, caught, child_fields, walk
from ddpdoctor.script.writers import every_rank_reaches, one_rank_side, rank_guards

CODE = "DDP306"
TITLE = "Name bound on some ranks only, read on every rank"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

_BUILTINS = frozenset(dir(builtins))
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_OWN_NAMES = (*_SCOPES, *_COMPREHENSIONS)  # nodes whose names are their own
_OWN_NAMES_SET = frozenset(_OWN_NAMES)
# handlers that would catch the NameError a read of an unbound name raises
_CATCHES = frozenset(("NameError", "UnboundLocalError", "Exception", "BaseException"))


def _own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of ``scope``'s own body, not those of a function, class or comprehension in it
    (their names are their own); the header of a nested def (its decorators, defaults) is ours.
    A list, in the order of a stack walk (children pushed in field order, the last popped first):
    child_nodes inlined, as this runs over every node of each scope the rule reads."""
    stack = list(scope.body) if not isinstance(scope, ast.Lambda) else [scope.body]
    out: list[ast.AST] = []
    pop, push, extend, keep = stack.pop, stack.append, stack.extend, out.append
    fields_of = FIELDS
    AST = ast.AST
    defs = (ast.FunctionDef, ast.AsyncFunctionDef)
    while stack:
        node = pop()
        keep(node)
        cls = node.__class__
        if cls in defs:
            extend(node.decorator_list)
            extend(d for d in (*node.args.defaults, *node.args.kw_defaults) if d is not None)
            continue
        if cls in _OWN_NAMES_SET:
            continue
        fields = fields_of.get(cls)
        if fields is None:
            fields = child_fields(cls)
        for name in fields:
            v = getattr(node, name, None)
            if v is None:
                continue
            if v.__class__ is list:
                extend([x for x in v if isinstance(x, AST)])
            elif isinstance(v, AST):
                push(v)
    return out


# the classes the tests in _bindings look at (besides Name)
_BINDING_CLASSES = frozenset(
    (
        ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom, ast.ExceptHandler,
        ast.Global, ast.Nonlocal, ast.MatchAs, ast.MatchStar, ast.MatchMapping, ast.Constant,
    )
)


def _bindings(scope: ast.AST) -> tuple[dict[str, list[ast.AST]], dict[str, list[ast.Name]], set[str]]:
    """(name -> binding nodes, name -> reads, names this scope must leave alone) of ``scope``."""
    bound: dict[str, list[ast.AST]] = {}
    reads: dict[str, list[ast.Name]] = {}
    skip: set[str] = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = scope.args
        skip |= {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
        skip |= {p.arg for p in (a.vararg, a.kwarg) if p is not None}
    for node in _own_nodes(scope):
        cls = node.__class__
        if cls is ast.Name:
            if isinstance(node.ctx, ast.Load):
                reads.setdefault(node.id, []).append(node)
            else:
                bound.setdefault(node.id, []).append(node)
        elif cls not in _BINDING_CLASSES:
            continue  # (most nodes: one look instead of the tests below)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.setdefault(node.name, []).append(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound.setdefault((alias.asname or alias.name).split(".")[0], []).append(node)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.setdefault(node.name, []).append(node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            skip.update(node.names)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bound.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.setdefault(node.rest, []).append(node)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            skip.add(node.value)  # `if "writer" in locals():`: the script checks for itself
    return bound, reads, skip


_RANK_WORDS = ("rank", "main", "master", "global_zero", "rank_zero", "rank0", "device_id")


def _names_a_rank(m, test: ast.AST) -> bool:
    """The test tells ranks apart by a value, not by the launcher's environment (``'RANK' in
    os.environ`` is alike on every rank): a side only one rank takes, or a name that says rank."""
    if one_rank_side(m, test) is not None:
        return True
    if isinstance(test, ast.Name) and ranks.guard_kind(m, test) is not None:
        return True  # `is_logger`, set from `get_rank() == 0` earlier
    return _says(test, _RANK_WORDS)


def _says(test: ast.AST, words: tuple[str, ...]) -> bool:
    """A name or attribute of ``test`` (not a string in it) holds one of ``words``."""
    for n in walk(test):
        name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None
        if name is not None:
            low = name.lower()
            for w in words:
                if w in low:
                    return True
    return False


class _Cheap:
    """Where a binding can be under a rank test at all, found once per file without the rank
    analysis of each binding: the lines inside the arms of an ``if`` on a rank, and each function's
    first early exit on one. Most bindings are in neither, and most functions hold neither: this
    keeps the rule cheap on big files."""

    def __init__(self, m):
        self.m = m
        lines = m.source.count("\n") + 3
        self.in_if = bytearray(lines)
        self._exits: dict[int, int] = {}
        for st in m.nodes(ast.If):
            if not _may_test_a_rank(m, st.test):
                continue
            last = (st.orelse or st.body)[-1]
            for ln in range(st.body[0].lineno, (last.end_lineno or last.lineno) + 1):
                self.in_if[ln] = 1
        # running count of marked lines: does a function hold any?
        self._count = [0, *accumulate(self.in_if[1:lines]), 0]  # (index `lines` stays 0)

    def _first_exit(self, fn) -> int:
        first = self._exits.get(id(fn))
        if first is None:
            first = next(
                (
                    st.lineno
                    for st in fn.body
                    if isinstance(st, ast.If)
                    and any(isinstance(x, (ast.Return, ast.Raise)) for x in st.body)
                    and _may_test_a_rank(self.m, st.test)
                ),
                1 << 30,
            )
            self._exits[id(fn)] = first
        return first

    def scope_may_hold(self, fn) -> bool:
        end = min(fn.end_lineno or fn.lineno, len(self._count) - 1)
        return self._count[end] > self._count[fn.lineno - 1] or self._first_exit(fn) < (1 << 30)

    def maybe_guarded(self, node: ast.AST) -> bool:
        if self.in_if[node.lineno]:
            return True
        fn = self.m.enclosing_function(node)
        return fn is not None and node.lineno > self._first_exit(fn)


_GATE_WORDS = ("rank", "main", "master", "zero", "gpu", "device", "local", "leader", "chief")


def _may_test_a_rank(m, test: ast.AST) -> bool:
    """A cheap, wider test than ``_names_a_rank`` for the gate: a name that may say rank, or a bare
    name the file sets from a rank test (``is_logger = rank == 0``)."""
    return _says(test, _GATE_WORDS) or (isinstance(test, ast.Name) and ranks.guard_kind(m, test) is not None)


def _rank_only(m, sites: list[ast.AST], cheap: _Cheap) -> ast.AST | None:
    """The rank test when every binding sits under the same one; None otherwise (bindings under
    ``rank == 0`` and ``rank == 1``, arms of one chain, may well cover every rank)."""
    if not all(cheap.maybe_guarded(b) for b in sites):
        return None  # a binding under no test at all: every rank has the name
    tests = []
    arms: dict[int, set[str]] = {}
    for b in sites:
        guards = [g for g in rank_guards(m, b) if _names_a_rank(m, g)]
        if not guards:
            return None
        tests.append(guards[0])
        for g in guards:
            arm = ranks.arm_of(m, b, g)
            if arm is not None:
                arms.setdefault(id(g), set()).add(arm)
    if len({ast.unparse(t) for t in tests}) > 1 or any(len(a) > 1 for a in arms.values()):
        return None  # bound in both arms of a rank test (`if len(chunks) > rank: ... else: ...`)
    return tests[0]


def _unguarded_read(m, reads: list[ast.Name], after: int) -> ast.Name | None:
    for r in sorted(reads, key=lambda n: (n.lineno, n.col_offset)):
        if r.lineno > after and not rank_guards(m, r) and not caught(m, r, _CATCHES) and every_rank_reaches(m, r):
            return r
    return None


def _report(m, found: list[tuple[str, ast.Name]], test: ast.AST, where: str):
    """One finding per rank test: the names it alone binds, at the first line that reads one."""
    found = sorted(found, key=lambda f: (f[1].lineno, f[1].col_offset))
    names = [n for n, _r in found]
    shown = ", ".join(f"`{n}`" for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    read = found[0][1]
    error = "UnboundLocalError" if where == "function" else "NameError"
    verb = "is" if len(names) == 1 else "are"
    lines = sorted({r.lineno for _n, r in found})
    at = f"line {lines[0]}" if len(lines) == 1 else "lines " + ", ".join(map(str, lines))
    return m.finding(
        CODE,
        read,
        f"{shown} {verb} bound only where `{ast.unparse(test)}` (line {test.lineno}) holds, but every "
        f"rank reads {'it' if len(names) == 1 else 'them'} ({at}): the other ranks die with {error}",
        SEVERITY,
        hint=f"bind {'it' if len(names) == 1 else 'them'} on every rank first (`{names[0]} = None`) and "
        "test where only some ranks use it",
        chain=m.chain_text([test.lineno], read.lineno),
    )


def _scope_findings(m, bound, reads, skip, where: str, out: dict, cheap: _Cheap) -> None:
    for name, sites in bound.items():
        if name in skip or name not in reads:
            continue
        test = _rank_only(m, sites, cheap)
        if test is None:
            continue
        read = _unguarded_read(m, reads.get(name, []), min(s.lineno for s in sites))
        if read is not None:
            out.setdefault((id(test), where), (test, []))[1].append((name, read))


def _declared_globals(m) -> dict[int, set[str]]:
    """id(def) -> the names its ``global`` statements declare (from the file's index of Global
    nodes: most files have none, and no function body is walked for them)."""
    out: dict[int, set[str]] = {}
    for node in m.nodes(ast.Global):
        fn = m.enclosing_function(node)
        if fn is not None:
            out.setdefault(id(fn), set()).update(node.names)
    return out


def _global_sites(m, declared: dict[int, set[str]]) -> dict[str, list[ast.AST]]:
    """Module names that functions bind through a ``global`` statement -> those bindings."""
    out: dict[str, list[ast.AST]] = {}
    if not declared:
        return out
    for fn in m.functions:
        names = declared.get(id(fn))
        if not names:
            continue
        bound, _reads, _skip = _bindings(fn)
        for name in names:
            out.setdefault(name, []).extend(bound.get(name, ()))
    return out


def check(m):
    found: dict = {}
    cheap = _Cheap(m)
    module_bound, module_reads, module_skip = _bindings(m.tree)
    _scope_findings(m, module_bound, module_reads, module_skip, "module", found, cheap)
    reported = {n for _t, names in found.values() for n, _r in names}
    # module-level names bound on some ranks only, read in a function every rank runs
    # a function's `global logger` binds the module's name: its sites count with the module's
    globals_of = _declared_globals(m)
    declared = _global_sites(m, globals_of)
    rank_only = {}
    for name in {*module_bound, *declared}:
        if name in module_skip or name in reported or name in _BUILTINS:
            continue  # (`print = lambda *a: None` on ranks != 0: the others keep the builtin)
        sites = [*module_bound.get(name, ()), *declared.get(name, ())]
        test = _rank_only(m, sites, cheap) if sites else None
        if test is not None:
            rank_only[name] = (test, min(s.lineno for s in sites))
    for fn in m.functions:
        if not rank_only and not cheap.scope_may_hold(fn):
            continue  # nothing here is bound under a rank test, and no module name is either
        bound, reads, skip = _bindings(fn)
        _scope_findings(m, bound, reads, skip, "function", found, cheap)
        here = globals_of.get(id(fn), set())
        for name, (test, first) in list(rank_only.items()):
            if name not in reads or (name in skip and name not in here) or (name in bound and name not in here):
                continue
            read = _unguarded_read(m, reads[name], first)
            if read is not None:
                found.setdefault((id(test), "module"), (test, []))[1].append((name, read))
                del rank_only[name]
    for (_id, where), (test, names) in found.items():
        yield _report(m, names, test, where)
