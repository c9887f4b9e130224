"""DDP414: the node-local rank handed to the process group as its rank.

## What it does
Finds `init_process_group(rank=...)` (or `os.environ["RANK"] = ...`, which env:// reads) where the rank is the node-local one (`LOCAL_RANK` from the
environment, a `--local_rank` option, a name assigned from either, or a helper of the file that
returns it; also a name that one launch path sets to it, `if args.local_rank != -1: args.rank =
args.local_rank`, beside a Slurm path that sets the global one) while the world size is the launcher's (`WORLD_SIZE`, `LOCAL_WORLD_SIZE` from the
environment, or left to `env://`). A name is evidence only when it says `local_rank` and the file
does not show where it is set (`args.local_rank` of another file's parser, also through
`args.device_id = args.local_rank`): a parameter merely called `gpu` (the `mp.spawn` index) is not followed, and a script whose rendezvous is hard-wired to this machine
(`tcp://127.0.0.1`, `MASTER_ADDR = "localhost"`) or whose world is this machine's GPU count is
written for one node, where the local rank is the global one.

## Why is this bad?
torchrun (and `torch.distributed.launch`, Slurm) number the processes of each node from 0 in
`LOCAL_RANK`. On two nodes both node's first processes claim rank 0, the second node's ranks never
fill the world: the rendezvous fails ("duplicate rank") or waits until its timeout. It works on one
node, so it is found only when the job scales out, and every `rank == 0` action would run once per
node.

## Example
```python
local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl", rank=local_rank, world_size=int(os.environ["WORLD_SIZE"]))
```

## Use instead
```python
dist.init_process_group("nccl")          # env:// reads RANK and WORLD_SIZE that torchrun sets
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))   # the local rank is the device, not the rank
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.loaders import sampler_calls
from ddpdoctor.script.names import dotted
from ddpdoctor.script.ranks import (
    LOCAL,
    last_value_before,
    local_rank_as_group_rank,
    rank_kind,
    same_as_group_local_rank,
)

CODE = "DDP414"
TITLE = "Node-local rank passed as the process-group rank"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "high"


def _samplers_given_it(m, hit) -> list[int]:
    """Lines of the DistributedSamplers handed the same local rank: one mistake, one finding."""
    lines = set()
    for call in sampler_calls(m):
        rank = m.keyword(call, "rank")
        if rank is not None and same_as_group_local_rank(m, rank):
            lines.add(rank.lineno)
    return sorted(lines)


def check(m):
    for node, value, local in _rank_set_to_local(m):
        via = "" if _strip(value) is local else f" (`{ast.unparse(_strip(value))}`)"
        yield m.finding(
            CODE,
            node,
            f"`RANK` is set to the node-local rank `{ast.unparse(local)}`{via}, and env:// gives the "
            "process group that rank: on a second node the processes claim ranks 0, 1, ... again, so "
            "the rendezvous fails or hangs, and rank-0-only work runs once per node",
            SEVERITY,
            hint="leave RANK as the launcher sets it (torchrun and torch.distributed.launch set the "
            "global rank), or set it to `node_rank * nproc_per_node + local_rank`",
        )
    for hit in local_rank_as_group_rank(m):
        through, chain = "", {}
        if hit.passed_by is not None:
            chain = {"chain": m.chain_text([hit.passed_by.lineno], hit.rank.lineno)}
            through = (
                f", passed as `{ast.unparse(hit.rank)}` by `{ast.unparse(hit.passed_by.func)}(...)` on line "
                f"{hit.passed_by.lineno}"
            )
        # at the rank argument: in a call spread over lines, the line to change
        if hit.path_given is not None:
            given = hit.path_given
            through = f" on the launch path where line {given.lineno} sets `{ast.unparse(given).strip()}`"
            chain = {"chain": [given.lineno, hit.rank.lineno]}
        yield m.finding(
            CODE,
            hit.rank,
            f"the process group's rank is the node-local rank "
            f"(`{ast.unparse(hit.passed if hit.passed is not None else hit.rank)}`{through}) in a world the "
            "launcher sizes over every node: on a second node the processes claim ranks 0, 1, ... again, "
            "so the rendezvous fails or hangs, and rank-0-only work runs once per node"
            + _also(_samplers_given_it(m, hit)),
            SEVERITY,
            hint="pass the global rank (`int(os.environ['RANK'])`), or leave `rank` and `world_size` "
            "out: torchrun's env:// sets them",
            **chain,
        )


def _strip(e: ast.AST | None) -> ast.AST | None:
    """``str(x)``/``int(x)`` -> ``x``."""
    while isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("str", "int") and len(e.args) == 1:
        e = e.args[0]
    return e


def _local_value(m, write: ast.AST, e: ast.AST | None) -> ast.AST | None:
    """The node-local rank ``e`` holds at ``write``: itself, or what the last assignment of that name
    before it in the same function gave (``args.proc_id = args.local_rank``)."""
    e = _strip(e)
    if e is None:
        return None
    if rank_kind(m, e) == LOCAL:
        return e
    name = dotted(e) if isinstance(e, (ast.Name, ast.Attribute)) else None
    value = _strip(last_value_before(m, name, write)) if name is not None else None
    return value if rank_kind(m, value) == LOCAL else None


def _rank_set_to_local(m):
    """``os.environ["RANK"] = str(args.local_rank)``: env:// then hands the process group the
    node-local rank (unless the file pins every process to this host)."""
    if m.single_node:
        return
    for key, value, node, how in m.env_writes:
        if key == "RANK" and how == "assign":
            local = _local_value(m, node, value)
            if local is not None:
                yield node, value, local


def _also(lines: list[int]) -> str:
    if not lines:
        return ""
    many = len(lines) > 1
    return (
        f"; the DistributedSampler{'s' if many else ''} on line{'s' if many else ''} "
        f"{', '.join(map(str, lines))} take{'' if many else 's'} it as the rank too, so on several nodes "
        "their shards repeat"
    )
