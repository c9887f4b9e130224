"""DDP604: the no_sync() window does not end on the micro-step that steps the optimizer.

## What it does
Finds gradient accumulation where `no_sync()` is chosen by one modulo test of a counter and the
optimizer step by another test of the same counter and the same modulus, shifted against it:
`no_sync` when `i % accum != 0` but `optimizer.step()` when `(i + 1) % accum == 0`. The two tests
may sit in different functions of the file (the loop, and an `update_step` it calls). It stays
quiet when the counter is incremented anywhere in the file (`i += 1`): then the two tests may
read it at different values on purpose.

## Why is this bad?
DDP all-reduces the gradients only on the backward outside `no_sync()`. With the windows shifted,
the all-reduce happens on some micro-step other than the last one before the step: the gradients
of the micro-steps after it stay local, so every rank steps on different gradients and the
replicas drift apart silently (and a norm check on those gradients can differ between ranks).

## Example
```python
ctx = model.no_sync if i % accum != 0 else nullcontext
with ctx():
    loss.backward()
if (i + 1) % accum == 0:
    optimizer.step()
```

## Use instead
```python
last = (i + 1) % accum == 0
with (nullcontext() if last else model.no_sync()):
    loss.backward()
if last:
    optimizer.step()
```
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ddpdoctor.script.names import dotted
from ddpdoctor.script.nodes import walk

CODE = "DDP604"
TITLE = "no_sync window misaligned with the optimizer step"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


@dataclass(frozen=True)
class Window:
    """A test true exactly when ``(counter + offset) % modulus == 0`` (``zero``) or ``!= 0``."""

    counter: str
    modulus: str
    offset: int
    zero: bool


def _last(e: ast.AST) -> str | None:
    name = dotted(e)
    return name.rsplit(".", 1)[-1] if name else None


def _counter(e: ast.AST) -> tuple[str, int] | None:
    """``i`` -> (i, 0); ``i + 1`` -> (i, 1); ``self.step - 1`` -> (step, -1)."""
    name = _last(e)
    if name is not None:
        return name, 0
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub)):
        for var, const in ((e.left, e.right), (e.right, e.left)):
            name = _last(var)
            if (
                name is not None
                and isinstance(const, ast.Constant)
                and type(const.value) is int
                and not (isinstance(e.op, ast.Sub) and const is e.left)
            ):
                return name, const.value if isinstance(e.op, ast.Add) else -const.value
    return None


def _mod(e: ast.AST) -> tuple[str, str, int] | None:
    if not (isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mod)):
        return None
    counter, modulus = _counter(e.left), _last(e.right)
    if counter is None or modulus is None:
        return None
    return counter[0], modulus, counter[1]


def _is_zero(e: ast.AST) -> bool:
    return isinstance(e, ast.Constant) and e.value == 0 and type(e.value) is int


def window(test: ast.AST) -> Window | None:
    """The modulo window ``test`` describes, or None when it is not one (an ``and``/``or`` with one
    modulo term counts as that term: the other terms handle the tail of an epoch)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = window(test.operand)
        return None if inner is None else Window(inner.counter, inner.modulus, inner.offset, not inner.zero)
    if isinstance(test, ast.BoolOp):
        found = [w for v in test.values if (w := window(v)) is not None]
        return found[0] if len(found) == 1 else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq)):
        left, right = test.left, test.comparators[0]
        mod = _mod(left) if _is_zero(right) else _mod(right) if _is_zero(left) else None
        if mod is None:
            return None
        return Window(*mod, zero=isinstance(test.ops[0], ast.Eq))
    mod = _mod(test)  # ``if i % accum:``
    return Window(*mod, zero=False) if mod is not None else None


def _resolve(m, test: ast.AST) -> ast.AST:
    """``sync = (i + 1) % accum == 0`` ... ``if sync:``: the one value the name gets in its function."""
    if not isinstance(test, ast.Name):
        return test
    fn = m.enclosing_function(test)
    values = [
        a.value
        for a in m.nodes(ast.Assign)
        if m.enclosing_function(a) is fn and any(isinstance(t, ast.Name) and t.id == test.id for t in a.targets)
    ]
    return values[0] if len(values) == 1 else test


