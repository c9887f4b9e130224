"""DDP407: CUDA_VISIBLE_DEVICES set inside a multi-process script.

## What it does
Finds `os.environ["CUDA_VISIBLE_DEVICES"] = ...` (also `.update`, `putenv`) in a script that runs
several processes (torch.distributed, `mp.spawn`, a `LOCAL_RANK`), when the value is a fixed list
(`"0,1,2,3"`), or when it is the process's own rank and the script then also picks the device by
that rank (`set_device(local_rank)`, `f"cuda:{local_rank}"`, `device_ids=[local_rank]`). Also
when the value is the script's own option whose default is a fixed GPU list (`--gpu`, default
`'0,1,2,3'`: every launch without the option overrides the scheduler), and when it is written after
something in the same function already started CUDA (`torch.cuda.set_device`, `model.cuda()`), so
it changes nothing in this process.
And when the value comes from a config or option (`os.environ["CUDA_VISIBLE_DEVICES"] =
cfg["gpus"]`) in a process a launcher outside the file started (torchrun, torch.distributed.launch:
the file starts no process itself and reads the launcher's rank or leaves it to `env://`).
`setdefault` and an assignment only when the variable is unset are left alone.

## Why is this bad?
The launcher or the scheduler (Slurm, Kubernetes, torchrun with a GPU list) has already chosen
which GPUs each job and process may use; a fixed list in the script overrides that, so two jobs on
one node land on the same GPUs and the GPUs the scheduler granted stay idle. Masking the GPUs down
to the process's own one renumbers it to `cuda:0`: `set_device(local_rank)` then fails with
"invalid device ordinal" on every rank but 0.

## Example
```python
os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)
torch.cuda.set_device(local_rank)
```

## Use instead
```python
torch.cuda.set_device(local_rank)   # leave device visibility to the launcher
```
"""

from __future__ import annotations

import ast
import re

from ddpdoctor.script import ranks
from ddpdoctor.script.names import dotted

CODE = "DDP407"
TITLE = "CUDA_VISIBLE_DEVICES set in a multi-process script"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

_VAR = "CUDA_VISIBLE_DEVICES"
_DEVICE_CALLS = ("torch.cuda.set_device", "torch.cuda.device", "torch.device")


def _only_when_unset(m, node) -> bool:
    """Under ``if "CUDA_VISIBLE_DEVICES" not in os.environ:`` (or ``.get(...) is None``)."""
    for a in m.ancestors(node):
        if isinstance(a, ast.If) and _VAR in ast.unparse(a.test):
            return True
    return False


def _names(expr: ast.AST) -> set[str]:
    """The values ``expr`` reads, whole: ``args.gpu_id``, not also ``args`` (which ``args.gpu`` reads too)."""
    found = {dotted(n) for n in ast.walk(expr) if isinstance(n, (ast.Name, ast.Attribute)) and dotted(n)}
    return {n for n in found if not any(o.startswith(n + ".") for o in found)}


def _indexed_by(m, names: set[str]) -> ast.AST | None:
    """A place that picks a GPU by one of ``names`` (the value the mask was set to)."""
    for call, q in m.calls:
        exprs = []
        if q in _DEVICE_CALLS:
            exprs.extend(call.args)
        exprs.extend(k.value for k in call.keywords if k.arg in ("device_ids", "output_device", "device_id"))
        if isinstance(call.func, ast.Attribute) and call.func.attr in ("cuda", "to") and call.args:
            exprs.append(call.args[0])
        for e in exprs:
            if _names(e) & names:
                return call
    for node in m.nodes(ast.JoinedStr):
        if "cuda:" in ast.unparse(node) and _names(node) & names:
            return node
    return None


_GPU_LIST = re.compile(r"\s*\d+(\s*,\s*\d+)*\s*")
# calls that start CUDA in the process (CUDA_VISIBLE_DEVICES is read once, at that start)
_CUDA_STARTS = ("torch.cuda.set_device", "torch.cuda.init", "torch.cuda.current_device")


