"""DDP511: a folder made by one rank, written into by every rank with nothing in between to wait for it.

## What it does
Finds `os.makedirs(d)` (`os.mkdir`, `Path(d).mkdir()`) under a rank test that lets one rank through
(`if rank == 0:`), followed in the same function by a write every rank makes into that folder
(`np.save(os.path.join(d, ...))`, `torch.save(x, f"{d}/...")`, `open(os.path.join(d, ...), "w")`,
an image or table saved there), when nothing between them makes the other ranks wait for the one
that creates it: no barrier, no collective, no DDP step, no call of the file's own that could hold
one. A folder every rank also creates (`os.makedirs(d, exist_ok=True)` outside the test), writes
under the same kind of rank test, and a folder made before the workers are spawned are left alone.
Also a rank test whose one rank makes something (a folder, a download, an output tree:
`os.makedirs`, `build_output(...)`) while the other ranks sleep a fixed time for it (`else:
time.sleep(3)`): a guess at how long the work takes, not a wait.
A helper module that only takes the rank as a parameter (`def save_checkpoint(d, step, state, rank=0)`)
is checked too where every rank then writes a file of its own into the folder (`optim_rank{rank}.pt`).

## Why is this bad?
The other ranks do not wait for rank 0: a rank that reaches its first write before rank 0 has made
the folder fails with `FileNotFoundError` (more often on a fresh output path, and always on another
node whose file system rank 0 never touches). It works when rank 0 happens to be first, so it fails
now and then.

## Example
```python
if rank == 0:
    os.makedirs(args.features_path, exist_ok=True)
for x, name in loader:                       # every rank, its own shard
    np.save(os.path.join(args.features_path, f"{name}.npy"), encode(x))
```

## Use instead
```python
os.makedirs(args.features_path, exist_ok=True)   # every rank: exist_ok makes it safe
# or: if rank == 0: os.makedirs(...)  then  dist.barrier()
```
"""

from __future__ import annotations

import ast

from ddpdoctor.script.interp import COLLECTIVES
from ddpdoctor.script.names import dotted, name_words
from ddpdoctor.script.writers import in_spawning_parent, one_rank_side, per_process_path, rank_guards

CODE = "DDP511"
TITLE = "Folder made by one rank, written into by every rank without waiting"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

# writes that need their folder to exist (what makes its own folder, a SummaryWriter, is not one)
_SAVES_FILE_FIRST = frozenset(("numpy.save", "numpy.savez", "numpy.savez_compressed", "cv2.imwrite", "imageio.imwrite"))
_SAVE_METHODS = frozenset(("savefig", "to_csv", "to_json", "to_parquet", "save_image"))
# names of calls that make the ranks wait for one another
_WAITS = ("barrier", "synchronize", "wait_for_everyone", "all_reduce", "all_gather", "broadcast", "gather",
          "reduce", "backward", "main_process_first", "zero_first")


def _made_folder(m, call: ast.Call, q: str | None) -> ast.AST | None:
    f = call.func
    if q in ("os.makedirs", "os.mkdir"):
        return call.args[0] if call.args else None
    if isinstance(f, ast.Attribute) and f.attr == "mkdir" and (dotted(f.value) or "").split(".")[0] not in m.aliases:
        return f.value
    return None


def _write_path(m, call: ast.Call, q: str | None) -> ast.AST | None:
    """The path a write needs the folder of, for the writes this rule knows."""
    f = call.func
    last = (q or dotted(f) or "").rsplit(".", 1)[-1]
    if q == "torch.save":
        return call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "f"), None)
    if q in _SAVES_FILE_FIRST or last == "save_image":
        return call.args[0] if q in _SAVES_FILE_FIRST and call.args else (call.args[1] if len(call.args) > 1 else None)
    if q == "open" and call.args:
        mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
        if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax"):
            return call.args[0]
        return None
    if last in _SAVE_METHODS and isinstance(f, ast.Attribute) and call.args:
        return call.args[0]
    return None


def _inside(m, path: ast.AST, folder: str, fn) -> bool:
    """The path is built from the folder's expression (also through a name assigned from it earlier
    in the function: ``out = os.path.join(d, name)``)."""
    if any(ast.dump(n) == folder for n in ast.walk(path)):
        return True
    if isinstance(path, ast.Name):
        for st in ast.walk(fn):
            if (
                isinstance(st, ast.Assign)
                and st.lineno < path.lineno
                and any(isinstance(t, ast.Name) and t.id == path.id for t in st.targets)
                and any(ast.dump(n) == folder for n in ast.walk(st.value))
            ):
                return True
    return False


def _may_wait(m, call: ast.Call, depth: int = 0) -> bool:
    """The call may make this rank wait for the others: a torch.distributed call, a barrier or
    collective of a helper, a backward pass, a DDP model built, or the file's own function that
    holds one."""
    q = m.qualname(call.func) or ""
    name = (dotted(call.func) or "").rsplit(".", 1)[-1].lower()
    last = q.rsplit(".", 1)[-1]
    if (q.startswith("torch.distributed") and not last.startswith(("get_", "is_"))) or last in COLLECTIVES:
        return True  # (asking the rank or the world size waits for nobody)
    if any(w in name for w in _WAITS) or "distributeddataparallel" in q.lower() or name in ("ddp", "fsdp"):
        return True
    if depth < 2:
        for fn in m.functions:
            if fn.name == name and any(
                isinstance(c, ast.Call) and _may_wait(m, c, depth + 1) for c in ast.walk(fn)
            ):
                return True
    return False