def _mentions_no_sync(nodes) -> bool:
    return any(
        isinstance(n, ast.Attribute) and n.attr == "no_sync" for s in nodes for n in walk(s)
    )


def _no_sync_sites(m):
    """(node, window of the micro-steps that all-reduce): ``model.no_sync if T else nullcontext``
    and ``if T: with model.no_sync(): ...``."""
    for node in m.nodes(ast.IfExp, ast.If):
        if isinstance(node, ast.IfExp):
            in_body, in_else = _mentions_no_sync([node.body]), _mentions_no_sync([node.orelse])
        else:
            in_body, in_else = _mentions_no_sync(node.body), _mentions_no_sync(node.orelse)
        if in_body == in_else:
            continue
        w = window(_resolve(m, node.test))
        if w is None:
            continue
        # no_sync when the test holds: the all-reduce runs where it does not, and the other way
        synced = Window(w.counter, w.modulus, w.offset, not w.zero if in_body else w.zero)
        if synced.zero:  # "all-reduce once per window": the only form worth comparing
            yield node, synced


def _is_optimizer_step(call: ast.Call) -> bool:
    """``optimizer.step()``, ``self.optim.step()``, ``scaler.step(optimizer)``."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "step"):
        return False
    owner = (_last(call.func.value) or "").lower()
    if "optim" in owner:
        return True
    return "scaler" in owner and any("optim" in (_last(a) or "").lower() for a in call.args)


def _step_sites(m):
    for node in m.nodes(ast.If):
        if not any(isinstance(c, ast.Call) and _is_optimizer_step(c) for s in node.body for c in walk(s)):
            continue
        w = window(_resolve(m, node.test))
        if w is not None and w.zero:
            yield node, w


def _incremented(m) -> set[str]:
    """Counters changed in place somewhere in the file (``i += 1``, ``self.step = self.step + 1``)."""
    out = set()
    for node in m.nodes(ast.AugAssign):
        name = _last(node.target)
        if name:
            out.add(name)
    for node in m.nodes(ast.Assign):
        if isinstance(node.value, ast.BinOp):
            used = {_last(n) for n in ast.walk(node.value) if isinstance(n, (ast.Name, ast.Attribute))}
            out |= {name for t in node.targets if (name := _last(t)) in used}
    return out


def check(m):
    if not m.mentions("no_sync"):
        return
    syncs = list(_no_sync_sites(m))
    if not syncs:
        return
    steps = list(_step_sites(m))
    changed = _incremented(m)
    for node, synced in syncs:
        if synced.counter in changed:
            continue
        same = [(s, w) for s, w in steps if (w.counter, w.modulus) == (synced.counter, synced.modulus)]
        offsets = {w.offset for _s, w in same}
        if len(offsets) != 1 or synced.offset in offsets:
            continue  # no step on this window, steps on several, or the same micro-step: fine
        step_node = same[0][0]
        yield m.finding(
            CODE,
            node,
            f"`no_sync` lets the gradients all-reduce when `{ast.unparse(_shown(synced))}`, but the "
            f"optimizer steps when `{ast.unparse(step_node.test)}` (line {step_node.lineno}): the "
            "micro-steps just before each step are not all-reduced, so every rank steps on its own "
            "gradients and the replicas drift apart",
            SEVERITY,
            hint="choose no_sync with the negation of the step's own test (e.g. one `last = (i + 1) % "
            "accum == 0` for both)",
            chain=[node.lineno, step_node.lineno],
        )


def _shown(w: Window) -> ast.AST:
    counter: ast.AST = ast.Name(w.counter)
    if w.offset:
        counter = ast.BinOp(counter, ast.Add() if w.offset > 0 else ast.Sub(), ast.Constant(abs(w.offset)))
    return ast.Compare(ast.BinOp(counter, ast.Mod(), ast.Name(w.modulus)), [ast.Eq()], [ast.Constant(0)])
