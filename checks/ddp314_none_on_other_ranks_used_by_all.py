"""DDP314: an object one rank holds and the others set to None, used on every rank.

## What it does
Finds a name (or `self.` attribute) that holds an object only under a rank test (`writer =
SummaryWriter(...) if rank == 0 else None`, `if args.ema and rank in [-1, 0]: ema = ModelEMA(model)
else: ema = None`) and that a later line uses on every rank: an attribute read or set, a method
call, a call or an index (`writer.add_scalar(...)`, `ema.ema`, `wandb_.palette = ...`), with no
test of that name on the way (`if writer:`, `if ema is not None:`, `x and x.y`) and no rank test
around the use. Also a function of this file that returns a value only under a rank test (the other
ranks reach its end, or a bare `return`, and get `None`) whose result every rank unpacks
(`answers, count = generate(prompts)`).

## Why is this bad?
On the other ranks the name is `None`, so the use raises AttributeError ('NoneType' object has no
attribute ...) or TypeError there. Those ranks die; the rank that holds the object goes on into the
next collective and waits for them until the timeout. A test of another option that is part of the
rank test (`if args.ema`) does not help: with the option on, the other ranks still have `None`.

## Example
```python
writer = SummaryWriter(log_dir) if rank == 0 else None
for step, batch in enumerate(loader):
    loss = train_step(batch)
    writer.add_scalar("loss", loss, step)        # AttributeError on rank 1
```

## Use instead
```python
    if writer is not None:
        writer.add_scalar("loss", loss, step)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dotted
from ddpdoctor.script.nodes import walk
from ddpdoctor.script.writers import every_rank_reaches

CODE = "DDP314"
TITLE = "None on the other ranks, used on every rank"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_CATCHES = frozenset(("AttributeError", "TypeError", "Exception", "BaseException"))


def _is_none(e: ast.AST | None) -> bool:
    return isinstance(e, ast.Constant) and e.value is None


def _bindings(m) -> dict[tuple, list[tuple[ast.AST, ast.AST]]]:
    """(scope, name) -> [(statement, value)] for each plain assignment of a name or ``self.`` attribute:
    a local name's scope is its function, an attribute's its class."""
    out: dict[tuple, list] = {}
    for a in m.nodes(ast.Assign):
        if len(a.targets) != 1:
            continue
        name = dotted(a.targets[0]) if isinstance(a.targets[0], (ast.Name, ast.Attribute)) else None
        if name is None or ("." in name and not name.startswith("self.")) or name.count(".") > 1:
            continue
        out.setdefault((_scope(m, a, name), name), []).append((a, a.value))
    return out


def _scope(m, node: ast.AST, name: str):
    fn = m.enclosing_function(node)
    if name.startswith("self."):
        cls = next((a for a in m.ancestors(node) if isinstance(a, ast.ClassDef)), None)
        return id(cls) if cls is not None else None
    return id(fn) if fn is not None else None


def _held_on_one_side(m, sites) -> tuple[ast.AST, ast.AST] | None:
    """(the rank test, the line that sets None for the others) when every object the name gets is
    given under a rank test and ``None`` is what the other ranks get."""
    test = none_at = None
    sides: set[tuple] = set()  # (the `if` of the rank test, the arm the object is given in)
    for stmt, value in sites:
        if _is_none(value):
            none_at = none_at or stmt
            continue
        if isinstance(value, ast.IfExp) and (_is_none(value.body) or _is_none(value.orelse)):
            if m.rank_guard(
                value.body if _is_none(value.orelse) else value.orelse
            ) is None and not _rank_test(m, value.test):
                return None
            test, none_at = test or value.test, none_at or stmt
            continue
        guard = m.rank_guard(stmt)
        if guard is None or guard.path is not None or guard.chain:
            return None  # bound to an object on every rank somewhere
        if _both_arms(m, guard.test, stmt, sides):
            return None  # an object in both arms (a stub for the other ranks): every rank has one
        test = test or guard.test
    return (test, none_at) if test is not None and none_at is not None else None


def _both_arms(m, test: ast.AST, stmt: ast.AST, sides: set) -> bool:
    """Records which arm of the ``if`` of rank test ``test`` holds ``stmt`` in ``sides`` (pairs of the
    ``if`` and "body"/"orelse"); True when the other arm of the same ``if`` was recorded already."""
    branch = m.parents.get(test)
    if not isinstance(branch, ast.If):
        return False
    arm = "body" if any(s is stmt or _inside(stmt, s) for s in branch.body) else "orelse"
    if (id(branch), "orelse" if arm == "body" else "body") in sides:
        return True
    sides.add((id(branch), arm))
    return False


def _inside(node: ast.AST, block: ast.AST) -> bool:
    return block.lineno <= node.lineno <= (block.end_lineno or block.lineno)


def _rank_test(m, test: ast.AST) -> bool:
    if m.is_rank_guard(test):
        return True
    return (
        isinstance(test, ast.BoolOp)
        and isinstance(test.op, ast.And)
        and any(m.is_rank_guard(v) for v in test.values)
    )


def _uses(m) -> dict[str, list[ast.AST]]:
    """What each name or ``self.`` attribute is used for: ``x.attr`` (read or set), ``x(...)``,
    ``x[...]`` -> the name used. Found once per file."""
    out: dict[str, list[ast.AST]] = {}
    for node in m.nodes(ast.Attribute, ast.Call, ast.Subscript):
        base = node.func if isinstance(node, ast.Call) else node.value
        if not isinstance(base, (ast.Name, ast.Attribute)):
            continue
        name = dotted(base)
        if name is not None and (isinstance(base, ast.Name) or name.startswith("self.")):
            out.setdefault(name, []).append(node)
    return out


def _tested(m, node: ast.AST, name: str) -> bool:
    """On the way to ``node`` the name itself is tested (``if x:``, ``x is not None``, ``x and x.y``,
    ``y if x else z``), a rank test decides, or a handler catches the failure."""
    child = node
    for a in m.ancestors(node):
        if isinstance(a, (ast.If, ast.While, ast.IfExp)) and child is not a.test:
            if _mentions(a.test, name) or _rank_test(m, a.test):
                return True
        if isinstance(a, ast.BoolOp) and any(_mentions(v, name) for v in a.values if v is not child):
            return True
        if isinstance(a, ast.Try) and child in a.body:
            for h in a.handlers:
                names = (
                    {dotted(t) for t in (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type])}
                    if h.type
                    else {"BaseException"}
                )
                if names & _CATCHES:
                    return True
        if isinstance(a, _FUNCS):
            return _exits_on(m, a, name, node)
        child = a
    return False


def _exits_on(m, fn, name: str, node: ast.AST) -> bool:
    """An early ``return`` (or ``raise``) on a test of the name before ``node``: ``if x is None:
    return``."""
    for st in ast.walk(fn):
        if isinstance(st, ast.If) and st.lineno < node.lineno and _mentions(st.test, name):
            if any(isinstance(s, (ast.Return, ast.Raise, ast.Continue)) for s in st.body):
                return True
    return False


def _mentions(test: ast.AST, name: str) -> bool:
    return any(isinstance(n, (ast.Name, ast.Attribute)) and dotted(n) == name for n in ast.walk(test))


def _returns_on_some_ranks(m, fn) -> ast.AST | None:
    """The rank test when every ``return`` of a value in ``fn`` is under one arm of a rank test and
    the function can also end without a value (falling off its end, a bare ``return``): the other
    ranks get ``None``."""
    if isinstance(fn, ast.Lambda) or not fn.body:
        return None
    returns = [r for r in walk(fn) if isinstance(r, ast.Return) and m.enclosing_function(r) is fn]
    valued = [r for r in returns if r.value is not None and not _is_none(r.value)]
    if not valued:
        return None
    if _ends(fn.body) and not any(r.value is None or _is_none(r.value) for r in returns):
        return None  # every way out returns a value
    test = None
    sides: set[tuple] = set()
    for r in valued:
        guard = m.rank_guard(r)
        if guard is None or guard.path is not None or guard.chain or m.enclosing_function(guard.test) is not fn:
            return None  # a value on every rank somewhere (or the test is the caller's)
        if _both_arms(m, guard.test, r, sides):
            return None  # a value in both arms: every rank gets one
        test = test or guard.test
    return test


def _ends(stmts: list) -> bool:
    """The block always leaves with a ``return`` or ``raise`` (never falls off its end)."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    if isinstance(last, ast.If):
        return _ends(last.body) and _ends(last.orelse)
    if isinstance(last, (ast.With, ast.AsyncWith)):
        return _ends(last.body)
    if isinstance(last, ast.Try):
        return _ends(last.body) and all(_ends(h.body) for h in last.handlers)
    return False


