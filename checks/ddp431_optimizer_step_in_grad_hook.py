"""DDP431: an optimizer step in a parameter's gradient hook, in a job that wraps the model in DDP.

## What it does
Finds `p.register_post_accumulate_grad_hook(hook)` (or `register_hook`) where `hook`, a function of
this file, steps an optimizer (`optimizer_dict[p].step()`), in a script that also wraps the model
in DistributedDataParallel. GaLore's per-layer 8-bit AdamW is the usual case: it steps each
parameter as soon as its gradient is accumulated, to save memory.

## Why is this bad?
The hook fires on this rank's own gradient, when autograd has just accumulated it; DDP averages
gradients across ranks later, in its buckets' all-reduce. Each rank steps its parameters with
its local gradient, and the hook's `zero_grad()` empties the `.grad` DDP then reduces: the replicas
drift apart from the first step, silently, while the loss still goes down on each.

## Example
```python
def optimizer_hook(p):
    optimizer_dict[p].step()
    optimizer_dict[p].zero_grad()

for p in model.parameters():
    p.register_post_accumulate_grad_hook(optimizer_hook)
model = DistributedDataParallel(model, device_ids=[local_rank])
```

## Use instead
Run per-layer optimizer steps on one GPU only (refuse them when the world size is above 1), or
step the whole optimizer after `backward()` returns, when DDP has averaged every gradient.
"""

from __future__ import annotations

import ast

from ddpdoctor.script.nodes import walk
from ddpdoctor.script.ranks import single_process_arm

CODE = "DDP431"
TITLE = "Optimizer step in a gradient hook under DDP"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

_HOOKS = ("register_post_accumulate_grad_hook", "register_hook")


def check(m):
    wraps = [c for c in m.ddp_constructors if not single_process_arm(m, c)]
    if not wraps:
        return
    own = {f.name: f for f in m.functions}
    for call in [c for name in _HOOKS for c in m.method_calls(name)]:
        if not call.args or not isinstance(call.args[0], ast.Name) or single_process_arm(m, call):
            continue
        hook = own.get(call.args[0].id)
        step = _optimizer_step(hook) if hook is not None else None
        if step is None:
            continue
        yield m.finding(
            CODE,
            call,
            f"`{hook.name}` steps an optimizer (line {step.lineno}) as soon as this rank's gradient is "
            f"accumulated, but the model is wrapped in DDP (line {wraps[0].lineno}), which averages the "
            "gradients only afterwards: every rank steps with its own gradient and the replicas drift apart",
            SEVERITY,
            hint="use per-layer optimizer steps on one GPU only, or step after backward() under DDP",
        )
        return  # one hook, one cause


def _optimizer_step(fn: ast.AST) -> ast.Call | None:
    """A ``.step()`` of an optimizer in ``fn`` (not a scheduler's: ``lr_scheduler.step()``)."""
    for n in walk(fn):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step" and not n.args:
            owner = ast.unparse(n.func.value).lower()
            if "optim" in owner and "sched" not in owner:
                return n
    return None
