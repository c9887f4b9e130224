"""DDP506: a checkpoint written by local rank 0, once per node.

## What it does
Finds a checkpoint save (`torch.save`, `save_pretrained`, this file's helper that does one, or a
checkpoint helper of another module: `save(...)`, `save_checkpoint(...)`, `saver.save_checkpoint()`)
whose only rank test is on the node-local rank (`local_rank == 0`, `LOCAL_RANK`, an argparse option
fed by `--local_rank`, accelerate's `is_local_main_process`, or a value only those ranks hold:
`saver = None; if args.local_rank == 0: saver = CheckpointSaver(...)` then `if saver is not None:`),
in distributed code (torch.distributed, DDP, a DistributedSampler, accelerate, Horovod, or a file
that reads the launcher's `LOCAL_RANK`) that can run on several nodes (nothing pins its rendezvous to
localhost). Saves to a path that names the host or node are left alone.

## Why is this bad?
Every node has a local rank 0, so on N nodes N processes write the same checkpoint at the same time.
On shared storage (NFS, Lustre, a bucket) the writes interleave into a corrupt or truncated file,
and a reader may load a half-written one. It works on one node, so it shows up only when the job
scales out.

## Example
```python
local_rank = int(os.environ["LOCAL_RANK"])
if local_rank == 0:
    torch.save(model.module.state_dict(), "ckpt.pt")
```

## Use instead
```python
if dist.get_rank() == 0:          # the global rank: one writer per job
    torch.save(model.module.state_dict(), "ckpt.pt")
dist.barrier()
```
"""

from __future__ import annotations

import ast
import re

from ddpdoctor.script import ranks
from ddpdoctor.script.names import dotted
from ddpdoctor.script.writers import (
    every_process_side,
    every_rank_reaches,
    guard_chains,
    per_process_path,
    presence_origin,
    writer_guard_kind,
)

CODE = "DDP506"
TITLE = "Checkpoint guarded by the local rank"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

_LOCALHOST = ("localhost", "127.0.0.1", "::1")


def _local_only(m, test: ast.AST) -> bool:
    """The test reads the node-local rank and no global one (ddpdoctor.script.ranks knows the
    spellings: LOCAL_RANK, args.local_rank, an argparse dest fed by --local_rank, ...), also through
    a value only those ranks hold (``if saver is not None:`` where ``saver`` is made under
    ``local_rank == 0``)."""
    return writer_guard_kind(m, test) == (ranks.LOCAL,)


def single_node(m) -> bool:
    """The script pins its rendezvous to this machine: it cannot run on several nodes."""
    for key, value, _node, how in m.env_writes:
        local = isinstance(value, ast.Constant) and str(value.value) in _LOCALHOST
        if key == "MASTER_ADDR" and how == "assign" and local:
            return True
    for call in m.dist_calls("init_process_group"):
        init = m.keyword(call, "init_method")
        if isinstance(init, (ast.Constant, ast.JoinedStr)) and any(
            h in ast.unparse(init) for h in _LOCALHOST
        ):
            return True
    return False


# a call named like this saves a checkpoint (`save`, `save_checkpoint`, `save_model`,
# `saver.save_checkpoint`, `ckpt_save`); pictures and plots are not checkpoints
_CHECKPOINT_CALL = re.compile(r"save.*(checkpoint|ckpt|model|state|weight|network)|(checkpoint|ckpt).*save")
_LIBRARIES = ("torch", "numpy", "PIL", "matplotlib", "scipy", "imageio", "cv2", "pandas", "json", "pickle")


def _checkpoint_helper(m, call: ast.Call) -> bool:
    """A call of a checkpoint-saving helper whose body this file does not hold: an imported
    function (``from utils import save``; ``save_checkpoint(...)``) or a method
    (``saver.save_checkpoint(epoch)``). This file's own helpers are followed to their
    ``torch.save`` instead."""
    f = call.func
    q = m.qualname(f) or ""
    if q.split(".", 1)[0] in _LIBRARIES or q.split(".", 1)[0] in ("torchvision", "torchaudio"):
        return False
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
    if not name or any(fn.name == name for fn in m.functions):
        return False  # this file's own helper (followed to its torch.save)
    if isinstance(f, ast.Name):
        named = q != f.id and (name.lower() == "save" or bool(_CHECKPOINT_CALL.search(name.lower())))
    else:
        root = (dotted(f.value) or "").split(".", 1)[0]
        named = root not in m.aliases and bool(_CHECKPOINT_CALL.search(name.lower()))
    # the name first: callee_guard may read and parse another file of the project to look inside
    if not named or ranks.callee_guard(m, call) is not None:
        return False  # not a checkpoint helper, or one that picks its rank
    return isinstance(f, ast.Name) or _saver_made_here(m, f.value)


