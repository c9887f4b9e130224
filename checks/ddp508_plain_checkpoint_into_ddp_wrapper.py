"""DDP508: a checkpoint saved without the `module.` prefix, loaded into the DDP wrapper.

## What it does
Finds `load_state_dict(...)` called on the DistributedDataParallel wrapper itself in a file that saves
the same model's weights from the wrapped module (`model.module.state_dict()`, or a name bound to
`model.module`, such as `model_without_ddp`), with no prefix handling in sight.

## Why is this bad?
The wrapper's own keys all start with `module.`; the checkpoint this file writes has none. Loading it
back into the wrapper (the usual resume path, after `model = DDP(model)`) fails with "Missing key(s)
module.… Unexpected key(s) …"; with `strict=False` it loads nothing at all and the run silently starts
from fresh weights. The same holds for weights saved the ordinary way elsewhere.

## Example
```python
model = DDP(model, device_ids=[local_rank])
if args.resume:
    model.load_state_dict(torch.load(args.resume, map_location="cpu"))
...
torch.save(model.module.state_dict(), "last.pt")
```

## Use instead
```python
model.module.load_state_dict(torch.load(args.resume, map_location="cpu"))
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import PREFIX_HANDLING, dotted
from ddpdoctor.script.ranks import own_call_sites

CODE = "DDP508"
TITLE = "A plain checkpoint loaded into the DDP wrapper"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def _plain_saves(m) -> dict[str, ast.AST]:
    """Model name -> a ``state_dict()`` call that takes its weights without the prefix:
    ``X.module.state_dict()``, or ``Y.state_dict()`` with ``Y = X.module`` (``model_without_ddp``,
    ``model.module if args.distributed else model``)."""
    unwrapped: dict[str, str] = {}
    for a in m.nodes(ast.Assign):
        v = a.value.body if isinstance(a.value, ast.IfExp) else a.value
        if isinstance(v, ast.Attribute) and v.attr == "module" and len(a.targets) == 1:
            name, base = dotted(a.targets[0]), dotted(v.value)
            if name and base:
                unwrapped[name] = base
    out: dict[str, ast.AST] = {}
    for call in m.method_calls("state_dict"):
        owner = call.func.value
        if isinstance(owner, ast.IfExp):
            # `(model.module if num_gpus > 1 else model).state_dict()`: the wrapped module when wrapped
            owner = next(
                (o for o in (owner.body, owner.orelse) if isinstance(o, ast.Attribute) and o.attr == "module"), owner
            )
        if isinstance(owner, ast.Attribute) and owner.attr == "module":
            base = dotted(owner.value)
        else:
            base = unwrapped.get(dotted(owner) or "")
        if base:
            out.setdefault(base, call)
    return out


def check(m):
    if not m.ddp_constructors or m.mentions(*PREFIX_HANDLING):
        return
    saves = _plain_saves(m)
    if not saves:
        return
    # the loads the per-rank runs make on the wrapper, and those after the file wraps the model (`if
    # args.distributed: self.net = DDP(self.net)`, where the runs join the two arms)
    events, wrapper_saves = _wrapper_events(m)
    for call in m.method_calls("load_state_dict"):
        owner = dotted(call.func.value)
        save = saves.get(owner or "")
        if save is None or owner in wrapper_saves:
            continue  # (a checkpoint of the wrapper's own keys is saved too: which one loads here is unknown)
        if not _loaded_after_wrap(m, call, owner, id(call) in events):
            continue
        if m.in_plain_arm(call, owner) or _tried_both(m, call):
            continue
        yield m.finding(
            CODE,
            call,
            f"`{owner}.load_state_dict(...)` loads into the DDP wrapper, whose keys all start with "
            f"`module.`, while this file saves the model without that prefix "
            f"(`{ast.unparse(save.func)}()`, line {save.lineno}): a strict load fails with "
            "missing and unexpected keys, and `strict=False` loads nothing",
            SEVERITY,
            hint=f"load into the wrapped model: `{owner}.module.load_state_dict(...)`",
        )


def _wrapper_events(m) -> tuple[set[int], set[str]]:
    """What the per-rank runs see done to a DDP wrapper in this file: the ids of the
    ``load_state_dict`` calls on it, and the models whose wrapper's own ``state_dict()`` is taken."""
    loads: set[int] = set()
    saves: set[str] = set()
    for run in m.runs:
        for t in run.traces:
            for e in t.events:
                if e.path is not None:
                    continue
                if e.kind == "load_state_dict":
                    loads.add(id(e.node))
                elif (
                    e.kind == "state_dict"
                    and isinstance(e.node, ast.Call)
                    and isinstance(e.node.func, ast.Attribute)
                ):
                    saves.add(dotted(e.node.func.value))
    return loads, saves


def _loaded_after_wrap(m, call: ast.Call, owner: str, seen_on_wrapper: bool) -> bool:
    """``owner`` is the DDP wrapper when ``call`` runs: bound to one earlier in the same function; for
    an attribute wrapped in ``__init__``, a method called only after that (or not from ``__init__``
    at all); for a local name, as the per-rank runs saw it."""
    fn = m.enclosing_function(call)
    wraps = [c for c in m.ddp_constructors if m.assigned_to(c) == owner]
    before = [w.lineno for w in wraps if m.enclosing_function(w) is fn and w.lineno < call.lineno]
    if before:
        # not taken out again on the way (`model = model.module`)
        return not any(
            max(before) < a.lineno < call.lineno
            and m.enclosing_function(a) is fn
            and isinstance(a.value, ast.Attribute)
            and a.value.attr == "module"
            and any(isinstance(t, (ast.Name, ast.Attribute)) and dotted(t) == owner for t in a.targets)
            for a in m.nodes(ast.Assign)
        )
    if not owner.startswith("self."):
        return seen_on_wrapper
    in_init = [w for w in wraps if getattr(m.enclosing_function(w), "name", None) == "__init__"]
    if not in_init or fn is None or fn.name == "__init__":
        return False
    init = m.enclosing_function(in_init[0])
    first = min(w.lineno for w in in_init)
    return all(s.lineno > first for s in own_call_sites(m, fn) if m.enclosing_function(s) is init)


def _tried_both(m, call: ast.Call) -> bool:
    """Inside a ``try`` whose handler loads another way (``except RuntimeError:
    model.module.load_state_dict(...)``): the author covers both key layouts."""
    for a in m.ancestors(call):
        if isinstance(a, ast.Try) and a.handlers:
            return any(
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr == "load_state_dict"
                for h in a.handlers
                for n in ast.walk(h)
            )
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
    return False
