"""DDP423: `torch.nn.utils.clip_grad_norm_` on an FSDP model's shards.

## What it does
Finds `torch.nn.utils.clip_grad_norm_(model.parameters(), ...)` (and `get_total_norm`) where `model`
is, on some path, wrapped in FullyShardedDataParallel (the `FSDP(...)` class, also inside another
object: `policy = Policy(FSDP(net))` then `policy.lm_model.parameters()`). Left alone: FSDP with
`sharding_strategy=ShardingStrategy.NO_SHARD` (every rank holds whole gradients), the FSDP2
`fully_shard` API (its parameters are DTensors, whose norm torch computes over the whole group),
and a file that calls the wrapper's own `model.clip_grad_norm_(...)` somewhere (it clips the FSDP
model that way and the plain call serves another path).

## Why is this bad?
Each rank of a sharded FSDP model holds only its shard of every gradient. The plain function
computes the norm of that shard alone: every rank finds a different, smaller norm and scales its
shard by its own coefficient, so no rank clips by the true norm and the update's direction
changes with the world size. A logged gradient norm is a shard's, not the model's.

## Example
```python
model = FSDP(model, auto_wrap_policy=policy, device_id=local_rank)
...
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
```

## Use instead
```python
model.clip_grad_norm_(1.0)   # FSDP's own: the norm over every rank's shards
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dotted
from ddpdoctor.script.ranks import assignments_seen_at

CODE = "DDP423"
TITLE = "clip_grad_norm_ over an FSDP model's local shards"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

_FSDP = "torch.distributed.fsdp.FullyShardedDataParallel"
_NORMS = (
    "torch.nn.utils.clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_norm_",
    "torch.nn.utils.get_total_norm",
)


def _sharded_fsdp(m, call: ast.Call) -> bool:
    """An FSDP constructor that shards: the default FULL_SHARD, or any strategy but NO_SHARD."""
    if not (m.qualname(call.func) or "").endswith(_FSDP):
        return False
    strategy = next((k.value for k in call.keywords if k.arg == "sharding_strategy"), None)
    return strategy is None or "NO_SHARD" not in ast.unparse(strategy)


def _holds_fsdp(m, value: ast.AST, makers: frozenset[str]) -> bool:
    """``value`` builds a sharded FSDP model: the constructor in it, or a call of this file's
    function that makes one and returns a value (``self.model = self._setup_model(model)``)."""
    for n in ast.walk(value):
        if isinstance(n, ast.Call):
            if _sharded_fsdp(m, n):
                return True
            name = dotted(n.func)
            if name and name.rsplit(".", 1)[-1] in makers:
                return True
    return False


def _makers(m) -> frozenset[str]:
    """This file's functions that construct a sharded FSDP model and return something."""
    return frozenset(
        fn.name
        for fn in m.functions
        if any(isinstance(n, ast.Call) and _sharded_fsdp(m, n) for n in ast.walk(fn))
        and any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(fn))
    )


def _wrapped_names(m) -> dict[str, list]:
    """Each name or attribute path bound to a value holding a sharded FSDP model -> the functions
    (None: module level) where it is bound so."""
    makers = _makers(m)
    out: dict[str, list] = {}
    for st in m.nodes(ast.Assign, ast.AnnAssign):
        value = st.value
        if value is None or not _holds_fsdp(m, value, makers):
            continue
        for t in st.targets if isinstance(st, ast.Assign) else (st.target,):
            name = dotted(t)
            if name:
                out.setdefault(name, []).append(m.enclosing_function(st))
    # a local that takes one of them over (`model = self.model`, `model, config = self.model,
    # self.config` at the top of a method)
    for st in m.nodes(ast.Assign):
        pairs = [(t, st.value) for t in st.targets]
        pairs += [
            pair
            for target in st.targets
            if isinstance(target, ast.Tuple)
            and isinstance(st.value, ast.Tuple)
            and len(target.elts) == len(st.value.elts)
            for pair in zip(target.elts, st.value.elts)
        ]
        for t, v in pairs:
            source, name = dotted(v) if isinstance(v, (ast.Name, ast.Attribute)) else None, dotted(t)
            if name and source in out and source.startswith("self."):
                out.setdefault(name, []).append(m.enclosing_function(st))
    return out


def _own_clip(m) -> bool:
    """``model.clip_grad_norm_(...)``: the wrapper's own method, called somewhere in the file."""
    return any(
        isinstance(call.func, ast.Attribute)
        and call.func.attr == "clip_grad_norm_"
        and not (q or "").startswith("torch.nn.")
        for call, q in m.calls
    )


def _receiver(m, arg: ast.AST, depth: int = 0) -> str | None:
    """``model.parameters()`` -> ``model``; also a name the function set to a selection of them
    (``grads = [p for p in model.parameters() if p.requires_grad]``, ``filter(f, model.parameters())``,
    ``list(model.parameters())``)."""
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "parameters":
        return dotted(arg.func.value)
    if depth > 3:
        return None
    if isinstance(arg, ast.Call) and (dotted(arg.func) or "") in ("list", "filter", "tuple") and arg.args:
        return _receiver(m, arg.args[-1], depth + 1)
    if isinstance(arg, (ast.ListComp, ast.GeneratorExp)) and len(arg.generators) == 1:
        return _receiver(m, arg.generators[0].iter, depth + 1)
    if isinstance(arg, ast.Name):
        seen = assignments_seen_at(m, arg)
        if len(seen) == 1 and not isinstance(seen[0][0], ast.Name):
            return _receiver(m, seen[0][0], depth + 1)
    return None


def _in_ddp_arm(m, call: ast.Call) -> bool:
    """Under ``if strategy == "ddp":`` (a test naming DDP, not FSDP): the path where the model is
    DistributedDataParallel, whose gradients are whole on every rank."""
    for a in m.ancestors(call):
        if isinstance(a, ast.If) and any(call is n for st in a.body for n in ast.walk(st)):
            text = ast.unparse(a.test).lower()
            if "ddp" in text and "fsdp" not in text:
                return True
    return False


def check(m):
    # the clip first: where a function measures and clips, the clip is the line to change
    norms = sorted(
        ((c, q) for c, q in m.calls if q in _NORMS and c.args),
        key=lambda cq: cq[1].endswith("get_total_norm"),
    )
    if not norms:
        return
    wrapped = _wrapped_names(m)
    if not wrapped or _own_clip(m):
        return
    done: set[tuple] = set()
    for call, q in norms:
        owner = _receiver(m, call.args[0])
        if owner is None or _in_ddp_arm(m, call):
            continue
        fn = m.enclosing_function(call)
        hit = None
        for name, scopes in wrapped.items():
            if owner != name and not owner.startswith(name + "."):
                continue
            # `self.model` holds it for every method; a plain name only in its own function
            if name.startswith("self.") or any(s is None or s is fn for s in scopes):
                hit = name
                break
        if hit is None or (hit, id(fn)) in done:
            continue
        done.add((hit, id(fn)))  # the clip of each branch (with and without a scaler): one cause
        clips = not q.endswith("get_total_norm")
        yield m.finding(
            CODE,
            call,
            f"`{q.rsplit('.', 1)[-1]}({ast.unparse(call.args[0])})` on `{hit}`, an FSDP model that shards its "
            "gradients: each rank measures the norm of its own shard only"
            + (" and clips by its own factor" if clips else ", not the model's"),
            SEVERITY,
            hint=f"call FSDP's own `{hit}.clip_grad_norm_(max_norm)`: the norm over every rank's shards",
        )