# libraries whose trainers and accelerators pick the process that writes themselves
# (`accelerator.save_model`, `trainer.save_checkpoint`, a DeepSpeed engine's per-rank shards)
_SELF_CHOOSING = ("accelerate", "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed", "transformers")


def _saver_made_here(m, receiver: ast.AST) -> bool:
    """The object was built in this file by a class that is not one of those libraries'
    (``saver = CheckpointSaver(...)``): what it does is a plain write. An object from elsewhere (a
    parameter, an attribute set in another file) is unknown, and unknown is not guilty."""
    key = dotted(receiver)
    made = [v for v, _n in ranks.assignments(m, key)] if key else []
    made = [v for v in made if not (isinstance(v, ast.Constant) and v.value is None)]
    return bool(made) and all(
        isinstance(v, ast.Call)
        and (m.qualname(v.func) or "").split(".", 1)[0] not in _SELF_CHOOSING
        and (dotted(v.func) or "").rsplit(".", 1)[-1] not in ("Accelerator", "Trainer", "Fabric")
        for v in made
    )


def _saves(m):
    for call in m.calls_named("torch.save"):
        yield call, call.args[1] if len(call.args) > 1 else m.keyword(call, "f")
    for call in m.method_calls("save_pretrained"):
        if m.keyword(call, "is_main_process") is None:
            yield call, call.args[0] if call.args else m.keyword(call, "save_directory")
    for call, _q in m.calls:
        if _checkpoint_helper(m, call):
            path = next((a for a in reversed(call.args) if per_process_path(a, m)), None)
            yield call, path  # a rank-named argument (`f"ckpt_{rank}.pt"`) makes it per rank


def check(m):
    if m.one_process:  # init_process_group(world_size=1): no other rank to collide with
        return
    # `rank % ngpus_per_node == 0` is a node-local test too (mp.spawn scripts)
    local_words = ("local_rank", "LOCAL_RANK", "local-rank", "local_main", "per_node", "device_count")
    if not (m.distributed_context or ranks.reads_launcher_rank(m)) or not m.mentions(*local_words):
        return
    if single_node(m):
        return
    reported: set[int] = set()
    for save, path in _saves(m):
        if per_process_path(path, m):
            continue
        for chain in guard_chains(m, save):
            if not chain:
                continue
            tests = [t for t, _ in chain]
            if not all(_local_only(m, t) for t in tests):
                continue
            test = tests[-1]  # the outermost: where the one-per-node decision is taken
            if id(test) in reported:
                continue
            if every_process_side(m, test) is not None and every_rank_reaches(m, test):
                continue  # another launch mode lets every rank through: DDP501 reports this test
            reported.add(id(test))
            lines = [test.lineno, *(node.lineno for _t, node in reversed(chain)), save.lineno]
            origin = next((o for t in tests if (o := presence_origin(m, t)) is not None), None)
            held = ""
            if origin is not None:  # `saver is not None`: the saver is made on local rank 0 only
                lines.insert(0, origin.lineno)
                held = f", true only where `{ast.unparse(origin)}` (line {origin.lineno})"
            via = m.chain_text(list(dict.fromkeys(lines)))
            yield m.finding(
                CODE,
                test,
                f"the checkpoint save is guarded only by the node-local rank (`{ast.unparse(test)}`{held}): "
                f"on several nodes every node's local rank 0 writes the same file at once ({via})",
                SEVERITY,
                hint="guard the save with the global rank (`dist.get_rank() == 0`), or put the "
                "host name in the path",
                chain=lines,
                writer=dotted(save.func) or "save",
            )
            break
