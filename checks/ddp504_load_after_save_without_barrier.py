"""DDP504: other ranks load right after a rank-0 save, with no barrier between.

## What it does
Using the per-rank interpreter, finds a `torch.save` that only rank 0 runs followed by a
`torch.load` of the same path on the other ranks, with no collective (barrier) that separates them.
Across functions (a trainer's save method and its load or evaluate method, a checkpoint manager's
`save()` and `load()`), it finds a rank-guarded save and an every-rank load of the same path where
neither the saving function ends with a barrier after the write nor the loading one starts with
one: reported at the load when this file calls the saving function, else at the save's rank test
(a `save()` API that returns at once on the other ranks while rank 0 still writes). Also the other
arm of the rank test itself (`if local_rank == 0: torch.save(w, p) else: while not
os.path.exists(p): sleep(1); torch.load(p)`): waiting for the file to exist is no barrier.
A load that comes first in program order (a resume at start-up, `fit()` loading before the loop
that saves) reads the previous run's file and is not reported; nor is one on the path a job takes
only when it is not distributed. One finding per load, naming every save it races with.

## Why is this bad?
Nothing makes the other ranks wait for rank 0 to finish writing: they read a missing, partial or
previous checkpoint. It usually works on a fast local disk and fails on a shared file system.

## Example
```python
if rank == 0:
    torch.save(model.module.state_dict(), path)
model.load_state_dict(torch.load(path, map_location=device))
```

## Use instead
```python
if rank == 0:
    torch.save(model.module.state_dict(), path)
dist.barrier()
model.load_state_dict(torch.load(path, map_location=device))
```
"""

from __future__ import annotations

import ast
import re

from ddpdoctor.script.interp import COLLECTIVES
from ddpdoctor.script.names import dotted
from ddpdoctor.script.ranks import reads_launcher_rank, single_process_only
from ddpdoctor.script.writers import enclosing_statements, guard_chains, one_rank_side, rank_guards, to_stream

CODE = "DDP504"
TITLE = "Load after a rank-0 save without a barrier"
KIND = "script"
SEVERITY = "error"
CONFIDENCE = "medium"
# why it is not in the default selection (benchmarks/lint_rule_precision.py on the labelled sets)
OPT_IN_BECAUSE = (
    "too little evidence and not enough precision: of its seven labelled reports on real code four "
    "are bugs and three are marked correct (precision 0.57, under the 0.95 a default rule needs)"
)
_SYNC = ("collective", "ddp_forward")


def _syncs_before(events, index: int) -> int:
    # a load past as many collectives as rank 0's save is in the same unsynchronised stretch
    return sum(1 for e in events[:index] if e.kind in _SYNC)


def _after(r0, i: int, load_node: ast.AST, save_node: ast.AST) -> bool:
    """The load comes after the save in program order: rank 0 itself reaches it after its save (a
    resume that every rank runs before training starts reads the previous run's file, not this one).
    A load rank 0 never reaches is placed by its line."""
    at = [k for k, e in enumerate(r0) if e.node is load_node]
    if at:
        return any(k > i for k in at)
    return load_node.lineno > save_node.lineno


_BARRIERS = ("barrier", "monitored_barrier", "wait_for_everyone")
# identifiers too common to tie a load to a save
_GENERIC = frozenset(
    [
        "self",
        "os",
        "path",
        "join",
        "str",
        "Path",
        "kwargs",
        "args",
        "get",
        "pop",
        "format",
        "cfg",
        "config",
        "opt",
        "file",
        "filename",
        "fname",
        "name",
        "dirname",
        "basename",
        "exists",
        "f",
        "p",
        "x",
        "map_location",
        "cpu",
        "device",
        "open",
    ]
)


_EXTENSIONS = frozenset(
    ["pt", "pth", "bin", "ckpt", "tar", "json", "pkl", "safetensors", "npy", "yaml", "yml", "txt"]
)


