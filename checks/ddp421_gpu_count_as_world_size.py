"""DDP421: this machine's GPU count taken for the job's world size.

## What it does
Finds `torch.cuda.device_count()` (or a name bound to it on every path) given where the number of
processes in the whole job belongs, in a script a launcher starts (torchrun, `torch.distributed.launch`,
Slurm; it reads the rank the launcher sets): the group's `init_process_group(world_size=...)`, a
`DistributedSampler(num_replicas=...)`, or a name that calls itself the world size (`world_size =
torch.cuda.device_count()`), also multiplied by a node count (`SLURM_NNODES * device_count()`: a
Slurm task bound to one GPU sees one). A script that starts its own processes (`mp.spawn`), one per GPU of this
machine, is left alone: there the count is the world. So is `rank % torch.cuda.device_count()`, the
device of a rank on its node.

## Why is this bad?
The launcher sizes the job: `--nnodes 2 --nproc_per_node 8` makes 16 processes, and
`--nproc_per_node 4` on an 8-GPU machine makes 4. This machine's GPU count is neither. Handed to the
process group it hangs the rendezvous or fails; handed to the sampler, the shards overlap and some data
is never read; used to scale the learning rate or the steps, the run is silently wrong on more than
one node.

## Example
```python
world_size = torch.cuda.device_count()
dist.init_process_group("nccl")                  # torchrun's WORLD_SIZE
sampler = DistributedSampler(ds, num_replicas=world_size, rank=dist.get_rank())
```

## Use instead
```python
world_size = dist.get_world_size()
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script import ranks
from ddpdoctor.script.names import dotted

CODE = "DDP421"
TITLE = "This machine's GPU count taken for the world size"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

_WORLD_NAMES = frozenset(("world_size", "worldsize", "num_replicas", "world"))


def _count(m, e: ast.AST | None) -> bool:
    """``e`` is this machine's GPU count: the call, or a name given only that."""
    if e is None:
        return False
    if isinstance(e, ast.Call):
        if (dotted(e.func) or "") == "int" and len(e.args) == 1:
            return _count(m, e.args[0])
        return (m.qualname(e.func) or "").endswith("cuda.device_count")
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
        # `SLURM_NNODES * torch.cuda.device_count()`: as many processes per node as this machine
        # shows GPUs, which a task bound to one GPU (`--gpus-per-task=1`) does not
        return _count(m, e.left) or _count(m, e.right)
    return (
        isinstance(e, (ast.Name, ast.Attribute))
        and ranks.always_per_node_count(m, e)
        and "per_node" not in (dotted(e) or "").lower()
    )


def _launched(m) -> bool:
    """Started by a launcher that sizes the job, not by this file: it reads the launcher's rank and
    spawns nothing, and its rendezvous is not pinned to this host."""
    if ranks.spawn_calls(m):
        return False
    # (the old launcher's `--local_rank` option is a launcher's rank too)
    option = any(f in ("--local_rank", "--local-rank") for d in m.argparse_dests().values() for f in d.flags)
    if not (ranks.reads_launcher_rank(m) or option):
        return False
    return not any(
        key == "MASTER_ADDR" and isinstance(v, ast.Constant) and str(v.value) in ("localhost", "127.0.0.1")
        for key, v, _node, _how in m.env_writes
    )


def _uses(m):
    """(node, what it is given as) for each place the count stands for the world size."""
    for call in m.dist_calls("init_process_group"):
        size = m.keyword(call, "world_size")
        if _count(m, size):
            yield size, "the process group's `world_size`"
    for call in m.calls_named("DistributedSampler"):
        replicas = m.keyword(call, "num_replicas") or (call.args[1] if len(call.args) > 1 else None)
        if _count(m, replicas):
            yield replicas, "the sampler's `num_replicas`"
    for a in m.nodes(ast.Assign):
        if len(a.targets) != 1 or not _count(m, a.value) or not isinstance(a.value, (ast.Call, ast.BinOp)):
            continue
        target = a.targets[0]
        name = dotted(target) if isinstance(target, (ast.Name, ast.Attribute)) else None
        if not name or name.rsplit(".", 1)[-1].lower() not in _WORLD_NAMES:
            continue
        # the only value it ever gets (not a fallback beside the launcher's WORLD_SIZE), and read for
        # more than a message or a sanity check
        product = isinstance(a.value, ast.BinOp)
        if (product and _bound_once(m, name, a) or ranks.always_per_node_count(m, target)) and _used_for_work(m, name, a):
            yield a.value, f"`{name}`"


def _bound_once(m, name: str, binding: ast.Assign) -> bool:
    """``name`` gets no other value in the binding's function (nor, for an attribute, anywhere)."""
    fn = m.enclosing_function(binding)
    for a in m.nodes(ast.Assign):
        if a is binding or ("." not in name and m.enclosing_function(a) is not fn):
            continue
        if any(dotted(t) == name for t in a.targets):
            return False
    return True


def check(m):
    if not m.distributed_context or m.one_process or not _launched(m):
        return
    found = sorted(_uses(m), key=lambda u: (u[0].lineno, u[0].col_offset))
    if not found:
        return
    node, what = found[0]
    others = sorted({n.lineno for n, _w in found[1:] if n.lineno != node.lineno})
    also = f" (also line{'s' if len(others) > 1 else ''} {', '.join(map(str, others))})" if others else ""
    yield m.finding(
        CODE,
        node,
        ("a node count times " if isinstance(node, ast.BinOp) else "")
        + f"this machine's GPU count (`{ast.unparse(node)[:50]}`) is taken for {what}{also}, in a script a "
        "launcher starts: the launcher sizes the job (all nodes, `--nproc_per_node`), so on more than one "
        "node, or with fewer processes than GPUs, the shards, the group or the scaling are wrong",
        SEVERITY,
        hint="use `dist.get_world_size()` (or `int(os.environ['WORLD_SIZE'])`) after init_process_group",
    )


def _used_for_work(m, name: str, binding: ast.AST) -> bool:
    """A read of ``name`` (in the binding's function, for a plain name) that is not only shown or
    checked: not inside ``print``/a logger call, an ``assert`` or a comparison."""
    fn = m.enclosing_function(binding)
    for node in m.nodes(ast.Name, ast.Attribute):
        if not isinstance(node.ctx, ast.Load) or dotted(node) != name or node.lineno <= binding.lineno:
            continue
        if "." not in name and m.enclosing_function(node) is not fn:
            continue
        if not any(_only_shown(a) for a in m.ancestors(node)):
            return True
    return False


def _only_shown(a: ast.AST) -> bool:
    if isinstance(a, (ast.Assert, ast.Compare, ast.JoinedStr)):
        return True
    if isinstance(a, ast.Call):
        last = (dotted(a.func) or "").rsplit(".", 1)[-1]
        return last in ("print", "info", "debug", "warning", "log", "write", "format")
    return False
