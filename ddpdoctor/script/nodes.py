"""Walking a syntax tree faster than ``ast.walk``, for the hot paths of the analysis and the rules.

``walk`` yields the nodes ``ast.walk`` yields, in the same (breadth-first) order, except the
context and operator singletons (``Load``, ``Store``, ``Add``, ``Eq``, ``And``, ...) and a module's
type-ignore comments: no rule looks at those as nodes (they read ``node.ctx`` and ``node.op``), they
have no children, and leaving them out is about a third of the nodes. It looks only at the fields
that can hold nodes, and keeps no generator per node: about three times as fast as ``ast.walk``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

# fields that only hold operator/context singletons or text: no rule looks at them as nodes
_SKIP_FIELDS = frozenset({"ctx", "op", "ops", "type_comment", "kind", "type_ignores"})
# ... and fields that hold a name, a number or a constant, never a node, on the commonest classes
# (a field not listed is still looked at: the walk checks what it finds)
_SCALAR_FIELDS: dict[type, tuple[str, ...]] = {
    ast.Name: ("id",),
    ast.Attribute: ("attr",),
    ast.Constant: ("value",),
    ast.arg: ("arg",),
    ast.keyword: ("arg",),
    ast.alias: ("name", "asname"),
    ast.FunctionDef: ("name",),
    ast.AsyncFunctionDef: ("name",),
    ast.ClassDef: ("name",),
    ast.ImportFrom: ("module", "level"),
    ast.FormattedValue: ("conversion",),
    ast.AnnAssign: ("simple",),
    ast.comprehension: ("is_async",),
    ast.Global: ("names",),
    ast.Nonlocal: ("names",),
}
FIELDS: dict[type, tuple[str, ...]] = {}


def child_fields(cls: type) -> tuple[str, ...]:
    """The fields of ``cls`` that may hold child nodes (a node, None, or a list of them)."""
    fields = FIELDS.get(cls)
    if fields is None:
        scalar = _SCALAR_FIELDS.get(cls, ())
        fields = FIELDS[cls] = tuple(f for f in cls._fields if f not in _SKIP_FIELDS and f not in scalar)
    return fields


def walk(node: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk(node)`` without the singletons (see the module's text), same order."""
    AST = ast.AST
    fields_of = FIELDS
    seen = [node]
    append = seen.append
    for node in seen:  # the list grows as it is read: breadth first, as ast.walk's queue
        cls = node.__class__
        fields = fields_of.get(cls)
        if fields is None:  # (an empty tuple is an answer: a Name has no child fields)
            fields = child_fields(cls)
        for name in fields:
            v = getattr(node, name, None)
            if v is None:
                continue
            if v.__class__ is list:
                for x in v:
                    if isinstance(x, AST):
                        append(x)
            elif isinstance(v, AST):
                append(v)
        yield node


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def caught(m, node: ast.AST, errors: frozenset[str]) -> bool:
    """``node`` runs in the body of a ``try`` of its own scope whose handler catches one of
    ``errors`` (by the last part of the name: ``Exception``, ``builtins.NameError``) or everything
    (a bare ``except:``)."""
    child = node
    for a in m.ancestors(node):
        if isinstance(a, _SCOPES):
            return False
        if isinstance(a, ast.Try) and any(child is st for st in a.body):
            for h in a.handlers:
                if h.type is None:
                    return True
                types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
                if any(ast.unparse(t).rsplit(".", 1)[-1] in errors for t in types):
                    return True
        child = a
    return False


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """``ast.iter_child_nodes(node)`` without the singletons, same order, as a list."""
    AST = ast.AST
    out: list[ast.AST] = []
    fields = FIELDS.get(node.__class__)
    if fields is None:
        fields = child_fields(node.__class__)
    for name in fields:
        v = getattr(node, name, None)
        if v is None:
            continue
        if v.__class__ is list:
            out.extend(x for x in v if isinstance(x, AST))
        elif isinstance(v, AST):
            out.append(v)
    return out


_ANY_WORD = object()  # a constant ast.unparse writes with escapes: it may show any word


def _word_texts(expr: ast.AST, escapes: bool):
    """The texts whose runs of letters, digits and underscores ``ast.unparse(expr)`` writes: names,
    attributes, keywords, arguments and constants. With ``escapes``, ``_ANY_WORD`` for a string or
    bytes constant unparse writes with escapes (``"\\rank"`` is written ``'\\rank'``)."""
    for n in walk(expr):
        cls = n.__class__
        if cls is ast.Name:
            yield n.id
        elif cls is ast.Attribute:
            yield n.attr
        elif cls is ast.Constant:
            v = n.value
            if isinstance(v, str):
                yield _ANY_WORD if escapes and not v.isprintable() else v
            elif isinstance(v, bytes):
                if escapes and not (v.isascii() and v.decode("ascii").isprintable()):
                    yield _ANY_WORD
                else:
                    yield v.decode("latin-1")  # (printable ASCII reads the same)
            else:
                yield str(v)  # a number or an Ellipsis: as written out, near enough to hold no word
        elif cls is ast.keyword or cls is ast.arg:
            yield n.arg or ""


def may_show(expr: ast.AST, word: str, fold: bool = False) -> bool:
    """Whether ``word`` (letters, digits and underscores) can be in ``ast.unparse(expr)`` (its
    ``.lower()`` with ``fold``, ``word`` then lower case): only if one name, attribute, keyword or
    string or bytes constant in it holds the word. ``ast.unparse`` writes a run of such characters
    only from one of those (keywords and operators stand apart, numbers hold none of most words,
    and an escape in a string's repr is a backslash and lower-case letters and digits), so a False
    here is the answer without building the text, which is slow."""
    for text in _word_texts(expr, False):
        if word in (text.lower() if fold else text):
            return True
    return False


def may_show_any(expr: ast.AST, words: tuple[str, ...], fold: bool = False) -> bool:
    """Whether one of ``words`` (lower case with ``fold``) can be in ``ast.unparse(expr)`` (its
    ``.lower()`` with ``fold``), in one walk: as ``may_show``, but a string or bytes constant that
    ``ast.unparse`` would write with escapes (a character that is not printable: ``"\\rank"`` is
    written ``'\\rank'``) counts as holding every word, so False is always the answer the text
    would give."""
    for text in _word_texts(expr, True):
        if text is _ANY_WORD:
            return True
        if fold:
            text = text.lower()
        for w in words:
            if w in text:
                return True
    return False
