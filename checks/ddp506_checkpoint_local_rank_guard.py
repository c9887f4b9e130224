"""DDP506: a checkpoint written by local rank 0, once per node.

## What it does
Finds a checkpoint save (`torch.save`, `save_pretrained`, this file's helper that does one, or a
checkpoint helper of another module: `save(...)`, `save_checkpoint(...)`, `saver.save_checkpoint()`)
whose only rank test is on the node-local rank (`local_rank == 0`, `LOCAL_RANK`, an argparse option
fed by `--local_rank`, accelerate's `is_local_main_process`, or a value only those ranks hold:
`saver = None; if args.local_rank == 0: saver = CheckpointSaver(...)` then `if saver is not None:`),
in distributed code (torch.distributed, DDP, a DistributedSampler, accelerate, Horovod, a file
that reads the launcher's `LOCAL_RANK`, or one that takes a rank modulo the GPUs of a node:
`args.rank % ngpus_per_node == 0` in a trainer module) that can run on several nodes (nothing pins its rendezvous to
localhost). Saves to a path that names the host or node are left alone. Also Hugging Face's
`save_on_each_node=True`, which makes the Trainer save from local rank 0 of every node, and a file
every process writes that only its node-local rank names (`torch.save(state, f"final_{local_rank}.pt")`,
`open(f"eval/{self.local_rank}.pkl", "wb")`) in a file that also knows the global rank (one finding,
the other such writes listed). Saves behind a flag set from the local rank (`is_main = local_rank
== 0`, then `if is_main:` at each save) are one finding, where the flag is set: the line to change.

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

from ddpdoctor.script import ranks
from ddpdoctor.script.loaders import param_names
from ddpdoctor.script.names import dotted
from ddpdoctor.script.values import bound_argument
from ddpdoctor.script.writers import (
    checkpoint_helper_call,
    every_process_side,
    every_rank_reaches,
    guard_chains,
    named_by_local_rank_only,
    per_process_path,
    presence_origin,
    writer_guard_kind,
)

CODE = "DDP506"
TITLE = "Checkpoint guarded by the local rank"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def _local_part(m, test: ast.AST) -> ast.AST:
    """The comparison in a compound test that reads the node-local rank (`args.rank % ngpus_per_node
    == 0` on the second line of `not mp or (mp and ...)`): the part to change, else the whole test."""
    if isinstance(test, ast.BoolOp):
        for v in test.values:
            if writer_guard_kind(m, v) == (ranks.LOCAL,):
                return _local_part(m, v)
    return test


def _local_only(m, test: ast.AST) -> bool:
    """The test reads the node-local rank and no global one (ddpdoctor.script.ranks knows the
    spellings: LOCAL_RANK, args.local_rank, an argparse dest fed by --local_rank, ...), also through
    a value only those ranks hold (``if saver is not None:`` where ``saver`` is made under
    ``local_rank == 0``)."""
    kind = writer_guard_kind(m, test)
    if kind != (ranks.LOCAL,):
        return kind is not None and _param_given_local_rank(m, test)
    # (`rank % gpus_per_node == 0` compares a remainder: one process per node)
    compared = {d for e in _compared(test) if (d := dotted(e))}
    for e in ast.walk(test):  # `is_main = device_id in {0, None}` then `if not is_main:`
        key = dotted(e) if isinstance(e, (ast.Name, ast.Attribute)) else None
        for value, _n in ranks.assignments(m, key)[:8] if key else ():
            compared |= {d for c in _compared(value) if (d := dotted(c))}
    return not _group_rank_names(m) & compared


def _flag_origin(m, test: ast.AST) -> ast.AST | None:
    """The one node-local rank test a flag is set from (``is_main = local_rank == 0`` then ``if
    is_main:`` at every save): one cause for all the saves it guards."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    key = dotted(test) if isinstance(test, (ast.Name, ast.Attribute)) else None
    if key is None or ranks.rank_kind(m, test) is not None:
        return None
    made = [v for v, _n in ranks.assignments(m, key) if not isinstance(v, ast.Constant)]
    if len(made) == 1 and writer_guard_kind(m, made[0]) == (ranks.LOCAL,):
        return made[0]
    return None


def _compared(test: ast.AST) -> list[ast.AST]:
    """The operands the comparisons of ``test`` compare (``rank`` and ``0`` in ``rank == 0``)."""
    return [e for c in ast.walk(test) if isinstance(c, ast.Compare) for e in (c.left, *c.comparators)]