# calls named for making what the other ranks then use: a folder, a download, an output tree
_MAKING_WORDS = frozenset(("makedirs", "mkdir", "make", "create", "build", "download", "prepare", "extract"))


def _sleeps(m, st: ast.stmt) -> bool:
    """``time.sleep(3)`` as a statement of its own."""
    return (
        isinstance(st, ast.Expr)
        and isinstance(st.value, ast.Call)
        and (m.qualname(st.value.func) or dotted(st.value.func) or "").rsplit(".", 1)[-1] == "sleep"
    )


def _sleeps_instead_of_waiting(m):
    """``if rank == 0: os.makedirs(d) else: time.sleep(3)``: one rank makes something and the others
    sleep a fixed time for it, a guess at how long it takes, instead of waiting for it."""
    if not m.mentions("sleep"):
        return
    for node in m.nodes(ast.If):
        if not any(_sleeps(m, st) for st in (*node.body, *node.orelse)) or not m.is_rank_guard(node.test):
            continue  # (the cheap test first: most files test the rank often and sleep never)
        side = one_rank_side(m, node.test)
        if side is None:
            continue
        one, others = (node.body, node.orelse) if side == "body" else (node.orelse, node.body)
        sleep = next(
            (st.value for st in others if _sleeps(m, st)),
            None,
        )
        if sleep is None:
            continue
        making = next(
            (
                c
                for st in (one or others)
                for c in ast.walk(st)
                if isinstance(c, ast.Call)
                and c is not sleep
                and any(w.lower() in _MAKING_WORDS for w in name_words((dotted(c.func) or "").rsplit(".", 1)[-1]))
            ),
            None,
        )
        if making is None:
            continue
        yield m.finding(
            CODE,
            sleep,
            f"the other ranks sleep a fixed `{ast.unparse(sleep)[:30]}` (rank test "
            f"`{ast.unparse(node.test)[:40]}`, line {node.test.lineno}) while one rank runs "
            f"`{ast.unparse(making.func)[:40]}` (line {making.lineno}), instead of waiting for it: on a slow "
            "or shared file system, or on another node, they go on before it is done",
            SEVERITY,
            hint="let every rank wait with `dist.barrier()` after the one rank's work (the others call it "
            "in the other arm), or make the folder on every rank with `exist_ok=True`",
            chain=[node.test.lineno, making.lineno, sleep.lineno],
        )


def check(m):
    if m.one_process:
        return
    yield from _sleeps_instead_of_waiting(m)
    # a helper module that only takes the rank (`def save_checkpoint(d, ..., rank=0)`) is written for
    # several processes when every rank writes its own file into the folder (`optim_rank{rank}.pt`)
    distributed = m.distributed_context or m.uses_distributed
    made = [(c, q, p) for c, q in m.calls if (p := _made_folder(m, c, q)) is not None]
    if not made:
        return
    # folders every rank makes itself (`os.makedirs` makes the parents too: `makedirs(join(d, x))`
    # makes `d` on the rank that calls it)
    everyone = [(c, p) for c, _q, p in made if not rank_guards(m, c)]
    writes = [(c, p) for c, q in m.calls if (p := _write_path(m, c, q)) is not None]
    for call, _q, folder in made:
        tests = rank_guards(m, call)
        key = ast.dump(folder)
        if not tests or in_spawning_parent(m, call) or any(ast.dump(p) == key for _c, p in everyone):
            continue
        fn = m.enclosing_function(call) or m.tree
        test = tests[-1]
        guard = next((a for a in m.ancestors(call) if isinstance(a, ast.If) and a.test is test), None)
        if guard is None:
            continue  # (an early `return` on the other ranks: they write nothing after it here)
        end = guard.end_lineno or guard.lineno
        for write, path in writes:
            if write.lineno <= end or (m.enclosing_function(write) or m.tree) is not fn:
                continue
            if rank_guards(m, write) or not _inside(m, path, key, fn):
                continue
            if not distributed and not per_process_path(path, m):
                continue
            if any(c.lineno < write.lineno and _inside(m, p, key, fn) for c, p in everyone):
                continue  # the writing rank makes a folder inside it first, and with it the folder
            between = [
                c for c in ast.walk(fn) if isinstance(c, ast.Call) and end < c.lineno < write.lineno
            ]
            if any(_may_wait(m, c) for c in between):
                break
            yield m.finding(
                CODE,
                call,
                f"only the ranks that pass `{ast.unparse(test)[:40]}` (line {test.lineno}) make "
                f"`{ast.unparse(folder)[:40]}`, and every rank writes into it at line {write.lineno} "
                "with nothing in between that waits for them: a rank that gets there first fails "
                "with FileNotFoundError (always on another node)",
                SEVERITY,
                hint="make the folder on every rank (`os.makedirs(d, exist_ok=True)`), or call "
                "`dist.barrier()` after making it",
                chain=[test.lineno, call.lineno, write.lineno],
            )
            break
