"""DDP419: gradients of a DDP model's parameters taken with `torch.autograd.grad`.

## What it does
Finds `torch.autograd.grad(loss, model.parameters(), ...)` where `model` holds a
`DistributedDataParallel` wrapper the file made, without `create_graph=True` (a gradient penalty
differentiates through the gradients and still ends in a `backward()`): the gradients are then
put into the parameters by hand (`p.grad = g`, a `set_grads` helper) and stepped.

## Why is this bad?
DDP all-reduces gradients from hooks that run during `backward()` as each parameter's `.grad` is
accumulated. `torch.autograd.grad` returns the gradients without accumulating them, so DDP's hooks
never fire: no rank averages its gradients with the others, each replica steps on its own shard's
gradients and the models drift apart. PyTorch's DDP documentation says so: it works only where
gradients are accumulated in the parameters' `.grad`.

## Example
```python
grads = torch.autograd.grad(loss, ddp_model.parameters())
for p, g in zip(ddp_model.parameters(), grads):
    p.grad = g
optimizer.step()
```

## Use instead
```python
loss.backward()          # DDP all-reduces the gradients as they are accumulated
optimizer.step()
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dotted

CODE = "DDP419"
TITLE = "autograd.grad on a DDP model's parameters"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def _ddp_holders(m) -> set[str]:
    """Names the file binds to a DistributedDataParallel it makes (``self.segD = DDP(self.segD)``)."""
    return {name for call in m.ddp_constructors if (name := m.assigned_to(call))}


def check(m):
    if not m.ddp_constructors:
        return
    holders = _ddp_holders(m)
    for call, q in m.calls:
        if not (q or "").endswith("autograd.grad") or len(call.args) < 2 and m.keyword(call, "inputs") is None:
            continue
        create = m.keyword(call, "create_graph")
        if create is not None and not (isinstance(create, ast.Constant) and create.value is False):
            continue  # a gradient penalty: differentiated again, then a backward
        inputs = call.args[1] if len(call.args) > 1 else m.keyword(call, "inputs")
        if not (
            isinstance(inputs, ast.Call)
            and isinstance(inputs.func, ast.Attribute)
            and inputs.func.attr == "parameters"
            and dotted(inputs.func.value) in holders
        ):
            continue
        model = dotted(inputs.func.value)
        yield m.finding(
            CODE,
            call,
            f"`torch.autograd.grad` takes the gradients of `{model}`'s parameters, a DDP wrapper: DDP "
            "all-reduces only gradients accumulated by `backward()`, so these are this rank's own and "
            "the replicas drift apart",
            SEVERITY,
            hint=f"call `.backward()` on the loss (DDP averages `{model}`'s gradients across the ranks)",
        )