def _param_given_local_rank(m, test: ast.AST) -> bool:
    """``if rank == 0:`` on a parameter of this file's function that every call hands the node-local
    rank (``train(model, args.local_rank)`` with ``--local_rank``): the test is on the local rank,
    whatever the parameter is called."""
    fn = m.enclosing_function(test)
    if fn is None or isinstance(fn, ast.Lambda):
        return False
    params = param_names(fn)
    names = {e.id for e in _compared(test) if isinstance(e, ast.Name) and e.id in params}
    if len(names) != 1:
        return False
    (name,) = names
    sites = [s for s in ranks.own_call_sites(m, fn) if m.enclosing_function(s) is not fn]
    if not sites:
        return False
    for site in sites:
        known, value = bound_argument(fn, site, name)
        if not known or value is None or ranks.strict_rank_kind(m, value) != ranks.LOCAL:
            return False
    return True


def _group_rank_names(m) -> set[str]:
    """Names handed to ``init_process_group`` as the process's rank (``rank=local_rank``): whatever
    the name says, a test of that value picks one process of the whole group (were it only the
    node's rank, the group would not form on several nodes: DDP414's question)."""
    out = set()
    for call in m.dist_calls("init_process_group"):
        rank = ranks.group_rank_argument(m, call)
        # (not one the file reads from the launcher's LOCAL_RANK: that group is misbuilt, DDP414)
        if rank is not None and (name := dotted(rank)) and ranks.strict_rank_kind(m, rank) != ranks.LOCAL:
            out.add(name)
            out |= _copied_from(m, name)
    return out


def _copied_from(m, name: str) -> set[str]:
    """The names ``name`` is a plain copy of (``args.device_id = args.gpus = args.local_rank``):
    testing them is testing the group's rank too."""
    out: set[str] = set()
    todo = [name]
    while todo and len(out) < 8:
        for value, _node in ranks.assignments(m, todo.pop())[:4]:
            src = dotted(value) if isinstance(value, (ast.Name, ast.Attribute)) else None
            if src and src not in out and src != name:
                out.add(src)
                todo.append(src)
    return out


def _saves(m):
    for call in m.calls_named("torch.save"):
        yield call, call.args[1] if len(call.args) > 1 else m.keyword(call, "f")
    for call in m.method_calls("save_pretrained"):
        if m.keyword(call, "is_main_process") is None:
            yield call, call.args[0] if call.args else m.keyword(call, "save_directory")
    for call, _q in m.calls:
        if checkpoint_helper_call(m, call):
            path = next((a for a in reversed(call.args) if per_process_path(a, m)), None)
            yield call, path  # a rank-named argument (`f"ckpt_{rank}.pt"`) makes it per rank


def check(m):
    if m.one_process:  # init_process_group(world_size=1): no other rank to collide with
        return
    if not m.single_node:
        yield from _saved_on_each_node(m)
    # `rank % ngpus_per_node == 0` is a node-local test too (mp.spawn scripts)
    local_words = (
        "local_rank", "LOCAL_RANK", "local-rank", "local_main", "local_process_index", "per_node", "device_count"
    )
    several = (
        m.distributed_context
        or ranks.reads_launcher_rank(m)
        or ranks.tests_rank_per_node(m)
        or ranks.takes_local_rank(m)
    )
    if not several or not m.mentions(*local_words):
        return
    if m.single_node:
        return
    yield from _per_local_rank_files(m)
    reported: set[int] = set()
    reported_origins: set[int] = set()
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
            handed = writer_guard_kind(m, test) != (ranks.LOCAL,)  # a parameter given the local rank
            if handed and id(m.enclosing_function(test)) in reported:
                continue  # one cause: the call that hands the function the local rank
            if every_process_side(m, test) is not None and every_rank_reaches(m, test):
                continue  # another launch mode lets every rank through: DDP501 reports this test
            reported.add(id(test))
            if handed:
                reported.add(id(m.enclosing_function(test)))
            lines = [test.lineno, *(node.lineno for _t, node in reversed(chain)), save.lineno]
            origin = next((o for t in tests if (o := presence_origin(m, t)) is not None), None)
            flag = next((f for t in tests if (f := _flag_origin(m, t)) is not None), None) if origin is None else None
            held = "; every call of the function hands it the node-local rank" if handed else ""
            if origin is not None:  # `saver is not None`: the saver is made on local rank 0 only
                lines.insert(0, origin.lineno)
                held = f", true only where `{ast.unparse(origin)}` (line {origin.lineno})"
            elif flag is not None:  # `is_main = local_rank == 0` then `if is_main:` at every save
                lines.insert(0, flag.lineno)
                held = f", set where `{ast.unparse(flag)}` (line {flag.lineno})"
            via = m.chain_text(list(dict.fromkeys(lines)))
            if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
                # `not F or (F and rank % n == 0)`: the other side lets every process through
                others = [v for v in test.values if writer_guard_kind(m, v) is None]
                if others:
                    held += f"; where `{ast.unparse(others[0])}` holds, every process writes it"
            # a saver made on local rank 0 only is reported where it is made: that test is the one to change
            # (and one behind a flag set from the local rank, `is_master = local_rank == 0`, where
            # that flag is set: the one line to change for all the saves it guards)
            anchor = origin if origin is not None else flag if flag is not None else _local_part(m, test)
            # (saves behind one flag are one cause: reported at the first of them)
            cause = id(flag) if flag is not None else id(anchor)
            if cause in reported_origins:
                break
            reported_origins.add(cause)
            yield m.finding(
                CODE,
                anchor,
                f"the checkpoint save is guarded only by the node-local rank (`{ast.unparse(test)}`{held}): "
                f"on several nodes every node's local rank 0 writes the same file at once ({via})",
                SEVERITY,
                hint="guard the save with the global rank (`dist.get_rank() == 0`), or put the "
                "host name in the path",
                chain=lines,
                writer=dotted(save.func) or "save",
            )
            break


