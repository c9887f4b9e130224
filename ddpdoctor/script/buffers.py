"""Whether the models a file wraps in DDP have buffers, by what the file itself shows.

DDP's forward broadcasts the module's buffers from rank 0 (``broadcast_buffers=True``, the default)
when the module has any: BatchNorm running statistics, registered masks. A forward on some ranks
only then waits for the others. Without buffers it communicates nothing, so the question decides
whether a rank-0-only forward hangs. The file shows buffers when it converts the model to
SyncBatchNorm, builds it from one of its own classes that holds BatchNorm layers or registers a
buffer, builds a BatchNorm layer into the wrapped module directly, or builds it with a torchvision
constructor of a family made with BatchNorm. Anything else is unknown (the model's own file decides).
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dotted

_BUFFER_LAYERS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "register_buffer")
# torchvision families built with BatchNorm (not ViT, Swin or ConvNeXt, which use LayerNorm)
_BN_FAMILIES = (
    "resnet", "resnext", "wide_resnet", "densenet", "_bn", "efficientnet", "mobilenet", "inception",
    "googlenet", "regnet", "shufflenet", "mnasnet",
)


def _mentions_buffers(node: ast.AST) -> ast.AST | None:
    for n in ast.walk(node):
        name = n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else None
        if name in _BUFFER_LAYERS:
            return n
    return None


def buffers_evident(m) -> ast.AST | None:
    """A node showing that every model this file wraps in DDP has buffers, else None (asked by
    DDP308 and DDP312: found once per file)."""
    if "_buffers_evident" not in m.__dict__:
        m.__dict__["_buffers_evident"] = _buffers_evident(m)
    return m.__dict__["_buffers_evident"]


def _buffers_evident(m) -> ast.AST | None:
    if not m.ddp_constructors:
        return None
    classes = {c.name: c for c in m.nodes(ast.ClassDef)}
    for call, q in m.calls:
        if (dotted(call.func) or "").rsplit(".", 1)[-1] == "convert_sync_batchnorm":
            return call
    found = None
    for ddp in m.ddp_constructors:
        model = ddp.args[0] if ddp.args else m.keyword(ddp, "module")
        if model is None:
            return None
        evidence = _evidence(m, model, classes, 0)
        if evidence is None:
            return None
        found = found or evidence
    return found


def _class_buffers(classes: dict, name: str, seen: set) -> ast.AST | None:
    """The buffer a class of this file registers or builds, also through the file's own classes it
    builds (GPT -> Block -> CausalSelfAttention, which registers its causal mask)."""
    seen.add(name)
    cls = classes[name]
    found = _mentions_buffers(cls)
    if found is not None:
        return found
    for n in ast.walk(cls):
        if isinstance(n, ast.Call):
            inner = (dotted(n.func) or "").rsplit(".", 1)[-1]
            if inner in classes and inner not in seen and len(seen) < 8:
                found = _class_buffers(classes, inner, seen)
                if found is not None:
                    return found
    return None


def _evidence(m, e: ast.AST, classes: dict, depth: int) -> ast.AST | None:
    if depth > 4:
        return None
    if isinstance(e, ast.Call):
        f = e.func
        if isinstance(f, ast.Attribute) and f.attr in ("to", "cuda", "half", "float"):
            return _evidence(m, f.value, classes, depth + 1)  # `model.to(device)`: the same model
        q = m.qualname(f) or ""
        if q == "torch.compile" and e.args:
            return _evidence(m, e.args[0], classes, depth + 1)  # the compiled model has its buffers
        name = (dotted(f) or "").rsplit(".", 1)[-1]
        if name in classes:
            return _class_buffers(classes, name, set())
        if q.startswith("torchvision.models.") and any(w in name.lower() for w in _BN_FAMILIES):
            return e
        return _mentions_buffers(e)  # `nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))`
    key = dotted(e) if isinstance(e, (ast.Name, ast.Attribute)) else None
    if key is None:
        return None
    fn = m.enclosing_function(e)
    made = [
        a.value
        for a in m.nodes(ast.Assign)
        if a.lineno < e.lineno
        and m.enclosing_function(a) in (fn, None)
        and any(dotted(t) == key for t in a.targets)
    ]
    if not made:
        return None
    # the last binding before the wrap decides (`model = Net()`, then `model = model.cuda()`)
    return _evidence(m, max(made, key=lambda v: v.lineno), classes, depth + 1)