def _path_words(m, expr: ast.AST | None, fn) -> tuple[set[str], set[str]]:
    """The identifiers a path is built from, and the words of its string parts (``"rlhf"`` in
    ``f"{d}/rlhf_{n}.pth"``), through one level of this function's assignments."""
    if expr is None:
        return set(), set()
    parts = [expr]
    scope = fn if fn is not None else m.tree
    for name in [n.id for n in ast.walk(expr) if isinstance(n, ast.Name)]:
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets
            ):
                parts.append(node.value)
    words: set[str] = set()
    texts: set[str] = set()
    for part in parts:
        for n in ast.walk(part):
            if isinstance(n, ast.Name):
                words.add(n.id)
            elif isinstance(n, ast.Attribute):
                words.add(n.attr)
            elif isinstance(n, ast.Constant) and isinstance(n.value, str):
                texts |= {w for w in re.split(r"[^a-z0-9]+", n.value.lower()) if len(w) > 2}
    return {w for w in words if w not in _GENERIC and len(w) > 2}, texts - _EXTENSIONS


def _same_path(a: tuple[set[str], set[str]], b: tuple[set[str], set[str]]) -> bool:
    """Built from a shared name, and not from different literal names (``rlhf_`` vs ``full_sft_``)."""
    if a[1] and b[1] and not a[1] & b[1]:
        return False
    return bool(a[0] & b[0])


def _barrier_lines(m, fn) -> list[int]:
    out = []
    for call, q in m.calls:
        last = (q or dotted(call.func) or "").rsplit(".", 1)[-1]
        if last in _BARRIERS and m.enclosing_function(call) is fn:
            out.append(call.lineno)
    return out


def _in_file_callers(m, fn) -> list[ast.Call]:
    method = m.is_method(fn)
    out = []
    for c in m.call_sites(fn):
        if m.enclosing_function(c) is fn:
            continue
        if (
            isinstance(c.func, ast.Name)
            and not method
            or isinstance(c.func, ast.Attribute)
            and method
            and dotted(c.func.value) == "self"
        ):
            out.append(c)
    return out


def _construction(m, fn) -> set[int]:
    """The methods an instance runs while it is built: ``__init__`` of ``fn``'s class and what it
    calls as ``self.name(...)``, transitively (ids of their defs)."""
    cls = m.parents.get(fn)
    if not isinstance(cls, ast.ClassDef):
        return set()
    methods = {d.name: d for d in cls.body if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))}
    todo = [methods["__init__"]] if "__init__" in methods else []
    seen: set[int] = set()
    while todo:
        d = todo.pop()
        if id(d) in seen:
            continue
        seen.add(id(d))
        for c in ast.walk(d):
            if (
                isinstance(c, ast.Call)
                and isinstance(c.func, ast.Attribute)
                and dotted(c.func.value) == "self"
                and c.func.attr in methods
            ):
                todo.append(methods[c.func.attr])
    return seen


def _loads_first(m, fn_s, fn_l) -> bool:
    """The load runs while the object is built (a resume in ``__init__``/``setup``), the save only in
    a later method: within one run the load comes first, so it cannot read a half-written save."""
    built = _construction(m, fn_l)
    return id(fn_l) in built and id(fn_s) not in built


def _leads_to(m, node: ast.AST) -> dict[int, tuple[ast.AST, list[ast.AST]]]:
    """For the function holding ``node`` and each of its in-file callers, transitively: id(def) ->
    (def, the nodes in it that lead to ``node``: the node itself, or calls on the way to it)."""
    out: dict[int, tuple[ast.AST, list[ast.AST]]] = {}
    todo = [node]
    while todo:
        n = todo.pop()
        fn = m.enclosing_function(n) or m.tree  # the module's own body calls in order too
        if id(fn) in out:
            out[id(fn)][1].append(n)
            continue
        out[id(fn)] = (fn, [n])
        if fn is not m.tree:
            todo.extend(_in_file_callers(m, fn))
    return out


def _loops(m, node: ast.AST, fn: ast.AST) -> set[int]:
    out = set()
    for a in m.ancestors(node):
        if a is fn:
            break
        if isinstance(a, (ast.For, ast.AsyncFor, ast.While)):
            out.add(id(a))
    return out


def _never_called(m, fn: ast.AST) -> bool:
    """A top-level function of a script (it has its own ``__main__`` block, which does not reach
    the function) that the file never names outside its own body (no call, no callback) and, when
    linted with its project, no other file calls: dead code, no order to race."""
    if fn not in m.tree.body or not m.mentions("__main__"):
        return False
    if any(n.id == fn.name and not fn.lineno <= n.lineno <= fn.end_lineno for n in m.nodes(ast.Name)):
        return False
    return m.project is None or not m.project.callers(m.path, fn.name)


