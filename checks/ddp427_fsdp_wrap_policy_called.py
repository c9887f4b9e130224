"""DDP427: an FSDP auto-wrap policy called instead of handed over.

## What it does
Finds torch's FSDP auto-wrap policies (`transformer_auto_wrap_policy`, `size_based_auto_wrap_policy`,
`lambda_auto_wrap_policy`) called with their settings only (`transformer_auto_wrap_policy(
transformer_layer_cls={Block})`), not bound with `functools.partial`. A function of the file's own of
the same name is left alone.

## Why is this bad?
These policies are functions FSDP calls once per submodule, as `policy(module, recurse,
nonwrapped_numel)`. Called with the settings alone, the call itself fails at once on every rank
with `TypeError: ... missing 3 required positional arguments: 'module', 'recurse', and
'nonwrapped_numel'`, before the model is ever wrapped.

## Example
```python
policy = transformer_auto_wrap_policy(transformer_layer_cls={Block})
model = FSDP(model, auto_wrap_policy=policy)
```

## Use instead
```python
policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
model = FSDP(model, auto_wrap_policy=policy)
```
"""

from __future__ import annotations

import ast

CODE = "DDP427"
TITLE = "FSDP auto-wrap policy called instead of handed over"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"

# torch's policies, each called by FSDP as policy(module, recurse, nonwrapped_numel, **settings)
_POLICIES = frozenset(("transformer_auto_wrap_policy", "size_based_auto_wrap_policy", "lambda_auto_wrap_policy"))
_CALL_ARGUMENTS = ("module", "recurse", "nonwrapped_numel", "unwrapped_params")  # (the last: torch < 1.13)


def _torch_policy(m, call: ast.Call) -> str | None:
    q = m.qualname(call.func) or ""
    last = q.rsplit(".", 1)[-1]
    if last not in _POLICIES or not q.startswith("torch.distributed.fsdp"):
        return None
    return last


def _given_its_call_arguments(call: ast.Call) -> bool:
    """The caller passes a module or what else FSDP would (a policy of the project's own that
    delegates to torch's), or unpacks arguments it cannot see: only keyword settings are a mistake."""
    if call.args:
        return True
    named = {k.arg for k in call.keywords}
    return None in named or any(a in named for a in _CALL_ARGUMENTS)


def check(m):
    if not m.mentions("auto_wrap_policy"):
        return
    for call, _q in m.calls:
        name = _torch_policy(m, call)
        if name is None or _given_its_call_arguments(call):
            continue
        yield m.finding(
            CODE,
            call,
            f"`{name}(...)` is called here with its settings only: FSDP calls the policy itself as "
            "`policy(module, recurse, nonwrapped_numel)`, so this call raises TypeError (missing "
            "'module', 'recurse' and 'nonwrapped_numel') on every rank before the model is wrapped",
            SEVERITY,
            hint=f"bind the settings instead: `functools.partial({name}, ...)`",
        )
