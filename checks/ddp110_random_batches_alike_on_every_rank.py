"""DDP110: every rank draws its batches at random from a random state seeded alike.

## What it does
Finds a batch drawn by random positions into the data (`ix = torch.randint(len(data) - block,
(batch_size,))` then `data[i:i + block] for i in ix`, also `np.random.randint`, `randperm`,
`random.sample`) in a script that wraps a model in DDP or FSDP and trains it, where nothing makes
the draw differ between ranks: the random state is seeded with the same value on every rank
(`torch.manual_seed(cfg.seed)`) or, for torch, never seeded at all (its default seed is one fixed
number in every process), the data is not chosen by rank, and the function that draws reads no
rank. A seed that comes from the rank (`torch.manual_seed(1337 + seed_offset)`), a `generator=`,
or a seeding helper of another module (it may add the rank) keeps it quiet; so does an unseeded
NumPy or Python `random` state, which each process seeds from the operating system.

## Why is this bad?
Every rank computes the same positions and trains on the same batch at every step. DDP averages
identical gradients: N GPUs do the work of one, and the run sees 1/N of the data it was meant to.
nanoGPT offsets the seed by the rank (`seed_offset = ddp_rank`) for exactly this reason; forks that
drop the offset keep training, silently, on duplicate batches.

## Example
```python
torch.manual_seed(args.seed)
def get_batch(data):
    ix = torch.randint(len(data) - block_size, (batch_size,))
    return torch.stack([data[i:i + block_size] for i in ix])
```

## Use instead
```python
torch.manual_seed(args.seed + dist.get_rank())   # each rank its own draws
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.names import dotted
from ddpdoctor.script.nodes import walk
from ddpdoctor.script.seeds import seeded_from_own_parameters

CODE = "DDP110"
TITLE = "Random batches alike on every rank"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

# drawing calls by the random state they read
_DRAWS = {
    "torch.randint": "torch",
    "torch.randperm": "torch",
    "numpy.random.randint": "numpy",
    "numpy.random.choice": "numpy",
    "numpy.random.permutation": "numpy",
    "random.randint": "random",
    "random.randrange": "random",
    "random.sample": "random",
    "random.choice": "random",
    "random.choices": "random",
}
# seeding calls by the random states they set (libraries' helpers seed all three)
_SEEDS = {
    "torch.manual_seed": ("torch",),
    "torch.random.manual_seed": ("torch",),
    "numpy.random.seed": ("numpy",),
    "random.seed": ("random",),
    "transformers.set_seed": ("torch", "numpy", "random"),
    "transformers.trainer_utils.set_seed": ("torch", "numpy", "random"),
    "lightning.seed_everything": ("torch", "numpy", "random"),
    "pytorch_lightning.seed_everything": ("torch", "numpy", "random"),
    "lightning.pytorch.seed_everything": ("torch", "numpy", "random"),
    "lightning_fabric.utilities.seed.seed_everything": ("torch", "numpy", "random"),
    "accelerate.utils.set_seed": ("torch", "numpy", "random"),
}


def check(m):
    if not (m.ddp_constructors or m.mentions("FullyShardedDataParallel", "fully_shard")):
        return
    if not m.mentions(".backward("):
        return
    for call, q in m.calls:
        family = _DRAWS.get(q or "")
        if family is None or m.keyword(call, "generator") is not None:
            continue
        fn = m.enclosing_function(call)
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or _reads_rank(m, fn):
            continue
        data = _indexed_data(call, fn)
        if data is None or _data_by_rank(m, fn, data) or _from_a_loader(fn, data):
            continue
        if not _every_step(m, call, fn):
            continue  # a one-time draw (a train/validation split seeded alike is what one wants)
        seeded = _seeding(m, family)
        if seeded is None:
            continue
        how = (
            f"every rank seeds it alike (line {seeded.lineno})"
            if isinstance(seeded, ast.Call)
            else "nothing seeds torch's random state, whose default seed is the same in every process"
        )
        yield m.finding(
            CODE,
            call,
            f"`{ast.unparse(call.func)}(...)` draws the positions of the batch in `{data}`, and {how}: "
            "every rank trains on the same batch at every step",
            SEVERITY,
            hint="seed each rank differently (`torch.manual_seed(seed + rank)`), or shard the data by rank",
        )
        return  # one draw per file: the seed is the one cause


def _every_step(m, call: ast.Call, fn: ast.AST) -> bool:
    """The draw is repeated: in a loop of its function, or the function is called in a loop."""
    if any(isinstance(a, (ast.For, ast.While, ast.AsyncFor)) for a in _ancestors_within(m, call, fn)):
        return True
    return any(
        any(isinstance(a, (ast.For, ast.While, ast.AsyncFor)) for a in m.ancestors(site)) for site in m.call_sites(fn)
    )


def _ancestors_within(m, node: ast.AST, fn: ast.AST):
    for a in m.ancestors(node):
        if a is fn:
            return
        yield a


def _from_a_loader(fn: ast.AST, name: str) -> bool:
    """``name`` is made in ``fn`` from a batch drawn with ``next(...)`` (a loader's, sharded by rank):
    shuffling it is not choosing the data."""
    names, assigns = {name}, [n for n in walk(fn) if isinstance(n, ast.Assign)]
    for _ in range(4):
        for a in assigns:
            if any(isinstance(t, ast.Name) and t.id in names for tt in a.targets for t in walk(tt)):
                if any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "next" for c in walk(a.value)):
                    return True
                names |= _names(a.value)
    return False


def _reads_rank(m, fn: ast.AST) -> bool:
    """The drawing function reads a rank somewhere (`ix_list[ddp_rank]`, an offset by rank)."""
    return any(
        isinstance(n, (ast.Name, ast.Attribute, ast.Call)) and m.rank_kind(n) is not None for n in walk(fn)
    )


def _indexed_data(call: ast.Call, fn: ast.AST) -> str | None:
    """The name of the data the drawn positions index: ``data[ix]`` or ``data[i:i + n] for i in ix``
    with ``ix`` the draw, or ``data[<draw>]``."""
    held: set[str] = set()
    for n in walk(fn):
        if isinstance(n, ast.Assign) and n.value is call:
            held.update(t.id for t in n.targets if isinstance(t, ast.Name))
    for n in walk(fn):
        if isinstance(n, (ast.For, ast.comprehension)) and _names(n.iter) & held and isinstance(n.target, ast.Name):
            held.add(n.target.id)
    for n in walk(fn):
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name):
            inside = {x for x in walk(n.slice)}
            if call in inside or _names(n.slice) & held:
                return n.value.id
    return None


def _names(e: ast.AST) -> set[str]:
    return {n.id for n in walk(e) if isinstance(n, ast.Name)}


def _data_by_rank(m, fn, name: str) -> bool:
    """The data is chosen per rank: bound in ``fn`` from a rank, or a parameter some caller hands a
    rank-dependent value (``get_batch(shards[rank])``); unknown callers are not guilty."""
    for n in walk(fn):
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
            if any(m.rank_kind(x) is not None for x in walk(n.value) if isinstance(x, (ast.Name, ast.Attribute, ast.Call))):
                return True
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]
    if name not in params:
        return False
    index = params.index(name) - (1 if params and params[0] in ("self", "cls") else 0)
    for site in m.call_sites(fn):
        args = [*site.args[index : index + 1], *(k.value for k in site.keywords if k.arg == name)]
        if any(
            m.rank_kind(x) is not None
            for a in args
            for x in walk(a)
            if isinstance(x, (ast.Name, ast.Attribute, ast.Call))
        ):
            return True
    return False


def _seeding(m, family: str):
    """The seeding call every rank makes alike for ``family``'s random state; True when nothing
    seeds torch's (its default seed is fixed); None when some seed may differ by rank, or when an
    unseeded NumPy or ``random`` state (seeded from the OS in each process) is drawn from."""
    found = None
    for call, q in m.calls:
        name = (q or dotted(call.func) or "").rsplit(".", 1)[-1].lower()
        if "seed" not in name or isinstance(call.func, ast.Attribute) and call.func.attr in ("seed_worker",):
            continue
        families = _SEEDS.get(q or "")
        args = [*call.args, *(k.value for k in call.keywords)]
        if families is None:
            if _own_def(m, call) is None:
                return None  # another module's seeding helper: it may add the rank
            families = ("torch", "numpy", "random")
        if family not in families:
            continue
        if m.keyword(call, "device_specific") is not None:
            return None  # accelerate's `set_seed(seed, device_specific=True)` adds the process index
        if seeded_from_own_parameters(m, call, args):
            continue  # `def set_seed(seed): torch.manual_seed(seed)`: its callers say what the seed is
        if any(
            isinstance(x, (ast.Name, ast.Attribute, ast.Call)) and m.rank_kind(x) is not None
            for a in args
            for x in walk(a)
        ):
            return None
        own = _own_def(m, call)
        if own is not None and _reads_rank(m, own):
            return None  # the file's own helper adds the rank inside
        found = found or call
    if found is not None:
        return found
    return True if family == "torch" else None


def _own_def(m, call: ast.Call):
    if not isinstance(call.func, ast.Name):
        return None
    return next((f for f in m.functions if f.name == call.func.id), None)