def _constant_behind(m, value: ast.AST) -> ast.AST:
    """The constant a name is bound to everywhere in the file (``gpu_list = "0,1,2,3"``), else
    ``value`` itself."""
    joined = _joined_list(m, value)
    if joined is not None:
        return joined
    if not isinstance(value, ast.Name):
        return value
    made = [v for v, _node in ranks.assignments(m, value.id)]
    if made and all(isinstance(v, ast.Constant) and v.value == made[0].value for v in made):
        return made[0]
    return value


def _joined_list(m, value: ast.AST) -> ast.Constant | None:
    """``",".join(str(g) for g in GPU)`` (or ``map(str, GPU)``) over a list of constant GPU numbers
    the file fixes (``GPU = [1, 2]``): that fixed text, "1,2"."""
    if not (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "join"
        and isinstance(value.func.value, ast.Constant)
        and len(value.args) == 1
    ):
        return None
    arg = value.args[0]
    if isinstance(arg, (ast.GeneratorExp, ast.ListComp)) and len(arg.generators) == 1:
        items = arg.generators[0].iter
    elif isinstance(arg, ast.Call) and dotted(arg.func) == "map" and len(arg.args) == 2:
        items = arg.args[1]
    else:
        items = arg
    if isinstance(items, ast.Name):
        made = [v for v, _node in ranks.assignments(m, items.id)]
        items = made[0] if len(made) == 1 else None
    if not isinstance(items, (ast.List, ast.Tuple)) or not items.elts:
        return None
    if not all(isinstance(e, ast.Constant) and isinstance(e.value, (int, str)) for e in items.elts):
        return None
    return ast.Constant(value=value.func.value.value.join(str(e.value) for e in items.elts))


def _option_with_fixed_gpus(m, value: ast.AST) -> tuple[str, str] | None:
    """(flag, default) when ``value`` is ``args.<dest>`` (or ``args["<dest>"]``) of the file's own
    option whose default is a GPU list (``--gpu``, default ``'0,1,2,3'``)."""
    if isinstance(value, ast.Attribute):
        key = value.attr
    elif isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant):
        key = value.slice.value  # `args["gpu"]` after `args = vars(parser.parse_args())`
    else:
        return None
    dest = ranks.argparse_dests(m).get(key) if isinstance(key, str) else None
    if dest is None or not isinstance(dest.default, ast.Constant) or not isinstance(dest.default.value, str):
        return None
    default = dest.default.value
    if not _GPU_LIST.fullmatch(default) or default.strip() == "-1":
        return None
    return dest.flags[0], default


def _cuda_begun_before(m, node: ast.AST) -> ast.Call | None:
    """A call earlier in the same function (not under a test that could skip it) that starts CUDA."""
    fn = m.enclosing_function(node)
    for call, q in m.calls:
        starts = q in _CUDA_STARTS or (  # `model.cuda()`
            isinstance(call.func, ast.Attribute) and call.func.attr == "cuda" and dotted(call.func.value) != "torch"
        )
        if starts and call.lineno < node.lineno and m.enclosing_function(call) is fn and _same_path(m, call, node):
            return call
    return None


def _same_path(m, call: ast.AST, node: ast.AST) -> bool:
    """``call`` runs, unconditionally, in a statement before one that holds ``node`` in the same
    block (what started CUDA ran on the way to the write)."""
    fn = m.enclosing_function(node)
    call_stmts = [a for a in m.ancestors(call) if isinstance(a, ast.stmt)]
    for s in [node, *m.ancestors(node)]:
        if s is fn:
            break
        parent = m.parents.get(s)
        block = next(
            (b for b in (getattr(parent, f, None) for f in ("body", "orelse", "finalbody")) if isinstance(b, list) and s in b),
            None,
        )
        if block is None:
            continue
        for k, t in enumerate(call_stmts):
            if t in block and block.index(t) < block.index(s):
                inner = call_stmts[:k]  # the statements between the call and that block
                return not any(isinstance(a, (ast.If, ast.For, ast.While, ast.Try, ast.AsyncFor)) for a in inner)
    return False


