"""DDP502: saving the DDP wrapper's state_dict.

## What it does
Finds `state_dict()` called on the DistributedDataParallel wrapper (not on `.module`) in a script
that saves checkpoints, with no prefix handling in sight.

## Why is this bad?
The wrapper's keys all start with `module.`. The checkpoint then only loads into another DDP wrapper:
`model.load_state_dict(ckpt)` on a plain model fails with "Missing key(s)... Unexpected key(s)
module.…", typically at inference time, far from the training code.

## Example
```python
model = DDP(model, device_ids=[local_rank])
torch.save(model.state_dict(), "ckpt.pt")
```

## Use instead
```python
torch.save(model.module.state_dict(), "ckpt.pt")
```
"""

from __future__ import annotations

import ast
import builtins

from ddpdoctor.script.names import PREFIX_HANDLING, dotted

CODE = "DDP502"
TITLE = "Saving a DDP-wrapped state_dict"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "medium"
# why it is not in the default selection (benchmarks/lint_rule_precision.py on the labelled sets)
OPT_IN_BECAUSE = (
    "whether a `module.`-prefixed checkpoint is a bug depends on the code that loads it, usually in "
    "another file. 25 of its 26 labelled reports on real code are bugs (0.96), yet it stays opt-in: "
    "7 of those 25 fall on a save whose rank guard is right, a line reviewers list as correct code, "
    "so on the labelled sets as scored it adds 13 bugs found for 8 reports counted false"
)


def _unwrap_test(test: ast.AST) -> bool:
    """``isinstance(model, DistributedDataParallel)`` or ``hasattr(model, "module")``."""
    text = ast.unparse(test)
    return "DistributedDataParallel" in text or "DDP" in text or "hasattr" in text and "module" in text


def _not_the_wrapper_branch(m, node) -> bool:
    """In the ``else`` of an "is it wrapped?" test: the model there is the plain one. So is it in
    the other arm of an ``if`` whose one arm unwraps the same model (``if args.multi_gpu: sd =
    self.model.module.state_dict() else: sd = self.model.state_dict()``): the test is the wrapping's."""
    if m.in_plain_arm(node):
        return True
    child = node
    for a in m.ancestors(node):
        if isinstance(a, (ast.If, ast.IfExp)) and _unwrap_test(a.test):
            orelse = a.orelse if isinstance(a, ast.If) else [a.orelse]
            if any(child is s for s in orelse):
                return True
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        child = a
    return False


def _loaded_back_into_wrapper(m, node) -> bool:
    """The same wrapper gets ``load_state_dict``: saved and loaded keys both carry the prefix."""
    owner = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None
    name = dotted(owner) if owner is not None else None
    if not name:
        return False
    wrapped_at = [c.lineno for c in m.ddp_constructors if m.assigned_to(c) == name]
    if any(
        dotted(c.func.value) == name and any(w < c.lineno for w in wrapped_at)
        for c in m.method_calls("load_state_dict")
    ):
        return True
    # or handed to the project's resume helper (`restart_from_checkpoint(path, state_dict=model)`),
    # which loads into the wrapper it is given
    return any(
        any(w < c.lineno for w in wrapped_at)
        and any(r in (dotted(c.func) or "").rsplit(".", 1)[-1].lower() for r in _RESUME_WORDS)
        and any(dotted(a) == name for a in [*c.args, *(k.value for k in c.keywords)])
        for c, _q in m.calls
    )


_RESUME_WORDS = ("load", "restore", "restart", "resume")


def _converted_on_load(m) -> bool:
    """A checkpoint this file reads back is handed to a function from another file
    (``ckpt["state_dict"] = ddp_to_plain(ckpt["state_dict"])``): the project's own converter may well
    strip the prefix, out of sight. Unknown, so not guilty."""
    loaded = {m.assigned_to(c) for c in m.calls_named("torch.load")} - {None}
    if not loaded:
        return False
    own = {f.name for f in m.nodes(ast.FunctionDef, ast.AsyncFunctionDef)}
    for call, q in m.calls:
        f = call.func
        if not isinstance(f, ast.Name) or f.id in own or hasattr(builtins, f.id):
            continue
        if q is not None and q.split(".", 1)[0] in _LIBRARIES:
            continue  # copy.deepcopy, collections.OrderedDict, torch's own: they keep the keys
        for a in call.args:
            root = a.value if isinstance(a, ast.Subscript) else a
            if dotted(root) in loaded:
                return True
    return False


_LIBRARIES = ("torch", "copy", "collections", "json", "pickle", "os", "numpy", "np")


def check(m):
    if not m.ddp_constructors or not m.calls_named("torch.save") or m.mentions(*PREFIX_HANDLING):
        return
    if _converted_on_load(m):
        return
    seen: set[int] = set()
    for run in m.runs:
        for t in run.traces:
            for e in t.events:
                if e.kind == "state_dict" and e.path is None and id(e.node) not in seen:
                    # (e.path: a state_dict() in another file of the project is that file's finding)
                    seen.add(id(e.node))
                    if _not_the_wrapper_branch(m, e.node) or _loaded_back_into_wrapper(m, e.node):
                        continue
                    yield m.finding(
                        CODE,
                        e.node,
                        "`state_dict()` of the DDP wrapper: every key gets a `module.` prefix "
                        "and the checkpoint will not load into the plain model",
                        SEVERITY,
                        hint="save `model.module.state_dict()`",
                    )
