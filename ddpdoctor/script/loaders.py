"""Samplers and the loaders that draw from them, as a file makes and uses them.

- ``sampler_calls(m)``: the calls that make a ``DistributedSampler``, also through a name that holds
  the class (``sampler_cls = RandomSampler if single else DistributedSampler``; ``sampler_cls(ds)``);
- ``made_by_factory(m, call)``: when the sampler is made inside a function of this file that returns
  it (``def data_sampler(ds, shuffle): return DistributedSampler(ds, shuffle=shuffle)``), the calls of
  that function, each with what its ``shuffle`` argument is there: the sampler is made where the
  factory is called, and that is where the shuffle is chosen;
- ``loader_calls(m, samplers)``: the ``DataLoader(...)`` calls given one of the samplers, the calls
  of the file's own ``DataLoader`` subclasses whose ``super().__init__`` gets it, and the calls of
  loader factories (``create_train_loader(ds, bs, batch_sampler=sampler)``) that get it by keyword;
- ``sharded_passes(m)``: the loops over a loader that draws from a ``DistributedSampler``: their items
  are the rank's own shard, whatever the loop does with them (train, evaluate);
- ``passes(m, loaders)``: the places that start a pass over a loader: ``for b in loader`` (also
  ``enumerate(loader)``), ``iter(loader)``, ``yield from loader`` (a generator that hands the
  batches on: ``while True: yield from loader`` starts a new pass each time round), and a loop over
  what an iteration wrapper made of it (``bar = tqdm(loader)``; ``for b in bar``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ddpdoctor.script.flow import Flow
from ddpdoctor.script.interp import is_accelerate_prepare
from ddpdoctor.script.names import dotted, name_words, names_a_loader, wraps_iteration
from ddpdoctor.script.ranks import hands_rank_carrier, own_call_sites
from ddpdoctor.script.values import bound_argument

_SAMPLER = "DistributedSampler"


def _is_class(m, e: ast.AST | None, name: str) -> bool:
    """``e`` names the class ``name`` (imported from torch, or unresolved under that name); also
    either arm of ``A if c else B`` and ``A or B``."""
    if isinstance(e, ast.IfExp):
        return _is_class(m, e.body, name) or _is_class(m, e.orelse, name)
    if isinstance(e, ast.BoolOp):
        return any(_is_class(m, v, name) for v in e.values)
    if not isinstance(e, (ast.Name, ast.Attribute)):
        return False
    q = m.qualname(e)
    return q == name or (q is not None and q.startswith("torch.") and q.endswith("." + name))


def sampler_calls(m) -> list[ast.Call]:
    # rules ask once per call of the file (DDP107): worked out once per file, a new list each time
    found = m.__dict__.get("_sampler_calls")
    if found is None:
        found = m.__dict__["_sampler_calls"] = _sampler_calls(m)
    return list(found)


# a project's own distributed sampler (``from distributed import DistributedSampler``, VITS'
# ``DistributedBucketSampler``): built like torch's, reshuffled by ``set_epoch`` like it
PROJECT_SAMPLER = re.compile(r"^Distributed\w*Sampler$")


def _project_sampler(m, call: ast.Call) -> bool:
    """A call of a project's ``Distributed...Sampler`` class asked to shuffle (``shuffle=True``, or a
    parameter of the function that makes it): whether its default shuffles is not known here."""
    last = (dotted(call.func) or "").rsplit(".", 1)[-1]
    if not PROJECT_SAMPLER.match(last) or (m.qualname(call.func) or "").startswith("torch."):
        return False
    shuffle = m.keyword(call, "shuffle")
    return shuffle is not None and not (isinstance(shuffle, ast.Constant) and not shuffle.value)


def _sampler_calls(m) -> list[ast.Call]:
    direct = m.calls_named(_SAMPLER) + [c for c, _q in m.calls if _sampler_factory(m, c) or _project_sampler(m, c)]
    direct = sorted({id(c): c for c in direct}.values(), key=lambda c: (c.lineno, c.col_offset))
    aliases = {
        dotted(t)
        for a in m.nodes(ast.Assign)
        if _is_class(m, a.value, _SAMPLER)
        for t in a.targets
        if isinstance(t, (ast.Name, ast.Attribute))
    }
    aliases.discard(None)
    if not aliases:
        return direct
    seen = {id(c) for c in direct}
    through = [c for c, _q in m.calls if id(c) not in seen and dotted(c.func) in aliases]
    return sorted((*direct, *through), key=lambda c: (c.lineno, c.col_offset))


def _sampler_factory(m, call: ast.Call) -> bool:
    """Another module's sampler factory told the run is distributed (`dist.data_sampler(dataset,
    shuffle=True, distributed=args.distributed)`): it hands back a DistributedSampler there."""
    last = (dotted(call.func) or "").rsplit(".", 1)[-1]
    if "sampler" not in last.lower() or last[:1].isupper() or last in m.function_names:
        return False
    told = [k for k in call.keywords if k.arg and k.arg.lower() in _DIST_FLAGS]
    return bool(told) and not any(isinstance(k.value, ast.Constant) and not k.value.value for k in told)


def made_by_factory(m, call: ast.Call) -> list[tuple[ast.Call, ast.AST | None]] | None:
    """(call of the factory, the ``shuffle`` it asks for there, None when not said) for each call of
    the file's function that makes and returns the sampler ``call``; None when ``call`` is not made
    in such a function."""
    fn = m.enclosing_function(call)
    if fn is None or None not in Flow(m, [call]).returns.get(fn.name, ()):
        return None
    sites = [s for s in own_call_sites(m, fn) if m.enclosing_function(s) is not fn]
    if not sites:
        return None
    shuffle = m.keyword(call, "shuffle")
    param = shuffle.id if isinstance(shuffle, ast.Name) else None
    if param not in {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}:
        return [(s, shuffle) for s in sites]
    out = []
    for s in sites:
        known, value = bound_argument(fn, s, param)
        out.append((s, value if known else None))
    return out


def _subclasses_loader(m, cls: ast.ClassDef) -> bool:
    return any(_is_class(m, b, "DataLoader") for b in cls.bases)


def _super_init(node: ast.AST) -> bool:
    """``super().__init__(...)`` or ``super(Cls, self).__init__(...)``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "__init__"
        and isinstance(node.func.value, ast.Call)
        and dotted(node.func.value.func) == "super"
    )


def _batch_samplers(m, samplers: Flow) -> Flow | None:
    """What holds a batch sampler built over one of the samplers (``BatchSampler(sampler, 32,
    drop_last=True)``, a project's ``GroupedBatchSampler(sampler, ...)``): a loader given it as
    ``batch_sampler=`` draws from the sampler."""
    made = [
        c
        for c, _q in m.calls
        if (dotted(c.func) or "").rsplit(".", 1)[-1].endswith("BatchSampler")
        and (samplers.carries(c.args[0] if c.args else None) or samplers.carries(m.keyword(c, "sampler")))
    ]
    return Flow(m, made) if made else None


def loader_calls(m, samplers: Flow) -> list[ast.Call]:
    batches = _batch_samplers(m, samplers)

    def draws(dl: ast.Call, keys: tuple[str, ...] = ("sampler",)) -> bool:
        if any(samplers.carries(m.keyword(dl, k)) for k in keys):
            return True
        return batches is not None and batches.carries(m.keyword(dl, "batch_sampler"))

    made = [dl for dl in m.calls_named("DataLoader") if draws(dl)]
    # a loader factory or a project's own loader class handed the sampler by keyword
    # (``build_loader(ds, bs, batch_sampler=sampler)``, ``DataSetIter(ds, sampler=sampler)``): what
    # it makes draws from the sampler, whatever it is called; a sampler that wraps the sampler is
    # _batch_samplers' question
    seen = {id(c) for c in made}
    made += [
        c
        for c, _q in m.calls
        if c.keywords  # (the sampler is handed by keyword: most calls have none)
        and id(c) not in seen
        and not (dotted(c.func) or "").endswith("Sampler")
        and draws(c, ("sampler", "batch_sampler"))
    ]
    own = set()
    for cls in m.nodes(ast.ClassDef):
        if _subclasses_loader(m, cls) and any(
            _super_init(n) and samplers.carries(m.keyword(n, "sampler")) for n in ast.walk(cls)
        ):
            own.add(cls.name)
    if own:
        made += [
            c for c, _q in m.calls if (name := dotted(c.func)) is not None and name.rsplit(".", 1)[-1] in own
        ]
    return made


def _wrapped(m, loaders: Flow) -> Flow | None:
    """The values an iteration wrapper made of one of the loaders, wrappers of those included."""
    def wraps(c: ast.Call, inner: set[int]) -> bool:
        if not wraps_iteration(c.func):  # bars and builtins (``bar = tqdm(enumerate(loader))``)
            return False
        return any(id(a) in inner or loaders.held(a) for a in c.args)

    inner: set[int] = set()
    for _ in range(2):  # tqdm(enumerate(loader)): the outer wrapper wraps the inner one
        inner |= {id(c) for c, _q in m.calls if wraps(c, inner)}
    seeds = [c for c, _q in m.calls if id(c) in inner]
    return Flow(m, seeds) if seeds else None


def passes(m, loaders: Flow) -> Iterator[ast.AST]:
    """Loops over one of the loaders (or over a progress bar or ``enumerate`` made of it), then
    ``iter(loader)`` calls and ``yield from loader`` (each starts a new pass)."""
    wrapped = _wrapped(m, loaders)
    for loop in m.nodes(ast.For, ast.AsyncFor):
        for n in ast.walk(loop.iter):
            if isinstance(n, (ast.Name, ast.Attribute, ast.Subscript)) and (
                loaders.held(n) or (wrapped is not None and wrapped.held(n))
            ):
                yield loop
                break
    for c, _q in m.calls:
        if isinstance(c.func, ast.Name) and c.func.id == "iter" and c.args and loaders.held(c.args[0]):
            yield c
    for y in m.nodes(ast.YieldFrom):
        if loaders.held(y.value):
            yield y


def loop_root(it: ast.AST) -> ast.AST:
    """What a loop iterates, under ``enumerate``/``tqdm``/``zip`` (``enumerate(loader)`` -> loader)."""
    while isinstance(it, ast.Call) and it.args and wraps_iteration(it.func):
        it = it.args[0]
    return it


def param_names(fn: ast.AST) -> set[str]:
    a = fn.args
    return {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}


def _steps(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("backward", "step")
        for n in ast.walk(node)
    )


def trains(m, loop: ast.AST) -> bool:
    """The loop trains: a backward or an optimizer step in it, or in the file's function it calls
    (not an evaluation over the same kind of loader)."""
    if _steps(loop):
        return True
    called = {(dotted(n.func) or "").rsplit(".", 1)[-1] for n in ast.walk(loop) if isinstance(n, ast.Call)}
    return any(fn.name in called and _steps(fn) for fn in m.functions)


# argument names that tell a loader factory the job is distributed
_DIST_FLAGS = frozenset(("distributed", "is_distributed", "ddp", "use_ddp", "is_ddp", "use_distributed", "dist"))


_LOADER_WORDS = frozenset(("dl", "dls"))  # short for a data loader: `get_train_and_val_dls_ddp`


def distributed_factory(m, call: ast.Call) -> bool:
    """Another module's loader factory made for a distributed run: told so (``get_dataloader(...,
    distributed=True)``, ``args.ddp``), named so (``get_dataset_distributed``, ``prepare_ddp_loader``)
    or handed the shard to make (the rank, with the world size unless it is named for a loader). Such
    a factory gives its loader a DistributedSampler. Not the file's own function, and not a class
    (``DistributedBucketingDataLoader(rank, world, ...)`` shards and reshuffles its own way)."""
    last = (dotted(call.func) or "").rsplit(".", 1)[-1]
    low = last.lower()
    loader = "loader" in low or bool({w.lower() for w in name_words(last)} & _LOADER_WORDS)
    if not (loader or "dataset" in low) or last[:1].isupper() or last in m.function_names:
        return False
    if any(
        k.arg and k.arg.lower() in _DIST_FLAGS and isinstance(k.value, ast.Constant) and not k.value.value
        for k in call.keywords
    ):
        return False  # `distributed=False`: told the opposite
    given = [*call.args, *(k.value for k in call.keywords)]
    flags = {(dotted(a) or "").rsplit(".", 1)[-1].lower() for a in given}
    flags |= {k.arg.lower() for k in call.keywords if k.arg}
    sharded = {"rank", "global_rank"} & flags and ({"world_size", "num_replicas"} & flags or loader)
    # handed the object the script keeps its rank on (`get_loader(args)` with `args.local_rank`)
    carried = loader and hands_rank_carrier(m, call)
    return bool(flags & _DIST_FLAGS or "distrib" in low or "ddp" in low or sharded or carried)


def sharded_passes(m) -> frozenset[int]:
    """Ids of the ``for`` loops over a loader given a ``DistributedSampler``: each rank iterates its
    own shard, so what the loop computes from its items (a validation loss, an accuracy) differs
    between ranks until a collective reduces it. A loop over a parameter (``def validate(model,
    loader)``) counts where a call of its function hands it such a loader: names are text in ``Flow``,
    and two functions' ``loader`` parameters are not one loader. Found once per file (four rules ask)."""
    cached = m.__dict__.get("_sharded_passes")
    if cached is None:
        cached = m.__dict__["_sharded_passes"] = _sharded_passes(m)
    return cached


def _prepared_loaders(m) -> dict[str, int]:
    """Names that hold a loader handed back by accelerate's ``accelerator.prepare(...)``
    (``model, opt, train_dl, val_dl = accelerator.prepare(model, opt, train_dl, val_dl)``): in a
    distributed run each process draws its own part of its batches -> the line it was bound."""
    out: dict[str, int] = {}
    for a in m.nodes(ast.Assign):
        call = a.value
        if not (isinstance(call, ast.Call) and is_accelerate_prepare(call)) or len(a.targets) != 1:
            continue
        target = a.targets[0]
        targets = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
        if len(targets) != len(call.args):
            continue
        for t, arg in zip(targets, call.args):
            name, given = dotted(t), dotted(arg)
            if name is not None and given is not None and names_a_loader(given):
                out[name] = a.lineno
    return out


def _reshuffled_loaders(m) -> dict[tuple[str, int], int]:
    """(loader name, id of its function) -> line for each ``loader.sampler.set_epoch(epoch)``
    (``batch_sampler`` too): whatever made the loader, its sampler is a DistributedSampler, which
    gives this rank its shard."""
    out: dict[tuple[str, int], int] = {}
    for call in m.method_calls("set_epoch"):
        recv = call.func.value if isinstance(call.func, ast.Attribute) else None
        if isinstance(recv, ast.Attribute) and recv.attr in ("sampler", "batch_sampler"):
            name = dotted(recv.value)
            if name is not None:
                out.setdefault((name, id(m.enclosing_function(call))), call.lineno)
    return out


def _sharded_passes(m) -> frozenset[int]:
    samplers = sampler_calls(m)
    sharded = loader_calls(m, Flow(m, samplers)) if samplers else []
    # a loader from another module's factory made for the distributed run is sharded there
    sharded += [c for c, _q in m.calls if distributed_factory(m, c)]
    prepared = _prepared_loaders(m)
    reshuffled = _reshuffled_loaders(m)
    if not sharded and not prepared and not reshuffled:
        return frozenset()
    out = set()
    for loop in m.nodes(ast.For, ast.AsyncFor):
        # a loop in the function that reshuffles its loader's sampler: a DistributedSampler's shard
        root = loop_root(loop.iter)
        if (dotted(root), id(m.enclosing_function(loop))) in reshuffled:
            out.add(id(loop))
    if not sharded and not prepared:
        return frozenset(out)
    flow = Flow(m, sharded, prepared)
    wrapped = _wrapped(m, flow)  # `progress_bar = tqdm(loader)`, then `for b in enumerate(progress_bar)`
    for loop in passes(m, flow):
        if not isinstance(loop, (ast.For, ast.AsyncFor)):
            continue
        root = loop_root(loop.iter)
        if not flow.held(root) and not (wrapped is not None and isinstance(root, ast.Name) and wrapped.held(root)):
            continue  # ``range(len(loader))`` counts the batches: the same on every rank
        fn = m.enclosing_function(loop)
        if fn is not None and isinstance(root, ast.Name) and root.id in param_names(fn) and root.id not in prepared:
            root = root.id
            bound = [bound_argument(fn, site, root) for site in own_call_sites(m, fn)]
            if not any(known and flow.carries(arg) for known, arg in bound):
                continue
        out.add(id(loop))
    return frozenset(out)