def _launched_elsewhere(m) -> bool:
    """The processes are started by a launcher outside the file (torchrun, torch.distributed.launch,
    srun): it starts none itself, and it reads the launcher's rank or leaves the rank to ``env://``
    (``init_process_group("nccl")``). A file that spawns its workers is its own launcher: the GPU
    list it picks before spawning is its way of choosing GPUs."""
    if ranks.spawn_calls(m) or m.mentions("Process(", "subprocess"):
        return False
    if ranks.reads_launcher_rank(m):
        return True
    return any(
        m.keyword(c, "rank") is None and len(c.args) < 5 for c in m.dist_calls("init_process_group")
    )


def _per_process(m, value: ast.AST) -> bool:
    """The value is this process's own (its rank, local rank, a slice of GPUs by rank) or the
    environment's (``os.environ.get(...)``): the per-process binding the rank branch judges."""
    text = ast.unparse(value).lower()
    return "rank" in text or "environ" in text or "getenv" in text or "local" in text or "slurm" in text


def check(m):
    if not m.mentions(_VAR) or not ranks.multi_process(m):
        return
    for key, value, node, how in m.env_writes:
        if key != _VAR or how != "assign" or value is None or _only_when_unset(m, node):
            continue
        if ranks.single_process_arm(m, node):
            continue  # `if not args.distributed:`: the one-process run picks its GPU this way
        value = _constant_behind(m, value)
        if isinstance(value, ast.Constant):
            if str(value.value).strip() in ("", "-1"):
                continue  # hiding every GPU (a CPU-only run) overrides nothing
            yield m.finding(
                CODE,
                node,
                f"`{_VAR}` is fixed to {value.value!r} in a multi-process script: it overrides the GPUs "
                "the scheduler or launcher gave this job, so jobs sharing a node collide",
                SEVERITY,
                hint=f"remove it; choose GPUs at launch (`{_VAR}=... torchrun ...`, Slurm --gpus)",
            )
            continue
        began = _cuda_begun_before(m, node)
        if began is not None:
            yield m.finding(
                CODE,
                node,
                f"`{_VAR}` is set after CUDA has started in this process (line {began.lineno}, "
                f"`{ast.unparse(began.func)}`): it does not change this process's GPUs, only those "
                "of the processes it starts later",
                SEVERITY,
                hint=f"remove it, or set `{_VAR}` before any CUDA call (better: at launch)",
            )
            continue
        fixed = _option_with_fixed_gpus(m, value)
        if fixed is not None:
            flag, default = fixed
            yield m.finding(
                CODE,
                node,
                f"`{_VAR}` is set from `{flag}`, whose default is the fixed list {default!r}: unless "
                "every launch passes the option, it overrides the GPUs the scheduler or launcher gave "
                "this job",
                SEVERITY,
                hint=f"drop the option's default (or the assignment) and choose GPUs at launch "
                f"(`{_VAR}=... torchrun ...`, Slurm --gpus)",
            )
            continue
        names = _names(value)
        if _launched_elsewhere(m) and not _per_process(m, value):
            yield m.finding(
                CODE,
                node,
                f"`{_VAR}` is set from `{ast.unparse(value)[:40]}` in every process the launcher "
                "started: it overrides the GPUs the launcher or scheduler gave this job, so a job "
                "given other GPUs (Slurm, a shared node) runs on GPUs it does not own",
                SEVERITY,
                hint=f"remove it and choose GPUs at launch (`{_VAR}=... torchrun ...`, Slurm --gpus)",
            )
            continue
        if not any("rank" in n.lower() or "gpu" in n.lower() for n in names):
            continue
        picked = _indexed_by(m, names)
        if picked is not None:
            yield m.finding(
                CODE,
                node,
                f"`{_VAR}` is set to this process's `{ast.unparse(value)}`, so its GPU becomes cuda:0; "
                f"line {picked.lineno} still picks the device by that index: 'invalid device ordinal' "
                "on every process but the first",
                SEVERITY,
                hint="leave CUDA_VISIBLE_DEVICES to the launcher and `torch.cuda.set_device(local_rank)`",
            )
