"""DDP105: a DDP training loop whose DataLoader has no DistributedSampler.

## What it does
Finds a script that wraps its model in DistributedDataParallel but builds its training DataLoader
with no sampler (or a `RandomSampler`/`SequentialSampler`, which draw from the whole dataset), and
never uses a DistributedSampler or another way of sharding the data in its code (a commented-out
one does not count, nor one built and handed to no loader, only asked for its epoch; a sampler of
the script's own making, or `sampler=None` said out loud, does);
and a distributed job without a DDP model (feature extraction, inference) whose every rank loops
over an unsharded loader and saves each batch's results to a file named by its rank, or loops over a
whole dataset it loads and then gathers the results from every rank (`dist.all_gather_object`). Only a
loader over a dataset this file builds itself, that every rank builds: a dataset handed in by a
caller (which may have split it per rank), a factory given the rank, a rank-0 or non-distributed
loader and a one-process job (`world_size=1`) stay quiet.

## Why is this bad?
Every rank then iterates the whole dataset: N ranks do N times the work per epoch on identical (or
identically shuffled) batches, and the effective batch is not what you think.

## Example
```python
model = DDP(model, device_ids=[local_rank])
loader = DataLoader(train_set, batch_size=32, shuffle=True)
```

## Use instead
```python
sampler = DistributedSampler(train_set)
loader = DataLoader(train_set, batch_size=32, sampler=sampler)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.flow import Flow
from ddpdoctor.script.loaders import loop_root, passes
from ddpdoctor.script.names import dotted, is_distributed_flag
from ddpdoctor.script.ranks import callee_reads_rank, hands_rank_carrier, names_world_size, single_process_arm

CODE = "DDP105"
TITLE = "DataLoader without DistributedSampler in a DDP script"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"
# names that say the script shards its data across ranks some other way (read from the code, not
# from comments: a commented-out DistributedSampler shards nothing)
_SHARDING_NAMES = (
    "distributedsampler",
    "split_dataset_by_node",
    "split_by_node",
    "shard",
    "iterabledataset",
    "num_replicas",
    "distributedbatchsampler",
)
# a name that shards only when it is this exact name (``Subset``, not ``debug_subset_size``)
_SHARDING_EXACT = ("subset",)
# torch samplers that draw from the whole dataset on every rank: a loader given one is as
# unsharded as a loader given none
_WHOLE_DATASET_SAMPLERS = ("RandomSampler", "SequentialSampler")


def _shards_somehow(m) -> bool:
    """The code names a way of sharding (a DistributedSampler, ``dataset.shard``, a Subset, an
    IterableDataset that may split itself, ``accelerator.prepare``), or gives a loader a sampler of
    its own making: then a loader without one may be fed by it, so unknown."""
    looked: set[str] = set()  # a file says the same few names many times: each is looked at once
    # (not the imports: `from torch.utils.data import DistributedSampler` never used shards nothing,
    # and one that is used is seen where it is used; nor a sampler built and handed to no loader)
    idle = {id(n) for c in (*idle_samplers(m), *_same_subset_everywhere(m)) for n in ast.walk(c.func)}
    for n in m.nodes(ast.Name, ast.Attribute, ast.keyword, ast.ClassDef, ast.FunctionDef):
        if id(n) in idle:
            continue
        word = (
            n.id if isinstance(n, ast.Name)
            else n.attr if isinstance(n, ast.Attribute)
            else n.name if isinstance(n, (ast.ClassDef, ast.FunctionDef))
            else n.arg
        )
        # a constant's name labels something, it shards nothing (`mlperf_log.INPUT_SHARD`, a log key)
        if not word or word in looked or word.isupper():
            continue
        looked.add(word)
        if any(w in word.lower() for w in _SHARDING_NAMES) or word.lower() in _SHARDING_EXACT:
            return True
    if any((dotted(c.func.value) or "").endswith("accelerator") for c in m.method_calls("prepare")):
        return True
    plain = Flow(m, m.calls_named(*_WHOLE_DATASET_SAMPLERS))
    # ``sampler=None`` said out loud counts too: the author thought about sampling, and the dataset
    # (an IterableDataset of another module, say) may split itself
    return any(not plain.carries(k.value) for k in m.nodes(ast.keyword) if k.arg in ("sampler", "batch_sampler"))


def _same_subset_everywhere(m) -> list[ast.Call]:
    """``Subset(ds, range(n))``, ``Subset(ds, list(range(0, len(ds), 8)))``, ``Subset(ds, [0, 1])``:
    indices written out with nothing of the rank in them pick the same part on every rank, which
    shards nothing (a Subset of indices kept in a name may be each rank's part: unknown)."""
    out = []
    for call in m.calls_named("Subset"):
        idx = call.args[1] if len(call.args) > 1 else m.keyword(call, "indices")
        inner = idx.args[0] if isinstance(idx, ast.Call) and dotted(idx.func) == "list" and idx.args else idx
        if not (
            isinstance(inner, (ast.List, ast.Tuple))
            or isinstance(inner, ast.Call) and dotted(inner.func) == "range"
        ):
            continue
        text = ast.unparse(inner).lower()
        if not any(w in text for w in _PER_RANK_ARGS):
            out.append(call)
    return out


def idle_samplers(m) -> list[ast.Call]:
    """DistributedSamplers built, kept in a name and handed to nothing: the name is only asked for
    its epoch (`sampler.set_epoch(epoch)`) or tested (`if sampler is not None`), never given to a
    DataLoader, returned or stored elsewhere. Such a sampler shards no loader."""
    out = []
    for call in m.calls_named("DistributedSampler"):
        parent = m.parents.get(call)
        if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)):
            continue
        name = parent.targets[0].id
        scope = m.enclosing_function(call) or m.tree
        reads = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
        if all(_only_asked(m, r) or _returned_idle(m, r, scope) for r in reads):
            out.append(call)
    return out


