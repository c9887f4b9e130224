"""Code apart from the distributed run, in a file that has one.

A trainer module holds a DDP-aware ``DDPTrainer`` beside a plain ``Trainer`` for one process: the
plain class never names distributed state, and nothing in the file outside class statements builds
it. What that class saves, loads or writes is not done "on every rank"; rules leave it alone.
"""

from __future__ import annotations

import ast
from bisect import bisect_left

_SIGN_WORDS = ("distributed", "ddp", "rank", "world_size", "is_main", "is_master")


def _distributed_sign(m, node: ast.AST) -> bool:
    """The code of ``node`` (a def or class) names distributed state: ``torch.distributed`` (under
    any alias), a DDP wrapper, a rank, the world."""
    lines = m.__dict__.get("_apart_sign_lines")
    if lines is None:  # the lines of every such name, in one pass over the file
        found = set()
        for n in m.nodes(ast.Name):
            if _sign_word(n.id) or (m.qualname(n) or "").startswith("torch.distributed"):
                found.add(n.lineno)
        for n in m.nodes(ast.Attribute):
            if _sign_word(n.attr):
                found.add(n.lineno)
        lines = m.__dict__["_apart_sign_lines"] = sorted(found)
    k = bisect_left(lines, node.lineno)
    return k < len(lines) and lines[k] <= node.end_lineno


def _sign_word(word: str) -> bool:
    low = word.lower()
    return any(w in low for w in _SIGN_WORDS)


def _self_calls(m) -> dict[int, set[str]]:
    """id(def) -> the names it calls as ``self.name(...)``."""
    out = m.__dict__.get("_apart_self_calls")
    if out is None:
        out = m.__dict__["_apart_self_calls"] = {}
        for c, _q in m.calls:
            f = c.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                fn = m.enclosing_function(c)
                if fn is not None:
                    out.setdefault(id(fn), set()).add(f.attr)
    return out


def class_apart_from_distributed(m, call) -> bool:
    """In a file whose distributed code sits in other classes (a trainer module: a DDP-aware
    ``Trainer`` and ``GANTrainer`` subclasses that override its training loop), code in a class
    whose own code, and every method its method calls or is called from (through ``self``, over
    the file's base classes, construction aside), never names distributed state, and that no code of
    the file outside class statements uses: nothing shows that this class runs under DDP, so what
    it does is not called a distributed act."""
    cls = next((a for a in m.ancestors(call) if isinstance(a, ast.ClassDef)), None)
    fn = m.enclosing_function(call)
    if cls is None or fn is None or m.parents.get(fn) is not cls or _distributed_sign(m, cls):
        return False
    names = m.__dict__.get("_apart_names")
    if names is None:  # name -> its Name nodes, in one pass over the file
        names = m.__dict__["_apart_names"] = {}
        for n in m.nodes(ast.Name):
            names.setdefault(n.id, []).append(n)
    if any(
        not _in_bases(m, n) and not cls.lineno <= n.lineno <= cls.end_lineno for n in names.get(cls.name, ())
    ):
        return False  # built or handed around by this file's own code: it runs where that runs
    classes = {c.name: c for c in m.nodes(ast.ClassDef)}
    if any(_distributed_sign(m, sub) for sub in _heirs(classes, cls, fn.name)):
        return False  # a subclass that runs under DDP inherits this method
    lineage, todo = [], [cls]
    while todo:  # the class and its bases defined in this file
        c = todo.pop()
        if c in lineage:
            continue
        lineage.append(c)
        todo += [classes[b.id] for b in c.bases if isinstance(b, ast.Name) and b.id in classes]
    methods: dict[str, ast.AST] = {}
    for c in reversed(lineage):  # the class's own override wins
        methods.update({d.name: d for d in c.body if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))})
    methods.pop("__init__", None)
    by_def = _self_calls(m)
    calls = {name: by_def.get(id(d), set()) for name, d in methods.items()}
    seen, todo = set(), [fn.name]
    while todo:  # callees and callers through self, both ways
        name = todo.pop()
        if name in seen or name not in methods:
            continue
        seen.add(name)
        if _distributed_sign(m, methods[name]):
            return False
        todo += list(calls[name]) + [other for other, called in calls.items() if name in called]
    return True


def _heirs(classes: dict, cls: ast.ClassDef, method: str) -> list[ast.ClassDef]:
    """The file's subclasses of ``cls``, transitively, that inherit ``method`` (do not override it)."""
    out, todo = [], [cls]
    while todo:
        base = todo.pop()
        for c in classes.values():
            if c not in out and any(isinstance(b, ast.Name) and b.id == base.name for b in c.bases):
                if not any(isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)) and d.name == method
                           for d in c.body):
                    out.append(c)
                    todo.append(c)
    return out


def _in_bases(m, node: ast.AST) -> bool:
    parent = m.parents.get(node)
    return isinstance(parent, ast.ClassDef) and node in parent.bases