def _load_runs_first(m, save: ast.AST, load: ast.AST) -> bool:
    """A function of this file leads to both, and in each such function everything that leads to
    the load comes before everything that leads to the save, outside any loop around both
    (``fit()``: resume with ``load_ckp()``, then train, which saves): within one run the load
    reads the previous run's file, never this one's write. When no function of the file calls
    both, the order is the caller's and the pair stays a finding (``fit()`` then ``test()``)."""
    to_save, to_load = _leads_to(m, save), _leads_to(m, load)
    common = [k for k in to_load if k in to_save]
    if not common:
        return False
    for k in common:
        fn, at_load = to_load[k]
        at_save = to_save[k][1]
        for ln in at_load:
            for sv in at_save:
                if ln is sv:
                    # one call leads to both (`run()` calls `main`, which resumes, then trains): the
                    # order is decided further down, unless that call repeats
                    if _loops(m, ln, fn):
                        return False
                    continue
                if ln.lineno >= sv.lineno or _loops(m, ln, fn) & _loops(m, sv, fn):
                    return False
    return True


def _across_functions(m, saves, loads):
    """(where to report, the save, the load) for rank-guarded saves read by every rank elsewhere."""
    for save in saves:
        fn_s = m.enclosing_function(save)
        guards = rank_guards(m, save)
        if fn_s is None or not guards or not all(chain for chain in guard_chains(m, save)):
            continue
        if any(ln > save.lineno for ln in _barrier_lines(m, fn_s)):
            continue  # the saving function waits for the write before it returns
        s_words = _path_words(m, save.args[1] if len(save.args) > 1 else m.keyword(save, "f"), fn_s)
        for load in loads:
            fn_l = m.enclosing_function(load)
            if fn_l is None or fn_l is fn_s or rank_guards(m, load) or m.guarded_by_rank(load):
                continue
            if single_process_only(m, load):
                continue  # the path a job takes when it is not distributed: no other rank writes
            if _loads_first(m, fn_s, fn_l) or _load_runs_first(m, save, load):
                continue
            if _never_called(m, fn_l):
                continue  # a loader nothing here (nor, in a project, elsewhere) calls: no order to race
            if any(ln < load.lineno for ln in _barrier_lines(m, fn_l)):
                continue
            arg = load.args[0] if load.args else m.keyword(load, "f")
            if not _same_path(s_words, _path_words(m, arg, fn_l)):
                continue
            where = load if _in_file_callers(m, fn_s) else guards[-1]
            yield where, save, load
            break


def _waits_for_another_file(m, load, save) -> bool:
    """Before ``load``, its function waits in a loop for a path other than the one ``save`` writes
    (a ``.done`` marker the writer creates after the save): a handshake through the file system, not
    the race of waiting for the checkpoint itself to appear."""
    saved = save.args[1] if len(save.args) > 1 else next((k.value for k in save.keywords if k.arg == "f"), None)
    saved_text = ast.unparse(saved) if saved is not None else None
    fn = m.enclosing_function(load)
    for loop in m.nodes(ast.While):
        if loop.lineno < load.lineno and m.enclosing_function(loop) is fn:
            for c in ast.walk(loop.test):
                if isinstance(c, ast.Call) and (dotted(c.func) or "").rsplit(".", 1)[-1] in ("exists", "isfile"):
                    waited = c.args[0] if c.args else getattr(c.func, "value", None)
                    if waited is not None and ast.unparse(waited) != saved_text:
                        return True
    return False