def _returned_idle(m, read: ast.Name, fn) -> bool:
    """``return train_set, val_set, train_sampler`` from this file's ``load_dataset``, whose every
    caller unpacks that item into a name it only asks (or never reads): handed to no loader."""
    ret = m.parents.get(read)
    if isinstance(ret, ast.Tuple):
        pos, ret = ret.elts.index(read), m.parents.get(ret)
    else:
        pos = None
    if not isinstance(ret, ast.Return) or not isinstance(fn, ast.FunctionDef) or m.is_method(fn):
        return False
    sites = [c for c in m.call_sites(fn) if isinstance(c.func, ast.Name)]
    if not sites:
        return False
    for site in sites:
        assign = m.parents.get(site)
        if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1):
            return False
        target = assign.targets[0]
        if pos is not None:
            if not (isinstance(target, ast.Tuple) and pos < len(target.elts)):
                return False
            target = target.elts[pos]
        if not isinstance(target, ast.Name):
            return False
        scope = m.enclosing_function(site) or m.tree
        uses = [
            n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == target.id and isinstance(n.ctx, ast.Load)
        ]
        if not all(_only_asked(m, u) for u in uses):
            return False
    return True


def _only_asked(m, read: ast.Name) -> bool:
    """``read`` is the receiver of a method call (``sampler.set_epoch(e)``) or a part of a test."""
    parent = m.parents.get(read)
    if isinstance(parent, ast.Attribute) and isinstance(m.parents.get(parent), ast.Call):
        return m.parents[parent].func is parent
    child = read
    for a in m.ancestors(read):
        if isinstance(a, (ast.If, ast.While, ast.IfExp)) and child is a.test:
            return True
        if isinstance(a, (ast.stmt, ast.Call, ast.keyword)):
            return False
        child = a
    return False


# words in a dataset factory's arguments that say it splits the data per rank itself
_PER_RANK_ARGS = ("rank", "world", "shard", "num_replicas", "node")
_MAX_DEPTH = 4


def _built_here(m, expr: ast.AST | None, depth: int = 0) -> bool:
    """The loader's dataset is made in this file and not split per rank on the way: a constructor
    call (``TensorDataset(x, y)``), or a name assigned from one. A dataset that came in as a
    parameter or an attribute was made by a caller this file does not show, which may have sharded
    it already (``dataset.shard(world_size, rank)`` in the launcher): unknown, so not guilty."""
    if expr is None or depth > _MAX_DEPTH:
        return False
    if isinstance(expr, ast.Call):
        text = ast.unparse(expr).lower()
        # a factory that asks for the rank itself (`load_data(opt)` splitting its files by
        # `get_rank()`) builds each rank its own part
        return (
            not any(w in text for w in _PER_RANK_ARGS)
            and not callee_reads_rank(m, expr)
            # `data.load_data(opt, tokenizer)` with the rank kept on `opt` (`opt.local_rank`): the
            # function, not shown here, may load each rank its part
            and not hands_rank_carrier(m, expr)
            and not _inputs_fitted_to_the_world(m, expr)
            and not _told_distributed(expr)
        )
    if isinstance(expr, ast.Subscript):  # splits["train"], data[:n]
        return _built_here(m, expr.value, depth + 1)
    if not isinstance(expr, ast.Name):
        return False
    scope = m.enclosing_function(expr)
    if scope is not None and expr.id in {a.arg for a in ast.walk(scope.args) if isinstance(a, ast.arg)}:
        return False
    # (`train_set, val_set = random_split(data, [n, k])`: a part of what the call makes)
    values = [
        node.value
        for node in ast.walk(scope or m.tree)
        if isinstance(node, ast.Assign)
        and node.lineno < expr.lineno
        and any(
            isinstance(t, ast.Name) and t.id == expr.id
            or isinstance(t, ast.Tuple) and any(isinstance(e, ast.Name) and e.id == expr.id for e in t.elts)
            for t in node.targets
        )
    ]
    # a placeholder the real dataset replaces (`train_dataset = []`, then one per `--dataset` arm)
    values = [v for v in values if not _placeholder(v)]
    return bool(values) and all(_built_here(m, v, depth + 1) for v in values)


