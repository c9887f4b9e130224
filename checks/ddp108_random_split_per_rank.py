"""DDP108: each rank draws its own random train/validation split before a DistributedSampler.

## What it does
Finds `random_split(dataset, lengths)` without a `generator=` (or scikit-learn's `train_test_split`
without a `random_state`) run by every rank of a script that starts the process group itself (or
is a distributed script with its own `__main__`), whose result (or a dataset built from it in the
same function) goes to a `DistributedSampler` or to a loader factory named for a distributed run
(`get_distributed_dataloader(train_set)`), also where the file's own helper splits (into a dict
of parts, too) and hands the parts back to the caller that shards them, in a file that never seeds the random state
(`torch.manual_seed`, `np.random.seed`, `seed_everything`, any call named for a seed) with a value
that is the same on every rank.

## Why is this bad?
`random_split` draws its permutation from the process's own random state. Unseeded (or seeded per
rank), every rank gets a different split, and the DistributedSampler then hands each rank a slice of
its *own* training set: the slices no longer partition one set — samples are trained on several
times or never, and some of one rank's validation items are another rank's training data.

## Example
```python
train_set, val_set = random_split(full, [n_train, n_val])
sampler = DistributedSampler(train_set)
```

## Use instead
```python
train_set, val_set = random_split(full, [n_train, n_val], generator=torch.Generator().manual_seed(42))
sampler = DistributedSampler(train_set)
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.loaders import sampler_calls
from ddpdoctor.script.names import dotted
from ddpdoctor.script.ranks import own_call_sites
from ddpdoctor.script.seeds import seeded_from_own_parameters

CODE = "DDP108"
TITLE = "Random split differs between ranks"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def check(m):
    # a helper module's caller may seed every rank alike before calling it: only a script that
    # starts the process group, or a distributed script with its own entry, is judged
    if not m.dist_calls("init_process_group") and not (m.distributed_context and m.mentions("__main__")):
        return
    splits = [c for c in m.calls_named("random_split") if not _seeded_split(m, c)]
    splits += [c for c in m.calls_named("sklearn.model_selection.train_test_split") if _unseeded_sklearn(m, c)]
    if not splits or _seeds_alike(m):
        return
    samplers = sampler_calls(m)
    for split in splits:
        if m.rank_guard(split) is not None:
            continue  # one rank splits (and would have to share it)
        fn = m.enclosing_function(split)
        sampler = _sharding(m, samplers, split, fn)
        if sampler is None and fn is not None and _returns(fn, _derived(split, fn)):
            # `train_ds, val_ds = load_dataset(path)`: the file's own helper hands the split back
            sampler = next(
                (s for site in own_call_sites(m, fn) if (s := _sharding(m, samplers, site, m.enclosing_function(site)))),
                None,
            )
        if sampler is None:
            continue
        what = "`random_split` without a generator" if _last(split) == "random_split" else (
            "`train_test_split` without a `random_state`"
        )
        by = (
            f"the DistributedSampler on line {sampler.lineno}"
            if sampler in samplers
            else f"the distributed loader `{_last(sampler)}(...)` on line {sampler.lineno}"
        )
        yield m.finding(
            CODE,
            split,
            f"{what} draws its own split on every rank, and {by} shards each rank's own training "
            "set: the shards do not partition one set, so samples repeat or go unseen and validation "
            "items leak into other ranks' training",
            SEVERITY,
            hint="pass `generator=torch.Generator().manual_seed(SEED)` (sklearn: `random_state=SEED`) "
            "with the same SEED on every rank",
        )


def _last(call: ast.Call) -> str:
    return (dotted(call.func) or "").rsplit(".", 1)[-1]


def _unseeded_sklearn(m, call: ast.Call) -> bool:
    state = m.keyword(call, "random_state")
    return state is None or m.is_none(state)


def _distributed_factories(m) -> list[ast.Call]:
    """Calls of another file's loader factory named for a distributed run
    (``get_distribued_dataloader(train_dataset, bs)``): it shards what it is given per rank."""
    out = []
    for call, _q in m.calls:
        low = _last(call).lower()
        if _last(call) in m.function_names or not ("loader" in low or "sampler" in low):
            continue
        if "distrib" in low or "ddp" in low:
            out.append(call)
    return out


def _seeded_split(m, call: ast.Call) -> bool:
    return m.keyword(call, "generator") is not None or len(call.args) > 2


def _seeds_alike(m) -> bool:
    """A seeding call whose value does not come from the rank: every rank starts from one state.
    A seed the file cannot see into (a helper named for it) counts as alike: unknown is not guilty."""
    for call, q in m.calls:
        name = (q or dotted(call.func) or "").rsplit(".", 1)[-1].lower()
        if "seed" not in name:
            continue
        args = [*call.args, *(k.value for k in call.keywords)]
        if seeded_from_own_parameters(m, call, args):
            continue  # `def set_seed(seed): torch.manual_seed(seed)`: its own calls say what the seed is
        if not any(
            isinstance(n, (ast.Name, ast.Attribute, ast.Call)) and m.rank_kind(n) is not None
            for a in args
            for n in ast.walk(a)
        ):
            return True
    return False


def _sharding(m, samplers: list[ast.Call], made: ast.Call, fn) -> ast.Call | None:
    """The DistributedSampler (or distributed loader factory) in ``fn`` given what ``made`` returns
    or a dataset built from it."""
    derived = _derived(made, fn if fn is not None else m.tree)
    return next(
        (
            s
            for s in [*samplers, *_distributed_factories(m)]
            if m.enclosing_function(s) is fn
            and any(_uses(a, derived) for a in [*s.args[:1], *(k.value for k in s.keywords if k.arg == "dataset")])
        ),
        None,
    )


def _returns(fn: ast.AST, names: set[str]) -> bool:
    return any(isinstance(r, ast.Return) and r.value is not None and _uses(r.value, names) for r in ast.walk(fn))


def _derived(split: ast.Call, scope: ast.AST) -> set[str]:
    """Names in ``scope`` that hold the split or a dataset built from it (``Wrapped(train_raw)``)."""
    names: set[str] = set()
    assigns = [n for n in ast.walk(scope) if isinstance(n, ast.Assign)]
    for _ in range(4):
        grew = False
        for a in assigns:
            if a.value is split or _uses(a.value, names):
                for t in a.targets:
                    for n in ast.walk(t):
                        # `parts[key] = ...`: the container holds it (its key is only read)
                        held = n.value if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) else None
                        if held is None and isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                            held = n
                        if held is not None and held.id not in names:
                            names.add(held.id)
                            grew = True
        if not grew:
            break
    return names


def _uses(e: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(e))