def _unpacked_results(m):
    """(the call, its function's rank test) for each call of this file's function that returns a
    value on some ranks only, whose result every rank unpacks (``a, b = f()``)."""
    # (the few unpacking assignments first: only the functions they call are looked into)
    unpacked = {
        id(a.value)
        for a in m.nodes(ast.Assign)
        if len(a.targets) == 1 and isinstance(a.targets[0], ast.Tuple) and isinstance(a.value, ast.Call)
    }
    if not unpacked:
        return
    for fn in m.functions:
        sites = [site for site in m.call_sites(fn) if id(site) in unpacked]
        # (what the function returns first: cheap, and it settles most of them)
        test = _returns_on_some_ranks(m, fn) if sites else None
        if test is None:
            continue
        for site in sites:
            if every_rank_reaches(m, site) and m.rank_guard(site) is None and not _in_try(m, site):
                yield site, fn, test


def _in_try(m, node: ast.AST) -> bool:
    return any(isinstance(a, ast.Try) and node.lineno <= a.body[-1].end_lineno for a in m.ancestors(node))


def check(m):
    if not m.distributed_context:
        return
    for site, fn, test in _unpacked_results(m):
        yield m.finding(
            CODE,
            site,
            f"`{fn.name}` returns a value only on the ranks that pass `{ast.unparse(test)[:40]}` (line "
            f"{test.lineno}); the others get `None`, but every rank unpacks the result here: those "
            "ranks raise TypeError (cannot unpack non-iterable NoneType object)",
            SEVERITY,
            hint=f"return the same kind of value on every rank from `{fn.name}`, or unpack it under the "
            "same rank test",
        )
    uses = None
    for (scope_id, name), sites in _bindings(m).items():
        if (
            scope_id is None
            or all(_is_none(v) for _s, v in sites)
            or not any(_is_none(v) or isinstance(v, ast.IfExp) for _s, v in sites)
        ):
            continue  # (None somewhere, and an object somewhere)
        held = _held_on_one_side(m, sites)
        if held is None:
            continue
        test, none_at = held
        first_object = min(s.lineno for s, v in sites if not _is_none(v))
        if uses is None:
            uses = _uses(m)
        mine = [u for u in uses.get(name, ()) if _scope(m, u, name) == scope_id]
        for use in sorted(mine, key=lambda n: (n.lineno, n.col_offset)):
            if not name.startswith("self.") and use.lineno <= first_object:
                continue
            if _tested(m, use, name) or not every_rank_reaches(m, use):
                continue
            what = ast.unparse(use if not isinstance(use, ast.Call) else use.func)
            yield m.finding(
                CODE,
                use,
                f"`{name}` is `None` on the ranks that fail `{ast.unparse(test)[:40]}` (line {test.lineno}; "
                f"None on line {none_at.lineno}), but every rank uses `{what[:40]}` here: those ranks raise "
                "AttributeError ('NoneType' object has no attribute ...) and the others wait for them in "
                "the next collective",
                SEVERITY,
                hint=f"use it under the same rank test, or test it first (`if {name} is not None:`)",
            )
            break