def _placeholder(v: ast.AST) -> bool:
    """``None``, ``[]``, ``{}``, ``()``: a name given nothing yet."""
    if isinstance(v, ast.Constant):
        return v.value is None
    return isinstance(v, (ast.List, ast.Tuple, ast.Dict)) and not getattr(v, "elts", getattr(v, "keys", None))


def _told_distributed(call: ast.Call) -> bool:
    """The dataset is told the run is distributed (``dataset_cls(..., multi_gpu=args.multi_gpu)``,
    ``load(cfg, distributed=True)``): it may well split itself per rank, so unknown."""
    words = [k.arg or "" for k in call.keywords]
    words += [(dotted(a) or "").rsplit(".", 1)[-1] for a in (*call.args, *(k.value for k in call.keywords))]
    return any(is_distributed_flag(w) or w.lower() in ("multi_gpu", "multigpu") for w in words if w)


def _inputs_fitted_to_the_world(m, call: ast.Call) -> bool:
    """A name handed to the dataset was cut by the rank or the world size on the way
    (`data = data[: len(data) // world_size * world_size]`): the author splits the data per rank,
    here or in the dataset, so unknown."""
    scope = m.enclosing_function(call) or m.tree
    assigns = [n for n in ast.walk(scope) if isinstance(n, ast.Assign) and n.lineno < call.lineno]
    names = {a.id for a in (*call.args, *(k.value for k in call.keywords)) if isinstance(a, ast.Name)}
    seen: set[str] = set()
    for _ in range(3):  # `aligned = n // world_size * world_size; data = data[:aligned]`: two steps
        names -= seen
        if not names:
            return False
        seen |= names
        values = [a.value for a in assigns if any(isinstance(t, ast.Name) and t.id in names for t in a.targets)]
        if any(w in ast.unparse(v).lower() for v in values for w in _PER_RANK_ARGS):
            return True
        names = {n.id for v in values for n in ast.walk(v) if isinstance(n, ast.Name)}
    return False


def _dataset(m, call: ast.Call) -> ast.AST | None:
    return call.args[0] if call.args else m.keyword(call, "dataset")


def check(m):
    if m.one_process:  # init_process_group(world_size=1): one process drives every GPU, nothing to split
        return
    # (a gather of objects needs a process group, whoever started it)
    gathers = m.dist_calls("all_gather_object", "gather_object")
    if not m.ddp_constructors and not m.dist_calls("init_process_group") and not gathers:
        return
    if _shards_somehow(m):
        return
    if not m.ddp_constructors:
        if m.dist_calls("init_process_group"):
            yield from _per_rank_results(m)
        if gathers:
            for loop, data, gather in _gathered_whole_passes(m):
                yield m.finding(
                    CODE,
                    loop.iter,
                    f"every rank loops over the whole of `{data.id}` and the ranks' "
                    f"results are then gathered (`{ast.unparse(gather.func)}`, line {gather.lineno}): "
                    "each rank does all the work, and the gathered list holds every item once per rank",
                    SEVERITY,
                    hint="give each rank its share first: a DistributedSampler, "
                    "`dataset.shard(num_shards=world_size, index=rank)` or `items[rank::world_size]`",
                )
        return
    for call in _unsharded_loaders(m):
        if m.looks_like_eval(call):
            continue
        given = m.keyword(call, "sampler")
        what = (
            "this DataLoader has no DistributedSampler"
            if given is None or m.is_none(given)
            else f"this DataLoader's sampler `{ast.unparse(given)}` draws from the whole dataset"
        )
        yield m.finding(
            CODE,
            call,
            f"{what} in a DDP script: every rank iterates the whole dataset",
            SEVERITY,
            hint="pass `sampler=DistributedSampler(dataset)` (and call set_epoch each epoch)",
        )
        return


def _unsharded_loaders(m):
    """DataLoaders every rank builds over a dataset this file makes, with no sampler of their own."""
    for call in m.calls_named("DataLoader"):
        if m.keyword(call, "batch_sampler") is not None or len(call.args) > 3:
            continue
        if m.is_none(m.keyword(call, "batch_size") or ast.Constant(1)):
            continue  # batch_size=None: the dataset yields whole batches itself, and such datasets shard
        if m.rank_guard(call) is not None or single_process_arm(m, call):
            continue  # one rank's loader (rank-0 evaluation), or the non-distributed branch
        if _built_here(m, _dataset(m, call)):
            yield call


