"""DDP428: the optimizer built over the model's parameters before FSDP wraps the model.

## What it does
Finds an optimizer made from a model (`torch.optim.AdamW(model.parameters())`, nanoGPT's
`model.configure_optimizers(...)`, a helper named for it handed the model or its parameters) before
the same model is wrapped in `FullyShardedDataParallel` without `use_orig_params=True`, when no
optimizer is made again after the wrap. DDP keeps the module's own parameters and is left alone.

## Why is this bad?
FSDP (with the default `use_orig_params=False`) flattens the module's parameters into
`FlatParameter`s and trains those: the tensors the optimizer holds are no longer the ones that get
gradients. `optimizer.step()` then updates nothing that the model uses (or fails on parameters with
no gradient), and the loss does not go down, on every rank alike. The FSDP documentation asks for the
optimizer to be built after wrapping.

## Example
```python
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
model = FSDP(model, auto_wrap_policy=policy)
```

## Use instead
```python
model = FSDP(model, auto_wrap_policy=policy)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dotted

CODE = "DDP428"
TITLE = "Optimizer built before the model is wrapped in FSDP"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

_FSDP = "torch.distributed.fsdp.FullyShardedDataParallel"


def _keeps_parameters(call: ast.Call) -> bool:
    """``use_orig_params=True`` (or a value the file does not spell out): FSDP keeps the module's own
    parameter objects, which the optimizer holds."""
    value = next((k.value for k in call.keywords if k.arg == "use_orig_params"), None)
    if value is None:
        return False
    return not (isinstance(value, ast.Constant) and value.value is False)


def _parameters_of(e: ast.AST) -> str | None:
    """``model.parameters()`` / ``model.named_parameters()`` -> ``model``."""
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in ("parameters", "named_parameters"):
        return dotted(e.func.value)
    return None


def _optimizer_over(m, value: ast.AST) -> set[str]:
    """The models whose parameters an optimizer made by ``value`` holds: ``torch.optim.X(model.
    parameters())`` (also parameter groups built from them), ``model.configure_optimizers(...)``, or
    a call named for an optimizer handed the model or its parameters."""
    if not isinstance(value, ast.Call):
        return set()
    q = m.qualname(value.func) or dotted(value.func) or ""
    last = q.rsplit(".", 1)[-1].lower()
    if isinstance(value.func, ast.Attribute) and value.func.attr == "configure_optimizers":
        owner = dotted(value.func.value)
        return {owner} if owner else set()
    if not (q.startswith("torch.optim.") or "optim" in last):
        return set()
    out = set()
    for a in (*value.args, *(k.value for k in value.keywords)):
        for n in ast.walk(a):
            owner = _parameters_of(n)
            if owner:
                out.add(owner)
        if "optim" in last and not q.startswith("torch.") and isinstance(a, (ast.Name, ast.Attribute)):
            out.add(dotted(a))  # `build_optimizer(model, cfg)`
    return out


def _scope_assigns(m, scope) -> list[ast.Assign]:
    return [a for a in m.nodes(ast.Assign) if m.enclosing_function(a) is scope]


def check(m):
    wraps = [c for c, q in m.calls if (q or "").endswith(_FSDP) and c.args and not _keeps_parameters(c)]
    for wrap in wraps:
        model = dotted(wrap.args[0])
        if model is None:
            continue
        scope = m.enclosing_function(wrap)
        assigns = _scope_assigns(m, scope)
        before = [
            a for a in assigns
            if a.lineno < wrap.lineno and model in _optimizer_over(m, a.value) and len(a.targets) == 1
        ]
        if not before:
            continue
        made = before[-1]
        optimizer = dotted(made.targets[0])
        if optimizer is None:
            continue
        # made again after the wrap (from the wrapped model): the stale one is replaced
        if any(
            a.lineno > wrap.lineno and any(dotted(t) == optimizer for t in a.targets) for a in assigns
        ):
            continue
        if not any(
            dotted(c.func.value) == optimizer or any(dotted(a) == optimizer for a in c.args)
            for c in m.method_calls("step")
        ):
            continue  # not stepped here (`optimizer.step()`, `scaler.step(optimizer)`): nothing to say of it
        yield m.finding(
            CODE,
            made,
            f"`{optimizer}` is built over `{model}`'s parameters here, before line {wrap.lineno} wraps "
            f"`{model}` in FSDP, which flattens them into new FlatParameters: the optimizer steps "
            "tensors the model no longer trains, and the loss does not go down",
            SEVERITY,
            hint="build the optimizer after the FSDP wrap, from the wrapped model's parameters (or pass "
            "`use_orig_params=True`)",
            chain=[made.lineno, wrap.lineno],
        )