def _writes(m):
    """(call, path) of the saves and of ``open(path, "w"/"wb"/"a")``."""
    yield from ((c, p) for c, p in _saves(m) if p is not None)
    for call in m.calls_named("open"):
        mode = call.args[1] if len(call.args) > 1 else m.keyword(call, "mode")
        if call.args and isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax"):
            yield call, call.args[0]


def _per_local_rank_files(m):
    """A file every process writes, named by its node-local rank alone (``torch.save(state,
    f"{ckpt}_rank{local_rank}")``, ``open(f"eval/{self.local_rank}.pkl", "wb")``): on several nodes
    the processes with the same local rank write the same file."""
    found = []
    for call, path in _writes(m):
        local = named_by_local_rank_only(m, path)
        if local is None or m.rank_guard(call) is not None or any(guard_chains(m, call)):
            continue  # (a rank test on the way, here or around a call that leads here: DDP501/506's)
        found.append((call, local))
    if not found or not _tells_global_rank(m):
        return  # (a file that never tells a global rank from the local one is written for one node)
    # one cause, one finding: the first such write, with the others listed
    found.sort(key=lambda f: (f[0].lineno, f[0].col_offset))
    call, local = found[0]
    more = [c.lineno for c, _l in found[1:]]
    also = f"; so do the writes on line{'s' if len(more) > 1 else ''} {', '.join(map(str, more))}" if more else ""
    yield m.finding(
        CODE,
        call,
        f"every process writes a file named by its node-local rank (`{ast.unparse(local)}`): on several "
        f"nodes the processes with the same local rank write the same file at once{also}",
        SEVERITY,
        hint="name the file by the global rank (`dist.get_rank()`) or the host, or write it on one rank",
        chain=[call.lineno, *more[:4]],
    )


def _tells_global_rank(m) -> bool:
    """The file knows the process's rank in the whole job beside the local one (``dist.get_rank()``,
    ``rank = args.nr * args.gpus + local_rank``, RANK from the launcher)."""
    return bool(m.dist_calls("get_rank", "get_global_rank")) or any(
        # (a node's offset plus the local rank is a global rank whatever the names say)
        (m.rank_kind(a.value) if isinstance(a.value, ast.BinOp) else ranks.strict_rank_kind(m, a.value))
        == ranks.GLOBAL
        for a in m.nodes(ast.Assign)
    )


def _saved_on_each_node(m):
    """``TrainingArguments(..., save_on_each_node=True)``: Hugging Face's Trainer then saves from the
    local main process of every node, which its own documentation rules out for nodes that share
    storage: they write the same files."""
    for call, _q in m.calls:
        value = m.keyword(call, "save_on_each_node")
        if isinstance(value, ast.Constant) and value.value is True:
            yield m.finding(
                CODE,
                value,
                "`save_on_each_node=True` makes the Trainer write every checkpoint from local rank 0 of "
                "each node: on nodes that share the output directory they write the same files at once",
                SEVERITY,
                hint="leave `save_on_each_node` False when the nodes share storage (the main process saves)",
            )