def _other_arm_loads(m, saves, loads):
    """(the load, the save) where one ``if`` on the rank has the one rank write a file and its other
    arm, the one every other rank takes, read it with no barrier before (``if local_rank == 0:
    torch.save(emb, p) else: while not os.path.exists(p): sleep(1); torch.load(p)``): the file
    exists as soon as the write starts, so waiting for it is no barrier."""
    syncs = [c.lineno for c in m.dist_calls(*COLLECTIVES)]  # a collective from the writer: it is done
    for save in saves:
        if to_stream(m, save, save.args[1] if len(save.args) > 1 else m.keyword(save, "f")):
            continue  # into a buffer (sent by a broadcast), not a file
        for st in enclosing_statements(m, save):
            if not isinstance(st, ast.If) or st.test not in rank_guards(m, save):
                continue
            others = st.orelse if one_rank_side(m, st.test) == "body" else st.body
            if not others:
                continue
            lo, hi = others[0].lineno, others[-1].end_lineno or others[-1].lineno
            fn = m.enclosing_function(save)
            s_words = _path_words(m, save.args[1] if len(save.args) > 1 else m.keyword(save, "f"), fn)
            for load in loads:
                if not lo <= load.lineno <= hi or m.enclosing_function(load) is not fn:
                    continue
                if any(lo <= ln < load.lineno for ln in [*_barrier_lines(m, fn), *syncs]):
                    continue
                if _waits_for_another_file(m, load, save):
                    continue
                arg = load.args[0] if load.args else m.keyword(load, "f")
                if _same_path(s_words, _path_words(m, arg, fn)):
                    yield load, save
                    break


def check(m):
    if m.one_process:  # init_process_group(world_size=1): no other rank to collide with
        return
    if not m.calls_named("torch.save") or not m.calls_named("torch.load"):
        return
    if not m.uses_distributed and not m.mentions("rank") and not reads_launcher_rank(m):
        return
    reported: set[int] = set()
    for load, save in _other_arm_loads(m, m.calls_named("torch.save"), m.calls_named("torch.load")):
        reported.add(id(load))
        yield m.finding(
            CODE,
            load,
            f"the other ranks load this file while one rank writes it (line {save.lineno}) with no barrier "
            "between: the file exists as soon as the write starts, so they can read a partial checkpoint "
            f"({m.chain_text([save.lineno, load.lineno])})",
            SEVERITY,
            hint="call `dist.barrier()` after the write, on every rank, and load after it",
            chain=[save.lineno, load.lineno],
        )
    pairs = list(_across_functions(m, m.calls_named("torch.save"), m.calls_named("torch.load")))
    for where, save, load in pairs:
        if id(load) in reported or id(where) in reported:
            continue  # one finding per cause: the first save names it, the others are listed
        reported |= {id(load), id(where)}
        others = sorted({s.lineno for w, s, ld in pairs if s is not save and (ld is load or w is where)})
        also = f" (also the saves on lines {', '.join(map(str, others))})" if others else ""
        if where is load:
            msg = (
                f"every rank loads this file, which only one rank writes (line {save.lineno}{also}), and nothing "
                "between the two is a barrier: the others can read a partial or stale checkpoint "
                f"({m.chain_text([save.lineno, load.lineno])})"
            )
        else:
            msg = (
                f"the other ranks return from `{m.enclosing_function(save).name}` at once while this rank "
                f"is still writing (line {save.lineno}{also}), with no barrier; every rank loads it at line "
                f"{load.lineno}: a reader can get a partial or stale checkpoint "
                f"({m.chain_text([where.lineno, save.lineno, load.lineno])})"
            )
        yield m.finding(
            CODE,
            where,
            msg,
            SEVERITY,
            hint="call `dist.barrier()` after the rank-0 write (at the end of the saving function)",
            chain=[save.lineno, load.lineno],
        )

    for run in m.runs:
        if not run.complete:
            continue
        r0 = run.traces[0].events
        for i, save in enumerate(r0):
            if save.kind != "save" or save.arg is None or save.path is not None:
                continue  # (a save in another file of the project: its lines are not this file's)
            if any(e.node is save.node for t in run.traces[1:] for e in t.events):
                continue  # not a rank-0-only save
            c0 = _syncs_before(r0, i)
            for rank, t in enumerate(run.traces[1:], 1):
                for j, load in enumerate(t.events):
                    if (
                        load.kind == "load"
                        and load.path is None
                        and load.arg == save.arg
                        and _syncs_before(t.events, j) == c0
                        and _after(r0, i, load.node, save.node)
                        and not single_process_only(m, load.node)
                        and id(load.node) not in reported
                        and not _waits_for_another_file(m, load.node, save.node)
                    ):
                        reported.add(id(load.node))
                        yield m.finding(
                            CODE,
                            load.node,
                            f"rank {rank} loads `{load.arg}` while rank 0 may still "
                            f"be {'copying it into place' if save.op == 'copy' else 'saving it'} "
                            f"(line {save.node.lineno}): no barrier between them",
                            SEVERITY,
                            hint="call `dist.barrier()` after the rank-0 save",
                        )
