"""DDP411: a method of the model called on its DDP wrapper.

## What it does
Follows the DDP model (`model = DistributedDataParallel(net)`) through names, attributes and the
calls of this file's functions, and finds a call of a method the wrapper does not have
(`model.decoder_forward(x)`, `model.generate(...)`, `model.compute_loss(batch)`): the public
methods of `DistributedDataParallel` are nn.Module's and its own (`no_sync`, `join`,
`register_comm_hook`, ...); and a read of an attribute the wrapper does not have, used as an object
(`model.model.state_dict()`, `model.encoder.layers`: DDP's own attributes, `module`, and those the
script sets on the wrapper itself are known). Calls on a branch that tests whether the model is wrapped
(`isinstance(model, DistributedDataParallel)`, `hasattr(model, "module")`) or whether it has that
attribute (`if hasattr(policy, "update"): policy.update()`) are left alone.

## Why is this bad?
DDP does not forward attribute lookups to the model it wraps: nn.Module's `__getattr__` finds only
parameters, buffers and submodules, and the only submodule is `module`. The call raises
`AttributeError: 'DistributedDataParallel' object has no attribute ...` on every rank, often only
in the branch a flag enables (`--att-rate > 0`) or after hours of training, at the first
evaluation.

## Example
```python
model = DDP(model, device_ids=[local_rank])
...
att_loss = model.decoder_forward(memory, mask)
```

## Use instead
```python
att_loss = model.module.decoder_forward(memory, mask)   # no gradient sync through it, or
# give the model a forward() that runs the decoder too, and call model(...)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import also_lines, dotted

CODE = "DDP411"
TITLE = "Method of the model called on its DDP wrapper"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def _tests_wrapping(m, node: ast.AST) -> bool:
    """Under an ``if`` (or conditional expression) that asks whether the model is wrapped, or
    whether it has this very attribute (``if hasattr(policy, "update"):``, a project's
    ``has_method(policy, "update")``): on the wrapper the answer is no, and nothing is called."""
    target = node.func if isinstance(node, ast.Call) else node
    attr = target.attr if isinstance(target, ast.Attribute) else None
    for a in m.ancestors(node):
        if isinstance(a, (ast.If, ast.IfExp, ast.While)):
            text = ast.unparse(a.test)
            if "isinstance" in text or "module" in text or "DistributedDataParallel" in text:
                return True
            if attr is not None and any(
                isinstance(c, ast.Constant) and c.value == attr for c in ast.walk(a.test)
            ):
                return True
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
    return False


def check(m):
    if not m.ddp_constructors:
        return
    seen: set[int] = set()
    read: dict[str, list] = {}  # attribute reads by name: one finding per name, at the first
    calls: dict[str | None, list] = {}  # method calls by the wrapper they are made on
    for run in m.runs:
        for t in run.traces:
            for e in t.events:
                if e.kind != "missing_attr" or e.path is not None or id(e.node) in seen:
                    continue
                seen.add(id(e.node))
                if _tests_wrapping(m, e.node):
                    continue
                if m.in_plain_arm(e.node, _receiver(e.node)):
                    continue  # `if n_gpus > 1: self.model.module.f() else: self.model.f()`
                via = f", reached through {m.chain_text(e.chain, e.node.lineno)}" if e.chain else ""
                if isinstance(e.node, ast.Attribute):  # `model.model.state_dict()`
                    read.setdefault(e.op, []).append((e.node, via))
                    continue
                calls.setdefault(_receiver(e.node), []).append((e.node, e.op, via))
    # one finding per wrapper: its first missing method, naming the other calls on it
    for places in calls.values():
        places.sort(key=lambda p: (p[0].lineno, p[0].col_offset))
        node, op, via = places[0]
        others: dict[str, list[int]] = {}
        for n, o, _v in places[1:]:
            others.setdefault(o, []).append(n.lineno)
        also = "; ".join(
            f"`{o}` on line{'s' if len(lines) > 1 else ''} {', '.join(map(str, sorted(set(lines))))}"
            for o, lines in others.items()
        )
        yield m.finding(
            CODE,
            node,
            f"`{ast.unparse(node.func)}(...)` calls `{op}`, which the DDP wrapper does not "
            f"have{via}{f' (also {also})' if also else ''}: DDP passes only its forward on to the model, "
            f"so this raises AttributeError ('DistributedDataParallel' object has no attribute '{op}')",
            SEVERITY,
            hint=f"call it on the wrapped model (`.module.{op}(...)`), or run it in the "
            "model's forward so that DDP sees it",
        )
    for name, places in read.items():
        places.sort(key=lambda p: (p[0].lineno, p[0].col_offset))
        node, via = places[0]
        also = also_lines(n.lineno for n, _v in places[1:] if n.lineno != node.lineno)
        yield m.finding(
            CODE,
            node,
            f"`{ast.unparse(node)}` reads `{name}`, which the DDP wrapper does not have{via}{also}: it "
            f"holds the model as `module`, so this raises AttributeError ('DistributedDataParallel' "
            f"object has no attribute '{name}')",
            SEVERITY,
            hint=f"read it from the wrapped model (`.module.{name}`)",
        )


def _receiver(node: ast.AST) -> str | None:
    """``self.model`` for ``self.model.f(...)`` and for ``self.model.attr``."""
    target = node.func if isinstance(node, ast.Call) else node
    return dotted(target.value) if isinstance(target, ast.Attribute) else None