_SAVES = ("save", "savez", "savez_compressed", "save_file", "to_csv", "to_parquet")


def _per_rank_results(m):
    """A distributed job without a DDP model (feature extraction, inference) whose every rank loops
    over a whole, unsharded loader and saves each batch's results to a file named by its rank: the
    names say each rank should produce its own part, but every rank produces all of it."""
    for call in _unsharded_loaders(m):
        for loop in passes(m, Flow(m, [call])):
            if not isinstance(loop, (ast.For, ast.AsyncFor)) or m.rank_guard(loop) is not None:
                continue
            if m.enclosing_function(loop) is not m.enclosing_function(call):
                continue  # names are matched without scopes: stay with the loader's own function
            save = next((c for c in _saves_in(loop) if _names_rank(m, c)), None)
            if save is None:
                continue
            yield m.finding(
                CODE,
                call,
                f"this DataLoader has no DistributedSampler, yet every rank loops over it (line "
                f"{loop.lineno}) and saves its results to a file named by its rank (line "
                f"{save.lineno}): each rank processes the whole dataset, so the work is done once per "
                "rank and the combined parts hold every item that many times",
                SEVERITY,
                hint="pass `sampler=DistributedSampler(dataset, shuffle=False)` so each rank takes "
                "its own share",
            )
            return


def _gathered_whole_passes(m):
    """A loop of every rank over a whole dataset this file loads (no sampler, no rank in sight) that
    collects its results in a list, which the ranks then gather (``dist.all_gather_object(out,
    predictions)``): every rank's part is all of it. Yields (the loop, the dataset's name, the gather)."""
    for gather in m.dist_calls("all_gather_object", "gather_object"):
        local = gather.args[1] if len(gather.args) > 1 else m.keyword(gather, "obj")
        if not isinstance(local, ast.Name):
            continue
        fn = m.enclosing_function(gather)
        for loop in m.nodes(ast.For):
            if m.enclosing_function(loop) is not fn or loop.lineno > gather.lineno or m.rank_guard(loop) is not None:
                continue
            if not _collects(loop, local.id) or _mentions_rank(m, loop):
                continue
            it = loop_root(loop.iter)
            if isinstance(it, ast.Name) and _built_here(m, it) and not _feeds_sampler(m, it.id, fn):
                yield loop, it, gather
                break


def _collects(loop: ast.AST, name: str) -> bool:
    """The loop adds to the list ``name`` (``name.append(x)``, ``name.extend(xs)``, ``name += xs``)."""
    for n in ast.walk(loop):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("append", "extend"):
            if isinstance(n.func.value, ast.Name) and n.func.value.id == name:
                return True
        if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id == name:
            return True
    return False


def _mentions_rank(m, loop: ast.AST) -> bool:
    """A rank or the world size appears in the loop's iterable or in a test inside it: the loop
    may take this rank's share only."""
    tests = [loop.iter, *(n.test for n in ast.walk(loop) if isinstance(n, (ast.If, ast.IfExp, ast.While)))]
    for t in tests:
        for n in ast.walk(t):
            if isinstance(n, (ast.Name, ast.Attribute)) and (m.rank_kind(n) is not None or names_world_size(n)):
                return True
    return False


def _feeds_sampler(m, name: str, fn) -> bool:
    """The name is handed to a sampler or a sharding call somewhere in the function."""
    scope = fn or m.tree
    for n in ast.walk(scope):
        if isinstance(n, ast.Call) and any(isinstance(a, ast.Name) and a.id == name for a in n.args):
            last = (dotted(n.func) or "").rsplit(".", 1)[-1].lower()
            if "sampler" in last or "shard" in last or "split" in last:
                return True
    return False


def _saves_in(loop) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(loop)
        if isinstance(n, ast.Call) and (dotted(n.func) or "").rsplit(".", 1)[-1] in _SAVES
    ]


def _names_rank(m, save: ast.Call) -> bool:
    """One of the save's arguments is a path built with the rank (``f"r{rank}_{i}.pth"``)."""
    for a in (*save.args, *(k.value for k in save.keywords)):
        if not isinstance(a, (ast.JoinedStr, ast.BinOp, ast.Call)):
            continue
        if any(
            isinstance(n, (ast.Name, ast.Attribute)) and m.rank_kind(n) is not None
            for n in ast.walk(a)
            if isinstance(n, (ast.Name, ast.Attribute))
        ):
            return True
    return False
