"""Where a value goes inside one file: through names, attributes (``self.loader``), dicts, conditional
expressions, the file's own function arguments and return values.

``Flow(m, seeds)`` follows the objects made by the ``seeds`` expressions (a ``DistributedSampler(...)``
call, a ``DataLoader(...)``) to every name that may hold them. Names are compared as text without
scopes (``loader`` in two functions is one name): coarse, but rules combine it with other evidence,
and real scripts name one thing one way. Each holder keeps the line where it got the value, so a
finding can show the chain.

Also: ``repeats(m, node)``: is ``node`` run many times (inside a loop of its function, or in a function
of this file called from a loop), with the call lines that lead there.
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dotted, names_a_loader
from ddpdoctor.script.ranks import own_call_sites

_ROUNDS = 6


class Flow:
    def __init__(self, m, seeds: list[ast.AST], names: dict[str, int] | None = None):
        """``names``: names that hold the value from the start (a parameter it is handed in as)."""
        self.m = m
        self.seeds = {id(s) for s in seeds}
        # rules of one file ask for the same flow again (DDP101, DDP105 and the loader helpers start
        # from the same sampler or loader): the rounds run once per file for the same start. Nothing
        # changes holders or returns after _run, so a flow found before is shared, not copied; the
        # memo keeps the seeds themselves, so their ids stay theirs
        key = (frozenset(self.seeds), tuple(sorted((names or {}).items())))
        memo = m.__dict__.setdefault("_flow_memo", {})
        found = memo.get(key)
        if found is not None:
            self.holders, self.returns, self.positions = found[0], found[1], found[2]
            return
        self.holders: dict[str, int] = dict(names or {})  # name -> line where it got the value
        self.returns: dict[str, set[int | None]] = {}  # function name -> positions returned (None: whole)
        # a holder that is a tuple of which only some items carry the value (`loaders = (train, val)`),
        # handed on to a parameter and unpacked there (`train_loader, val_loader = loaders`)
        self.positions: dict[str, set[int]] = {}
        self._run()
        memo[key] = (self.holders, self.returns, self.positions, list(seeds))

    # -- does an expression carry the value? ------------------------------------------------------
    def carries(self, e: ast.AST | None, depth: int = 0) -> bool:
        if e is None or depth > 8:
            return False
        if id(e) in self.seeds:
            return True
        name = dotted(e) if isinstance(e, (ast.Name, ast.Attribute)) else None
        if name is not None:
            return name in self.holders
        if isinstance(e, ast.Subscript):
            return self.carries(e.value, depth + 1)  # loaders["train"]: one of the dict's values
        if isinstance(e, ast.IfExp):
            return self.carries(e.body, depth + 1) or self.carries(e.orelse, depth + 1)
        if isinstance(e, ast.BoolOp):
            return any(self.carries(v, depth + 1) for v in e.values)
        if isinstance(e, ast.Dict):
            return any(self.carries(v, depth + 1) for v in e.values)
        if isinstance(e, (ast.List, ast.Tuple, ast.Set)):
            return any(self.carries(v, depth + 1) for v in e.elts)
        if isinstance(e, ast.NamedExpr):
            return self.carries(e.value, depth + 1)
        if isinstance(e, ast.Call):
            callee = _callee(e)
            return callee is not None and None in self.returns.get(callee, ())
        return False

    def held(self, e: ast.AST) -> bool:
        """``e`` names a holder (``loader``, ``self.loader``, ``loaders["train"]``)."""
        while isinstance(e, ast.Subscript):
            e = e.value
        name = dotted(e) if isinstance(e, (ast.Name, ast.Attribute)) else None
        return name is not None and name in self.holders

    # -- propagation ----------------------------------------------------------------------------
    def _add(self, target: ast.AST, line: int) -> bool:
        if isinstance(target, ast.Starred):
            target = target.value
        name = dotted(target) if isinstance(target, (ast.Name, ast.Attribute)) else None
        if name is None and isinstance(target, ast.Subscript):
            name = dotted(target.value)  # d["train"] = loader: d holds it
        if name is None or name in self.holders:
            return False
        self.holders[name] = line
        return True

    def _assign(self, targets: list[ast.AST], value: ast.AST, line: int) -> bool:
        changed = False
        for t in targets:
            if isinstance(t, (ast.Tuple, ast.List)):
                if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(t.elts):
                    for te, ve in zip(t.elts, value.elts):
                        if self.carries(ve):
                            changed |= self._add(te, line)
                elif id(value) in self.seeds:
                    # `train_dl, val_dl = make_loaders_ddp(...)`: another module's factory, whose
                    # tuple is out of sight, hands back the value in the parts named for it
                    for te in t.elts:
                        if names_a_loader(dotted(te) if isinstance(te, (ast.Name, ast.Attribute)) else None):
                            changed |= self._add(te, line)
                elif isinstance(value, ast.Call) and (callee := _callee(value)) is not None:
                    for pos in self.returns.get(callee, ()):
                        if pos is None:
                            continue
                        if pos < len(t.elts):
                            changed |= self._add(t.elts[pos], line)
                elif isinstance(value, ast.Name) and value.id in self.positions:
                    for pos in self.positions[value.id]:
                        if pos < len(t.elts):
                            changed |= self._add(t.elts[pos], line)
            elif self.carries(value):
                changed |= self._add(t, line)
                if isinstance(value, ast.Tuple) and isinstance(t, ast.Name):
                    self.positions.setdefault(t.id, set()).update(
                        i for i, v in enumerate(value.elts) if self.carries(v)
                    )
        return changed

    def _bound_otherwise(self, value: ast.AST, fn: ast.AST) -> bool:
        """``return loader`` where the function's own ``loader`` is assigned only values that do not
        carry this one (``loader = DataLoader(val_set, sampler=SequentialSampler(val_set))`` in
        ``get_val_loader``): names are text, but a local name the function binds is its own."""
        if not isinstance(value, ast.Name):
            return False
        values = _local_values(self.m, fn).get(value.id)
        return bool(values) and not any(self.carries(v) for v in values)

    def _run(self) -> None:
        m = self.m
        funcs, classes, assigns, returns, for_loops, withs, local_calls = _static(m)
        for _ in range(_ROUNDS):
            changed = False
            for a in assigns:
                if isinstance(a, ast.Assign):
                    changed |= self._assign(a.targets, a.value, a.lineno)
                elif isinstance(a, ast.NamedExpr):
                    changed |= self._assign([a.target], a.value, a.value.lineno)
                elif a.value is not None:
                    changed |= self._assign([a.target], a.value, a.lineno)
            for w in withs:
                if w.optional_vars is not None and self.carries(w.context_expr):
                    changed |= self._add(w.optional_vars, w.context_expr.lineno)
            for r, fn in returns:
                pos: set[int | None] = set()
                if isinstance(r.value, ast.Tuple):
                    pos = {i for i, v in enumerate(r.value.elts) if self.carries(v)}
                elif self.carries(r.value) and not self._bound_otherwise(r.value, fn):
                    pos = {None}
                have = self.returns.setdefault(fn.name, set())
                if not pos <= have:
                    have |= pos
                    changed = True
            for call, callee in local_calls:
                targets = funcs.get(callee)
                if targets is None and callee in classes:
                    targets = [
                        s
                        for s in classes[callee].body
                        if isinstance(s, ast.FunctionDef) and s.name == "__init__"
                    ]
                if not targets:
                    continue
                for fn in targets:
                    params = [*fn.args.posonlyargs, *fn.args.args]
                    if params and params[0].arg in ("self", "cls"):
                        params = params[1:]
                    for i, a in enumerate(call.args):
                        if i < len(params) and self.carries(a):
                            changed |= self._add(ast.Name(params[i].arg), call.lineno)
                            if isinstance(a, ast.Name) and a.id in self.positions:
                                have = self.positions.setdefault(params[i].arg, set())
                                if not self.positions[a.id] <= have:
                                    have |= self.positions[a.id]
                                    changed = True
                    names = {p.arg for p in [*params, *fn.args.kwonlyargs]}
                    for k in call.keywords:
                        if k.arg in names and self.carries(k.value):
                            changed |= self._add(ast.Name(k.arg), call.lineno)
            for loop in for_loops:
                # for name, loader in loaders.items(): the loop variable holds one of them
                it = loop.iter
                if (
                    isinstance(it, ast.Call)
                    and isinstance(it.func, ast.Attribute)
                    and it.func.attr in ("values", "items")
                    and self.carries(it.func.value)
                ):
                    tgt = loop.target
                    if it.func.attr == "items" and isinstance(tgt, ast.Tuple) and len(tgt.elts) == 2:
                        tgt = tgt.elts[1]
                    changed |= self._add(tgt, getattr(loop, "lineno", it.lineno))
            if not changed:
                break


def _local_values(m, fn: ast.AST) -> dict[str, list[ast.AST]]:
    """The values a function assigns to its plain local names (``x = ...``), once per function."""
    memo = m.__dict__.setdefault("_flow_local_values", {})
    found = memo.get(id(fn))
    if found is None:
        found = memo[id(fn)] = {}
        for a in ast.walk(fn):
            if isinstance(a, ast.Assign):
                for t in a.targets:
                    if isinstance(t, ast.Name):
                        found.setdefault(t.id, []).append(a.value)
    return found


def _static(m) -> tuple:
    """What every Flow of a file goes over, round after round; found once per file (a rule may
    follow several seeds through one big file)."""
    found = m.__dict__.get("_flow_static")
    if found is not None:
        return found
    funcs: dict[str, list] = {}
    for fn in m.functions:
        funcs.setdefault(fn.name, []).append(fn)
    classes = {c.name: c for c in m.nodes(ast.ClassDef)}
    assigns = m.nodes(ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)
    # (return, its function) for the returns of a value inside a function
    returns = [
        (r, fn)
        for r in m.nodes(ast.Return)
        if r.value is not None and (fn := m.enclosing_function(r)) is not None
    ]
    for_loops = m.nodes(ast.For, ast.AsyncFor, ast.comprehension)
    withs = m.nodes(ast.withitem)
    # only calls of this file's functions and classes can pass the value on
    local_calls = [
        (call, callee)
        for call, _q in m.calls
        if (callee := _callee(call)) is not None and (callee in funcs or callee in classes)
    ]
    found = m.__dict__["_flow_static"] = (funcs, classes, assigns, returns, for_loops, withs, local_calls)
    return found


def _callee(call: ast.Call) -> str | None:
    """The last part of the called name: ``f`` for ``f()``, ``self.f()`` and ``obj.f()``."""
    name = dotted(call.func)
    return name.rsplit(".", 1)[-1] if name else None


def loops_around(m, node: ast.AST, depth: int = 0) -> frozenset[int] | None:
    """Ids of every loop that runs ``node`` again: those of its function around it and, through
    each call of that function in this file, those around the call. None when some way to
    ``node`` is out of sight (a function this file never calls: a hook, a callback)."""
    if depth > 4:
        return None
    out: set[int] = set()
    fn = None
    child = node
    for a in m.ancestors(node):
        if isinstance(a, (ast.For, ast.AsyncFor, ast.While)) and not (
            isinstance(a, (ast.For, ast.AsyncFor)) and child is a.iter
        ):
            out.add(id(a))
        child = a
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            fn = a
            break
    if fn is None:
        return frozenset(out)
    if isinstance(fn, ast.Lambda):
        return None
    sites = [s for s in own_call_sites(m, fn) if m.enclosing_function(s) is not fn]
    if not sites:
        return None
    for site in sites:
        up = loops_around(m, site, depth + 1)
        if up is None:
            return None
        out |= up
    return frozenset(out)


def repeats(m, node: ast.AST, depth: int = 0) -> tuple[int, ...] | None:
    """Call lines (outermost first, ending with the loop's line) when ``node`` runs inside a loop of
    its function or of a caller in this file; None when it seems to run once."""
    if depth > 4:
        return None
    fn = None
    child = node
    for a in m.ancestors(node):
        # a ``for``'s iterable is evaluated once: ``for b in batches(ds):`` calls batches once
        if isinstance(a, (ast.For, ast.AsyncFor, ast.While)) and not (
            isinstance(a, (ast.For, ast.AsyncFor)) and child is a.iter
        ):
            return (a.lineno,)
        child = a
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            fn = a
            break
    if fn is None or isinstance(fn, ast.Lambda):
        return None
    for site in own_call_sites(m, fn):
        if m.enclosing_function(site) is fn:
            continue
        up = repeats(m, site, depth + 1)
        if up is not None:
            return (*up, site.lineno)
    return None
