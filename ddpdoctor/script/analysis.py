"""ModuleAnalysis: one parsed file and everything rules ask of it, computed once and lazily.

Rules get a ModuleAnalysis and return Findings. Cheap facts (aliases, the list of calls with their
qualified names, parents) come from one walk; the per-rank traces (ddpdoctor.script.interp) are only
computed when a rule asks for ``runs``.
"""

from __future__ import annotations

import ast
import builtins
import re
import sys
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ddpdoctor.core.report import Finding, Location, Severity
from ddpdoctor.script import ranks as rank_facts
from ddpdoctor.script.interp import (
    COLLECTIVES,
    P2P,
    ClassRef,
    FuncRef,
    Interpreter,
    ModuleContext,
    Trace,
    module_defs,
)
from ddpdoctor.script.names import (
    APEX_DDP,
    calls_base_init,
    collect_aliases,
    dist_op,
    dotted,
    name_words,
    names_a_ddp_wrapper,
    names_one_rank_function,
    names_training,
    qualify,
    turns_grad_off,
    wraps_for_data_parallel,
    wraps_iteration,
)
from ddpdoctor.script.nodes import child_fields as _child_fields
from ddpdoctor.script.nodes import may_show_any, walk
from ddpdoctor.script.sync_calls import imported_libraries, sync_call

DEFAULT_WORLD_SIZES = (2, 3, 4, 5, 6, 7, 8)
MAX_FILE_STEPS = 60_000  # interpreter statements per file; beyond it, later entry points are skipped
ENTRY_SIZES = 3  # functions walked as their own entry point use the first 3 world sizes
_LOCALHOST = ("localhost", "127.0.0.1", "::1")
# torch's own distributed test harness: its test cases start every rank as a process on this host
_TORCH_TEST_HARNESS = (
    "torch.testing._internal.common_distributed",
    "torch.testing._internal.common_fsdp",
    "torch.testing._internal.distributed",
)
_WORLD_NAMES = {"world_size", "WORLD_SIZE", "nprocs", "NPROCS", "num_processes", "n_procs", "num_procs"}
# keywords of DistributedDataParallel.__init__ that no other common constructor takes: a call that
# passes one builds a DDP model (a subclass or a thin wrapper of it)
_DDP_ONLY_KEYWORDS = frozenset(
    ("broadcast_buffers", "find_unused_parameters", "bucket_cap_mb", "gradient_as_bucket_view", "static_graph")
)
RANKISH = ("rank", "master", "main_process", "is_main", "global_zero", "rank_zero", "rank0", "is_local_main")


def _through_self_attribute(func: ast.AST) -> bool:
    """``self.x.f`` (or deeper): a call on an object the instance holds, not on the instance."""
    if not isinstance(func, ast.Attribute):
        return False
    head = dotted(func.value)
    return head is not None and head.startswith("self.")


# The words of a name (`dataset_train_val`, `TestSet`, `val_dl`), and those that name an evaluation split.
_EVAL_WORDS = frozenset(("val", "valid", "validation", "dev", "holdout"))

# keywords whose text names the split a loader is built for
_SPLIT_KEYWORDS = ("mode", "split", "phase", "stage", "subset")


def names_eval_split(words: str) -> bool:
    """Names that say a validation/test split (``val_loader``, ``get_eval_data_loader``, ``testset``),
    not the training one (``dataset_train_val``)."""
    tokens = {t.lower() for t in name_words(words)}
    if "train" in tokens or "training" in tokens:
        return False  # `dataset_train_val`: the training split (with its validation part)
    return bool(tokens & _EVAL_WORDS) or any(
        t.startswith(("test", "eval", "val")) and not t.startswith("valu") for t in tokens
    )  # `valset`, `testloader`, `evalset`; not `values`


# Frameworks' launchers that call init_process_group for the script: every rank runs what follows.
_GROUP_STARTERS = (
    "deepspeed.init_distributed",
    "colossalai.launch",
    "colossalai.launch_from_torch",
    "colossalai.launch_from_slurm",
    "colossalai.launch_from_openmpi",
    "accelerate.Accelerator",  # (started by `accelerate launch` or torchrun: it joins the group)
)

# The names projects give their own "start the process group" helper (`utils.init_distributed_mode`,
# `ddp_setup`, `setup_dist`, DPR's `setup_for_distributed_mode`): a script that calls one imported
# from elsewhere is a training script.
# names of "how many GPUs": a process group sized by one is this machine's
_GPU_COUNT_NAMES = frozenset(("num_gpus", "n_gpus", "n_gpu", "ngpus", "ngpu", "gpu_count", "num_gpu", "nb_gpus"))
_SETUP_HELPER = re.compile(
    r"(?:init|setup)_?(?:for_)?(?:dist|distributed|ddp)(?:_mode|_training|_env|_process_group)?"
    r"|(?:dist|distributed|ddp)_?(?:setup|init)"
)


@dataclass
class _Place:
    """A line to report at when no node of this file is at hand."""

    lineno: int
    col_offset: int = 0


@dataclass
class Run:
    """Every rank's trace for one entry point (the module, or a function never reached from it)."""

    entry: str
    world_size: int
    traces: list[Trace]

    @property
    def complete(self) -> bool:
        return not any(t.truncated for t in self.traces)


def _env_unset_test(test: ast.AST) -> bool:
    """``"NODE_RANK" not in os.environ``: a test that the launcher set no such variable, so what it
    guards is a default for a run by hand (``if "NODE_RANK" not in os.environ: MASTER_ADDR =
    "localhost"``), not the only way the script runs."""
    return (
        isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotIn)
        and dotted(test.comparators[0]) in ("os.environ", "environ")
    )


def _literal_keywords(e: ast.AST) -> dict[str, ast.AST]:
    """The string keys a dict literal or ``dict(...)`` call gives, with their values (a ``**``
    spread in it is not followed); {} for anything else."""
    if isinstance(e, ast.Dict):
        return {k.value: v for k, v in zip(e.keys, e.values) if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    if isinstance(e, ast.Call) and dotted(e.func) == "dict":
        return {k.arg: k.value for k in e.keywords if k.arg is not None}
    return {}


# libraries, not the project: their `import *` brings no project helper, their predicates are no
# project's rank test (the standard library and the numeric stack)
_LIBRARY_ROOTS = frozenset(sys.stdlib_module_names) | {"torch", "numpy", "pylab", "matplotlib", "scipy", "sympy"}


class ModuleAnalysis:
    project = None  # the ddpdoctor.lint.project.Project of the files linted together, if several

    def __init__(self, path: str, source: str, tree: ast.Module, world_sizes=DEFAULT_WORLD_SIZES):
        self.path = path
        self.source = source
        self.tree = tree
        self.configured_world_sizes = tuple(world_sizes)
        # one walk over the tree: the nodes rules look for, by type (parents only when a rule asks)
        self.by_type: dict[type, list[ast.AST]] = {}
        by_type = self.by_type
        per_class: dict[type, tuple] = {}  # class -> (append to its list, its child fields): one lookup
        stack: list = [tree]
        pop, push, extend = stack.pop, stack.append, stack.extend
        AST = ast.AST
        while stack:
            node = pop()
            cls = node.__class__
            entry = per_class.get(cls)
            if entry is None:
                if not isinstance(node, AST):
                    continue  # a name or constant in a field not listed in _SCALAR_FIELDS, a None key
                nodes = by_type[cls] = []
                entry = per_class[cls] = (nodes.append, _child_fields(cls))
            entry[0](node)
            for name in entry[1]:
                v = getattr(node, name, None)
                if v.__class__ is list:
                    extend(v)
                elif v is not None:  # an absent optional child
                    push(v)
        for nodes in by_type.values():
            nodes.reverse()  # the stack walk pops the last child first; restore source order within a type
        self.aliases = collect_aliases(self.nodes(ast.Import, ast.ImportFrom))
        self._module_renames(tree)
        self.calls: list[tuple[ast.Call, str | None]] = [
            (n, qualify(dotted(n.func), self.aliases)) for n in by_type.get(ast.Call, [])
        ]
        self.functions = self.nodes(ast.FunctionDef, ast.AsyncFunctionDef)

    def _module_renames(self, tree: ast.Module) -> None:
        """``th = torch`` at the top of the file: one more name for an imported module (or one of
        its attributes), bound once and never again there."""
        bound: dict[str, list] = {}
        for st in tree.body:
            for t in st.targets if isinstance(st, ast.Assign) else ():
                if isinstance(t, ast.Name):
                    bound.setdefault(t.id, []).append(st.value)
        for name, values in bound.items():
            if len(values) != 1 or name in self.aliases:
                continue
            text = dotted(values[0])
            if text and text.split(".", 1)[0] in self.aliases:
                self.aliases[name] = qualify(text, self.aliases)

    def nodes(self, *types: type) -> list:
        out: list = []
        for t in types:
            out.extend(self.by_type.get(t, ()))
        return out

    # -- names and places ---------------------------------------------------------------------
    def qualname(self, expr: ast.AST) -> str | None:
        return qualify(dotted(expr), self.aliases)

    @cached_property
    def parents(self) -> dict[ast.AST, ast.AST]:
        """Each node's parent (operator and context singletons, shared by many nodes, have none)."""
        # by_type already holds every node the walk in __init__ reached (the same child fields): a
        # pass over those lists, class by class, instead of a second walk of the tree with its stack
        out: dict[ast.AST, ast.AST] = {}
        AST = ast.AST
        for cls, nodes in self.by_type.items():
            fields = _child_fields(cls)
            if not fields:
                continue  # (Name, Constant, ...: no children)
            for node in nodes:
                for name in fields:
                    v = getattr(node, name, None)
                    if v is None:
                        continue
                    if v.__class__ is list:
                        for child in v:
                            if isinstance(child, AST):
                                out[child] = node
                    elif isinstance(v, AST):
                        out[v] = node
        return out

    @cached_property
    def _method_ids(self) -> frozenset[int]:
        return frozenset(
            id(st)
            for c in self.nodes(ast.ClassDef)
            for st in c.body
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef))
        )

    @cached_property
    def function_names(self) -> frozenset[str]:
        return frozenset(fn.name for fn in self.functions)

    @cached_property
    def plain_functions(self) -> list:
        """The file's functions outside any class: what a bare ``name(...)`` can call (a method of
        the same name is reached only through its object)."""
        return [fn for fn in self.functions if id(fn) not in self._method_ids]

    @cached_property
    def plain_function_names(self) -> frozenset[str]:
        return frozenset(fn.name for fn in self.plain_functions)

    @cached_property
    def _star_modules(self) -> tuple[str, ...]:
        """The project modules this file takes every name of (``from utils import *``); a library's
        (torch, numpy, os, ...) is left out: its names are not the project's helpers."""
        return tuple(
            node.module or "."
            for node in self.nodes(ast.ImportFrom)
            if any(a.name == "*" for a in node.names)
            and (node.level or (node.module or "").split(".", 1)[0] not in _LIBRARY_ROOTS)
        )

    @cached_property
    def _bound_names(self) -> frozenset[str]:
        """Every name this file binds: assigned, a parameter, a def or class, imported by name."""
        out = {n.id for n in self.nodes(ast.Name) if not isinstance(n.ctx, ast.Load)}
        out.update(a.arg for a in self.nodes(ast.arg))
        out.update(d.name for d in self.nodes(ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        out.update(self.aliases)
        return frozenset(out)

    def star_imported(self, name: str) -> bool:
        """``name`` is used here, bound nowhere in the file and not a builtin, and the file takes
        every name of a project module (``from utils import *``): it is that module's."""
        return bool(self._star_modules) and name not in self._bound_names and not hasattr(builtins, name)

    def in_plain_arm(self, call: ast.AST, owner: str | None = None) -> bool:
        """``call`` (``X.state_dict()``, ``X(batch)``) sits in the arm of an ``if`` whose other arm
        takes ``X`` out of its wrapper (``if args.multi_gpu: X.module...``): the author unwraps
        exactly where ``X`` is wrapped, so here ``X`` is the plain model. (Asked once per event of
        every per-rank trace: remembered per node.)
        ``owner``: the object to look for (``self.model`` for ``self.model.format_batch(...)``);
        by default the call's own receiver for ``state_dict``/``forward``, else the called name."""
        if not isinstance(call, (ast.Call, ast.Attribute)):
            return False
        memo = self.__dict__.setdefault("_plain_arm", {})
        key = (id(call), owner)
        found = memo.get(key)
        if found is None:
            found = memo[key] = self._in_plain_arm(call, owner)
        return found

    def _in_plain_arm(self, call: ast.AST, owner: str | None) -> bool:
        if owner is None and isinstance(call, ast.Call):
            f = call.func
            owner = dotted(f.value if isinstance(f, ast.Attribute) and f.attr in ("state_dict", "forward") else f)
        if owner is None or not self.mentions(".module"):
            return False
        child = call
        for a in self.ancestors(call):
            if isinstance(a, (ast.If, ast.IfExp)):
                body = a.body if isinstance(a, ast.If) else [a.body]
                orelse = a.orelse if isinstance(a, ast.If) else [a.orelse]
                other = body if any(child is s for s in orelse) else orelse if any(child is s for s in body) else []
                if any(
                    isinstance(n, ast.Attribute) and n.attr == "module" and dotted(n.value) == owner
                    for st in other
                    for n in walk(st)
                ):
                    return True
            if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return False
            child = a
        return False

    def is_method(self, fn: ast.AST | None) -> bool:
        """A def straight in a class body (without building the parent map)."""
        return fn is not None and id(fn) in self._method_ids

    @cached_property
    def _functions_by_body(self) -> tuple[list, list[tuple[int, int]], list[tuple[int, int]], list[int]]:
        """The defs sorted by where their bodies start, those starts (for bisect), their ends, and
        for each the index of the nearest earlier def that ends no sooner (-1: none)."""
        fns = sorted(self.functions, key=lambda f: (f.body[0].lineno, f.body[0].col_offset))
        ends = [(f.end_lineno, f.end_col_offset) for f in fns]
        before: list[int] = []
        stack: list[int] = []
        for i, e in enumerate(ends):
            while stack and ends[stack[-1]] < e:
                stack.pop()
            before.append(stack[-1] if stack else -1)
            stack.append(i)
        return fns, [(f.body[0].lineno, f.body[0].col_offset) for f in fns], ends, before

    @cached_property
    def lines(self) -> list[str]:
        return self.source.splitlines()

    @cached_property
    def shadowed_defs(self) -> list[tuple[int, int]]:
        """(first, last line) of each def that a later def of the same name in the same module or
        class body replaces before anything can call it: dead code (RepVGG's utils.py defines
        ``load_checkpoint`` twice; only the second is ever called). Decorated defs are kept
        (``@overload``, ``@x.setter`` and ``@f.register`` make a second def meaningful)."""
        out = []
        for body in [self.tree.body, *(c.body for c in self.nodes(ast.ClassDef))]:
            last: dict[str, ast.AST] = {}
            for st in body:
                if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    last[st.name] = st
            for st in body:
                if (
                    isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                    and last[st.name] is not st
                    and not st.decorator_list
                    and not last[st.name].decorator_list
                ):
                    out.append((st.lineno, st.end_lineno or st.lineno))
        return out

    def ancestors_below(self, node: ast.AST, scope: ast.AST | None) -> list[ast.AST]:
        """The ancestors of ``node``, nearest first, up to (not including) ``scope``."""
        out = []
        for a in self.ancestors(node):
            if a is scope:
                break
            out.append(a)
        return out

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        p = self.parents.get(node)
        while p is not None:
            yield p
            p = self.parents.get(p)

    def enclosing_function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The innermost def whose body holds the node, by position (no parent map needed)."""
        start = (node.lineno, node.col_offset)
        end = (getattr(node, "end_lineno", None) or node.lineno, getattr(node, "end_col_offset", None) or 0)
        fns, starts, ends, before = self._functions_by_body
        # defs whose body starts after the node cannot hold it; of the others, the one that starts
        # last and still reaches past the node's end is the innermost. When def i does not hold it,
        # every def between before[i] and i ends sooner than i, so none does either: skip them (a
        # module-level node in a big file would otherwise try every def above it)
        i = bisect_right(starts, start) - 1
        while i >= 0:
            fn = fns[i]
            if fn is not node and ends[i] >= end:
                return fn
            i = before[i]
        return None

    def finding(
        self,
        code: str,
        node: ast.AST,
        message: str,
        severity: str = "error",
        hint: str | None = None,
        **evidence,
    ) -> Finding:
        return Finding(
            code=code,
            severity=Severity.parse(severity),
            message=message,
            hint=hint,
            evidence=evidence,
            location=Location(
                path=self.path,
                line=getattr(node, "lineno", 1),
                col=getattr(node, "col_offset", 0) + 1,
                end_line=getattr(node, "end_lineno", None),
                end_col=(node.end_col_offset + 1)
                if getattr(node, "end_col_offset", None) is not None
                else None,
            ),
        )

    def keyword(self, call: ast.Call, name: str) -> ast.AST | None:
        splat = None
        for k in call.keywords:  # (a plain loop: asked a quarter of a million times on torch's tree)
            if k.arg == name:
                return k.value
            if k.arg is None:
                splat = k.value
        if splat is None:
            return None
        given = self._splat_cache.get(id(call))
        if given is None:
            given = self._splat_cache[id(call)] = self._splatted(call, splat)
        return given.get(name)

    @cached_property
    def _splat_cache(self) -> dict[int, dict[str, ast.AST]]:
        return {}

    def _splatted(self, call: ast.Call, splat: ast.AST) -> dict[str, ast.AST]:
        """The keywords a ``**kwargs`` splat gives: from a dict literal, ``dict(...)``, or the dict a
        name holds as built before the call in the same function (``kw = {"sampler": s}``,
        ``kw["sampler"] = s``, ``kw.update({"sampler": s})``); the last one written wins. Keys it
        cannot read are left out."""
        if not isinstance(splat, ast.Name):
            return _literal_keywords(splat)
        scope = self.enclosing_function(call) or self.tree
        given: dict[str, ast.AST] = {}
        before = [n for n in walk(scope) if isinstance(n, (ast.Assign, ast.Call)) and n.lineno < call.lineno]
        for node in sorted(before, key=lambda n: (n.lineno, n.col_offset)):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id == splat.id:
                        given = _literal_keywords(node.value)  # a new dict: what came before is gone
                    elif (
                        isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == splat.id
                        and isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str)
                    ):
                        given[t.slice.value] = node.value
            elif (
                isinstance(node.func, ast.Attribute) and node.func.attr == "update"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == splat.id
            ):
                given.update(_literal_keywords(node.args[0]) if node.args else {})
                given.update({k.arg: k.value for k in node.keywords if k.arg is not None})
        return given

    def keyword_is(self, call: ast.Call, name: str, value: object) -> bool:
        v = self.keyword(call, name)
        return isinstance(v, ast.Constant) and v.value is value

    @staticmethod
    def is_none(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value is None

    def assigned_to(self, node: ast.AST) -> str | None:
        """``loader`` for ``loader = DataLoader(...)`` (also ``self.loader``)."""
        p = self._assignment_of.get(id(node))
        if isinstance(p, ast.Assign) and len(p.targets) == 1:
            return dotted(p.targets[0])
        if isinstance(p, ast.AnnAssign):
            return dotted(p.target)
        return None

    @cached_property
    def _assignment_of(self) -> dict[int, ast.AST]:
        """id of each child of an assignment (its targets and value; an annotated one's annotation
        too) -> the assignment: what ``parents`` says of those nodes, without building the parent
        map of the whole file for assigned_to, which rules ask of nearly every file."""
        out: dict[int, ast.AST] = {}
        for a in self.nodes(ast.Assign):
            for t in a.targets:
                out[id(t)] = a
            out[id(a.value)] = a
        for a in self.nodes(ast.AnnAssign):
            for child in (a.target, a.annotation, a.value):
                if child is not None:
                    out[id(child)] = a
        return out

    def looks_like_eval(self, call: ast.Call) -> bool:
        """A validation/test loader or sampler, by the names it is built from."""
        words = (self.assigned_to(call) or "") + " " + (ast.unparse(call.args[0]) if call.args else "")
        words += " " + " ".join(
            ast.unparse(k.value) for k in call.keywords if k.arg in ("dataset", "data_source")
        )
        # `build_data_loader(cfg, mode="validate")`: the split named by a keyword's text
        words += " " + " ".join(
            k.value.value
            for k in call.keywords
            if k.arg in _SPLIT_KEYWORDS and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)
        )
        # made in `def _get_validate_data(self):` and handed back: the function says the split
        fn = self.enclosing_function(call)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and names_eval_split(fn.name):
            return True
        return names_eval_split(words)

    def without_grad(self, node: ast.AST) -> bool:
        """``node`` runs under ``torch.no_grad()`` / ``inference_mode``: a ``with`` around it in its
        function, or a decorator of that function."""
        for a in self.ancestors(node):
            if isinstance(a, (ast.With, ast.AsyncWith)) and any(turns_grad_off(i.context_expr) for i in a.items):
                return True
            if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return any(turns_grad_off(d) for d in a.decorator_list)
        return False

    def enclosing_loop(self, node: ast.AST) -> ast.AST | None:
        for a in self.ancestors(node):
            if isinstance(a, (ast.For, ast.AsyncFor, ast.While)):
                return a
            if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return None
        return None

    def statement_in_block(self, node: ast.AST) -> tuple[ast.stmt | None, list | None]:
        """The statement holding ``node`` and the statement list it sits in."""
        child = node
        for a in self.ancestors(node):
            for field_name in ("body", "orelse", "finalbody"):
                block = getattr(a, field_name, None)
                if isinstance(block, list) and child in block:
                    return child, block
            child = a
        return None, None

    def loader_names(self) -> set[str]:
        out = set()
        for call in self.calls_named("DataLoader"):
            name = self.assigned_to(call)
            if name:
                out.add(name)
        return out

    def iterates_loader(self, it: ast.AST, loaders: set[str]) -> bool:
        """The ``for`` iterates a loader itself, maybe through ``enumerate``/``tqdm``/``zip``; not a
        ``range(loader.sampler.epoch, n)`` that only reads an attribute of one."""
        stack = [it]
        while stack:
            e = stack.pop()
            if isinstance(e, ast.Call):
                if wraps_iteration(e.func):
                    stack.extend(e.args)
                continue
            name = dotted(e) if isinstance(e, (ast.Name, ast.Attribute)) else None
            if name and (name in loaders or "loader" in name.rsplit(".", 1)[-1].lower()):
                return True
        return False

    @cached_property
    def env_writes(self) -> list[tuple[str, ast.AST | None, ast.AST, str]]:
        """(variable, value node, where, how) for ``os.environ[K] = v``, ``.setdefault``, ``.update``,
        ``putenv``."""
        out = []
        for node in self.nodes(ast.Assign):
            if True:
                for t in node.targets:
                    if (
                        isinstance(t, ast.Subscript)
                        and self.qualname(t.value) == "os.environ"
                        and isinstance(t.slice, ast.Constant)
                        and isinstance(t.slice.value, str)
                    ):
                        out.append((t.slice.value, node.value, node, "assign"))
        for call, q in self.calls:
            if q in ("os.environ.setdefault", "os.putenv") and len(call.args) == 2:
                key = call.args[0]
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    out.append(
                        (
                            key.value,
                            call.args[1],
                            call,
                            "setdefault" if q.endswith("setdefault") else "assign",
                        )
                    )
            elif q == "os.environ.update" and call.args and isinstance(call.args[0], ast.Dict):
                for k, v in zip(call.args[0].keys, call.args[0].values):
                    if isinstance(k, ast.Constant) and isinstance(k.value, str):
                        out.append((k.value, v, call, "assign"))
        return out

    def call_sites(self, fn: ast.AST) -> list[ast.Call]:
        cls = self.parents.get(fn)
        if isinstance(cls, ast.ClassDef) and getattr(fn, "name", None) == "__init__":
            return list(self._calls_by_last_name.get(cls.name, ()))  # `Logger(...)` runs its __init__
        sites = list(self._calls_by_last_name.get(getattr(fn, "name", None), ()))
        if isinstance(cls, ast.ClassDef):
            # a method is not called through another object the instance holds: in a Trainer,
            # `self.model.train()` is nn.Module.train, not Trainer.train
            sites = [c for c in sites if not _through_self_attribute(c.func)]
        else:
            # a function outside any class is called by its name, or through a module that imports
            # it: `model.train()` beside `def train(rank, ...)` is nn.Module.train
            sites = [
                c
                for c in sites
                if not isinstance(c.func, ast.Attribute)
                or (dotted(c.func.value) or "").split(".", 1)[0] in self.aliases
            ]
        return sites

    def callers_all_guarded(self, fn: ast.AST) -> bool:
        """Every call of this file's function ``fn`` sits under a rank guard (and there is at least one)."""
        sites = self.call_sites(fn)
        return bool(sites) and all(self.guarded_by_rank(c) for c in sites)

    def reach(self, node: ast.AST) -> list[tuple[Run, set[int]]]:
        """For each complete run that reaches ``node``: the ranks that reach it."""
        return self._reach_index.get(id(node), [])

    @cached_property
    def _reach_index(self) -> dict[int, list[tuple[Run, set[int]]]]:
        out: dict[int, list[tuple[Run, set[int]]]] = {}
        for run in self.runs:
            if not run.complete:
                continue
            per_node: dict[int, set[int]] = {}
            for r, t in enumerate(run.traces):
                for e in t.events:
                    per_node.setdefault(id(e.node), set()).add(r)
            for key, ranks in per_node.items():
                out.setdefault(key, []).append((run, ranks))
        return out

    # -- facts rules share --------------------------------------------------------------------
    def calls_named(self, *names: str) -> list[ast.Call]:
        """Calls whose qualified name is one of ``names`` or a torch name ending in one of them."""
        at: set[int] = set()
        for n in names:
            at.update(self._calls_by_qualname.get(n, ()))
            if "." not in n:
                at.update(self._torch_calls_by_last.get(n, ()))
        calls = self.calls
        return [calls[i][0] for i in sorted(at)]  # in source order, as self.calls

    def dist_calls(self, *ops: str) -> list[ast.Call]:
        return [node for node, op in self._dist_calls if op in ops]

    def method_calls(self, attr: str) -> list[ast.Call]:
        return list(self._calls_by_method.get(attr, ()))

    # Rules ask these questions many times per file (a thousand calls_named over a file's 5000
    # calls): each index is built in one pass over self.calls, the first time it is needed.
    @cached_property
    def _calls_by_qualname(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for i, (_node, q) in enumerate(self.calls):
            if q is not None:
                out.setdefault(q, []).append(i)
        return out

    @cached_property
    def _torch_calls_by_last(self) -> dict[str, list[int]]:
        """torch names by their last component (see names.is_torch_name)."""
        out: dict[str, list[int]] = {}
        for q, at in self._calls_by_qualname.items():
            if q.startswith("torch.") or q in APEX_DDP:
                out.setdefault(q.rsplit(".", 1)[-1], []).extend(at)
        return out

    @cached_property
    def _dist_calls(self) -> list[tuple[ast.Call, str]]:
        """(call, operation) for the calls of torch.distributed functions, in source order."""
        return [(node, op) for node, q in self.calls if (op := dist_op(q)) is not None]

    @cached_property
    def _calls_by_method(self) -> dict[str, list[ast.Call]]:
        out: dict[str, list[ast.Call]] = {}
        for node, _q in self.calls:
            if isinstance(node.func, ast.Attribute):
                out.setdefault(node.func.attr, []).append(node)
        return out

    @cached_property
    def _calls_by_last_name(self) -> dict[str, list[ast.Call]]:
        """Calls by the last part of the called name (``f``, ``x.f`` and ``self.f`` under "f")."""
        out: dict[str, list[ast.Call]] = {}
        for node, _q in self.calls:
            name = dotted(node.func)
            if name is not None:
                out.setdefault(name.rsplit(".", 1)[-1], []).append(node)
        return out

    @cached_property
    def ddp_constructors(self) -> list[ast.Call]:
        return self.calls_named("DistributedDataParallel")

    @cached_property
    def uses_distributed(self) -> bool:
        """The file sets up or uses torch.distributed (a training script or library doing DDP)."""
        return bool(
            self.dist_calls("init_process_group", *COLLECTIVES, *P2P, "get_rank", "get_world_size")
            or self.ddp_constructors
        )

    @cached_property
    def distributed_context(self) -> bool:
        """Every rank of a distributed job runs this file's code, as far as it shows: it creates the
        group or the DDP model, calls torch.distributed, or is the trainer of such a job (it imports
        DistributedDataParallel or DistributedSampler, builds an accelerate Accelerator, uses
        Horovod, wraps its model in DDP through a helper or subclass)."""
        if self.uses_distributed or self.ddp_wrapper_calls or self._calls_setup_helper:
            return True  # (a project's helper that starts the group: `init_distributed_mode(args)`)
        if self.calls_named("torch.nn.SyncBatchNorm.convert_sync_batchnorm"):
            return True  # batch norm synchronised across ranks: the model trains in a distributed job
        if any(
            c.args and rank_facts.strict_rank_kind(self, c.args[0]) == rank_facts.LOCAL
            for c in self.calls_named("torch.cuda.set_device")
        ):
            return True  # the device of the launcher's local rank (`--local_rank`, LOCAL_RANK): one of many
        markers = (".DistributedDataParallel", ".DistributedSampler", "accelerate.Accelerator")
        return (
            any(v.endswith(markers) or v.startswith("horovod") for v in self.aliases.values())
            or bool(self.calls_named("DistributedSampler"))
            or bool(self.calls_named("accelerate.Accelerator"))  # (`import accelerate` then `accelerate.Accelerator()`)
            or self._tests_imported_rank
            or self._shows_sharded_run
        )

    @cached_property
    def _shows_sharded_run(self) -> bool:
        """The file runs on every rank of a job set up elsewhere: it reads the launch flag of
        pytorch/examples' ImageNet script (``args.multiprocessing_distributed``), or it tells a
        sampler the epoch (``self.train_sampler.set_epoch(epoch)``, a DistributedSampler's kind made
        in another module) and tests the rank."""
        if any(a.attr == "multiprocessing_distributed" for a in self.nodes(ast.Attribute)):
            return True
        reseeds = any(
            "sampler" in ((dotted(c.func.value) or "").rsplit(".", 1)[-1].lower())
            for c in self.method_calls("set_epoch")
            if isinstance(c.func, ast.Attribute)
        )
        # (a bucketing sampler of a one-GPU recipe is told the epoch too: a rank test says more ranks)
        return reseeds and any(rank_facts.guard_kind(self, n.test) is not None for n in self.nodes(ast.If))

    @cached_property
    def _tests_imported_rank(self) -> bool:
        """A rank test on another module's rank getter (``if comm.get_rank() == 0:``, a project's
        ``comm`` module that its ``launch(...)`` starts the group for): the file is written to run
        on every rank of a job, though the group starts out of sight."""
        own = self.function_names
        for test in self.nodes(ast.Compare):
            left = test.left
            if not (isinstance(left, ast.Call) and isinstance(left.func, ast.Attribute)):
                continue
            if left.func.attr in ("get_rank", "get_local_rank") and (dotted(left.func.value) or "") not in own:
                if any(isinstance(c, ast.Constant) and c.value == 0 for c in test.comparators):
                    return True
        # or the project's main-process predicate, imported (`from utils.distributed import
        # is_main_process` ... `if is_main_process():`, `if misc.is_main_process():`)
        for node in self.nodes(ast.If):
            for c in walk(node.test):
                if not isinstance(c, ast.Call) or c.args:
                    continue
                name = dotted(c.func) or ""
                q = self.qualname(c.func) or ""
                last = name.rsplit(".", 1)[-1]
                if (
                    last not in own
                    and q != name  # imported: `from m import f`, or `m.f` with `m` imported
                    and q.split(".", 1)[0] not in _LIBRARY_ROOTS
                    and rank_facts.predicate_name_kind(last) is not None
                ):
                    return True
        return False

    @cached_property
    def one_process(self) -> bool:
        """Every process group this file starts has ``world_size=1`` (a constant): the job is one
        process (old single-process DDP over all GPUs), so nothing is written or loaded by several
        ranks at once."""
        inits = self.dist_calls("init_process_group")
        if not inits:
            return False
        for call in inits:
            size = self.keyword(call, "world_size")
            if not (isinstance(size, ast.Constant) and size.value == 1 and not isinstance(size.value, bool)):
                return False
        return True

    @cached_property
    def single_node(self) -> bool:
        """Every process of the job runs on this machine, so the global rank is the local one: the
        file pins its rendezvous here (``MASTER_ADDR = "localhost"``, ``tcp://127.0.0.1:...``), or it
        is a test built on torch's multi-process harness (``torch.testing._internal``'s
        ``MultiProcessTestCase``, ``DTensorTestBase``, ...), which starts its ranks on one host."""
        for key, value, node, how in self.env_writes:
            local = isinstance(value, ast.Constant) and str(value.value) in _LOCALHOST
            if key == "MASTER_ADDR" and how == "assign" and local and not self._fallback_only(node, key):
                if not self._in_dead_function(node):
                    return True
        for call in self.dist_calls("init_process_group"):
            init = self.keyword(call, "init_method")
            # a string literal in it names this host (also `'tcp://127.0.0.1:{}'.format(port)`)
            if init is not None and any(
                isinstance(n, ast.Constant) and isinstance(n.value, str) and any(h in n.value for h in _LOCALHOST)
                for n in walk(init)
            ):
                return True
        if any(self._spawns_whole_world(c) for c in rank_facts.spawn_calls(self)):
            return True
        if self._world_of_this_machines_gpus() or self._world_capped_by_gpus():
            return True
        return any(v.startswith(_TORCH_TEST_HARNESS) for v in self.aliases.values())

    def _in_dead_function(self, node: ast.AST) -> bool:
        """``node`` is in a top-level function of a script (it has a ``__main__`` block) that nothing
        in the file calls or names (``def setup(): os.environ["MASTER_ADDR"] = "localhost"`` left
        behind, its call commented out): it never runs, so what it pins says nothing of the launch."""
        fn = self.enclosing_function(node)
        if fn is None or fn not in self.tree.body:
            return False
        if not any(
            isinstance(st, ast.If) and "__main__" in ast.unparse(st.test) for st in self.tree.body
        ):
            return False  # a module: another file may call it
        return not any(
            (isinstance(n, ast.Name) and n.id == fn.name) or (isinstance(n, ast.Attribute) and n.attr == fn.name)
            for n in self.nodes(ast.Name, ast.Attribute)
        )

    def _fallback_only(self, node: ast.AST, key: str) -> bool:
        """The write sits under a test that the variable is not set yet (``if "MASTER_ADDR" not in
        os.environ:``): a default for a run by hand, which a launcher's value replaces."""
        return any(
            isinstance(a, ast.If) and (key in ast.unparse(a.test) or _env_unset_test(a.test))
            for a in self.ancestors(node)
        )

    def _world_capped_by_gpus(self) -> bool:
        """The file refuses a world larger than this machine's GPU count (``if world_size >
        torch.cuda.device_count(): raise ...``, ``assert world_size <= n_gpus``): whatever it is
        launched with, all its ranks run on one node."""

        def world(e: ast.AST) -> bool:
            name = dotted(e)
            if name is None:
                return isinstance(e, ast.Call) and "WORLD_SIZE" in ast.unparse(e)
            return name.rsplit(".", 1)[-1].lower() in ("world_size", "worldsize", "nprocs")

        def capped(test: ast.AST, bigger: type, smaller: type) -> bool:
            if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
                return False
            left, op, right = test.left, test.ops[0], test.comparators[0]
            if isinstance(op, bigger):
                return world(left) and rank_facts.per_node_count(self, right)
            if isinstance(op, smaller):
                return world(right) and rank_facts.per_node_count(self, left)
            return False

        for node in self.nodes(ast.If):
            if node.body and isinstance(node.body[0], ast.Raise) and capped(node.test, (ast.Gt, ast.GtE), ast.Lt):
                return True
        return any(capped(a.test, ast.LtE, (ast.Gt, ast.GtE)) for a in self.nodes(ast.Assert))

    def _world_of_this_machines_gpus(self) -> bool:
        """The process group's world is this machine's GPU count: ``init_process_group(...,
        world_size=torch.cuda.device_count())``, or a setup helper handed the rank and that count
        (``init_distributed(args.rank, num_gpus, ...)`` with ``num_gpus = torch.cuda.device_count()``).
        A per-node count by name (``ngpus_per_node``) says nothing: it also turns a node's index into
        a global rank."""

        def gpu_count(e: ast.AST) -> bool:
            if isinstance(e, ast.Call):
                return rank_facts.per_node_count(self, e)
            name = dotted(e)
            if name is None or "per_node" in name.lower():
                return False
            if rank_facts.always_per_node_count(self, e):
                return True  # assigned from device_count() (on every path)
            # a world named for a GPU count (`num_gpus`, `n_gpu`) that the launcher's WORLD_SIZE
            # does not fill (`h.num_gpus = int(os.environ["WORLD_SIZE"])` counts the whole job)
            return name.rsplit(".", 1)[-1].lower() in _GPU_COUNT_NAMES and not any(
                "WORLD_SIZE" in ast.unparse(v) or "world_size" in ast.unparse(v)
                for v, _n in rank_facts.assignments(self, name)
            )

        for call in self.dist_calls("init_process_group"):
            size = self.keyword(call, "world_size")
            if size is not None and gpu_count(size):
                return True
        for call, _q in self.calls:
            name = (dotted(call.func) or "").rsplit(".", 1)[-1].lower()
            # a helper that starts the group (`init_distributed(rank, num_gpus, ...)`), not one that
            # wraps the model (`setup_for_distributed_mode(model, opt, device, n_gpu, ...)`)
            if name.startswith("init") and "dist" in name and any(gpu_count(a) for a in call.args):
                return True
        return False

    def _spawns_whole_world(self, call: ast.Call) -> bool:
        """``mp.spawn(main, args=(world_size,), nprocs=world_size)``: the file starts as many processes
        here as the job has ranks (the process count is named for the world size), so every rank is
        on this host. A count of this node's GPUs (``nprocs=ngpus_per_node``) says nothing."""
        nprocs = self.keyword(call, "nprocs")
        if nprocs is None and len(call.args) > 2:
            nprocs = call.args[2]
        key = dotted(nprocs) if nprocs is not None else None
        if key is not None and key.rsplit(".", 1)[-1].lower() in ("world_size", "world", "worldsize"):
            return True
        # `args.world_size = len(args.gpu_ids)` then `mp.spawn(run, nprocs=len(args.gpu_ids))`: the
        # same count, written out twice
        if nprocs is None or isinstance(nprocs, ast.Constant):
            return False
        text = ast.unparse(nprocs)
        return any(
            any((dotted(t) or "").rsplit(".", 1)[-1].lower() in ("world_size", "worldsize") for t in a.targets)
            and ast.unparse(a.value) == text
            for a in self.nodes(ast.Assign)
        )

    @cached_property
    def pinned_rank(self) -> int | None:
        """The rank a script gives itself (``init_process_group(..., rank=0, world_size=2)``, a
        constant): it is one of several programs, one per rank, and the others are other files.
        Simulating the other ranks with this file's code would invent their behaviour."""
        for call in self.dist_calls("init_process_group"):
            v = self.keyword(call, "rank")
            if isinstance(v, ast.Constant) and isinstance(v.value, int) and not isinstance(v.value, bool):
                return v.value
        return None

    @cached_property
    def is_training_script(self) -> bool:
        """It creates the process group (itself, through a framework's launcher, or through a helper
        of another file named for it, such as ``utils.init_distributed_mode``) or the DDP model."""
        return bool(
            self.dist_calls("init_process_group")
            or self.ddp_constructors
            or self.calls_named(*_GROUP_STARTERS)
            or self._calls_setup_helper
        )

    @cached_property
    def _calls_setup_helper(self) -> bool:
        return bool(self.setup_helper_calls)

    @cached_property
    def setup_helper_calls(self) -> list[ast.Call]:
        """Calls of a project's own "start the process group" helper of another file
        (``utils.init_distributed_mode(args)``, ``ddp_setup()``): the process group exists after them."""
        own = self.function_names
        out = []
        for call, _q in self.calls:
            name = dotted(call.func)
            last = name.rsplit(".", 1)[-1] if name else ""
            low = last.lower()
            # (every name the pattern takes holds "dist" or "ddp": most names skip the regex)
            if ("dist" in low or "ddp" in low) and _SETUP_HELPER.fullmatch(low) and last not in own:
                out.append(call)
        return out

    def mentions(self, *words: str) -> bool:
        # rules ask for the same few words again and again (3.5k times over torch's 205 files): each
        # word's pass over the source once per file
        memo = self.__dict__.setdefault("_mentioned", {})
        for w in words:
            found = memo.get(w)
            if found is None:
                found = memo[w] = w in self.source
            if found:
                return True
        return False

    def is_rank_guard(self, test: ast.AST) -> bool:
        """Syntactically: does this condition look at the rank (``rank == 0``, ``is_main_process()``)?"""
        if test is not None and may_show_any(test, RANKISH, fold=True):  # (most tests: no text to build)
            text = ast.unparse(test).lower()
            if any(k in text for k in RANKISH):
                return True
        # an attribute this file makes a rank test (``self.leader = rank == 0``, or a property)
        return test is not None and any(
            isinstance(n, ast.Attribute) and rank_facts.predicate_attribute_kind(self, n.attr) is not None
            for n in walk(test)
        )

    def conditional(self, node: ast.AST) -> bool:
        """Inside an ``if``/``else`` or conditional expression of its function."""
        for a in self.ancestors(node):
            if isinstance(a, (ast.If, ast.IfExp)):
                return True
            if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return False
        return False

    def guarded_by_rank(self, node: ast.AST) -> bool:
        """Inside an ``if`` on the rank, or after an early ``return`` on a rank test in its function."""
        for a in self.ancestors(node):
            if isinstance(a, (ast.If, ast.IfExp, ast.While)) and self.is_rank_guard(a.test):
                return True
            if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if names_one_rank_function(a.name):
                    return True
                for st in a.body:
                    if st.lineno >= node.lineno:
                        break
                    if (
                        isinstance(st, ast.If)
                        and self.is_rank_guard(st.test)
                        and any(isinstance(s, (ast.Return, ast.Raise)) for s in st.body)
                    ):
                        return True
                for d in a.decorator_list:
                    if self.is_rank_guard(d) or rank_facts.decorator_guard_kind(self, d) is not None:
                        return True
        return False

    # -- which rank (global, node-local, node index): see ddpdoctor.script.ranks ------------------
    def rank_kind(self, expr: ast.AST | None) -> str | None:
        """The kind of rank ``expr`` holds: "global", "local" or "node"; None when ``expr`` it is no rank."""
        return rank_facts.rank_kind(self, expr)

    def rank_guard(self, node: ast.AST) -> rank_facts.Guard | None:
        """The rank test deciding whether ``node`` runs (its kind, and the call lines leading there)."""
        return rank_facts.rank_guard(self, node)

    def callee_guard(self, call: ast.Call) -> rank_facts.Guard | None:
        """The rank test inside the function that ``call`` runs (``save_on_master(...)``), if any."""
        return rank_facts.callee_guard(self, call)

    def argparse_dests(self) -> dict[str, rank_facts.ArgDest]:
        return rank_facts.argparse_dests(self)

    def chain_text(self, lines, end: int | None = None) -> str:
        """``train.py:88 -> train.py:41``: the evidence chain of a finding that crosses functions."""
        name = self.path.replace("\\", "/").rsplit("/", 1)[-1]
        parts = [f"{name}:{ln}" for ln in (*lines, *((end,) if end is not None else ()))]
        return " -> ".join(parts)

    # -- the per-rank interpreter -------------------------------------------------------------
    @cached_property
    def world_sizes(self) -> tuple[int, ...]:
        """The configured sizes, or the one the script hard-codes (``nprocs=2``, ``world_size = 4``)."""
        fixed = {w for w in self.hard_coded_world_sizes if 2 <= w <= 64 and not isinstance(w, bool)}
        return tuple(sorted(fixed)) if fixed else self.configured_world_sizes

    @cached_property
    def hard_coded_world_sizes(self) -> frozenset[int]:
        """World sizes the script writes out: ``world_size=4`` / ``nprocs=4`` / ``nproc_per_node=4``
        given to a call, directly or through a name (``world_size = 4``)."""
        consts: dict[str, set[int]] = {}
        for node in self.nodes(ast.Assign):
            if isinstance(node.value, ast.Constant):
                for t in node.targets:
                    if isinstance(t, ast.Name) and isinstance(node.value.value, int):
                        consts.setdefault(t.id, set()).add(node.value.value)
        fixed: set[int] = set()
        for name in _WORLD_NAMES:
            fixed |= consts.get(name, set())
        for node, _q in self.calls:
            for k in node.keywords:
                if k.arg in ("world_size", "nprocs", "nproc_per_node"):
                    if isinstance(k.value, ast.Constant) and isinstance(k.value.value, int):
                        fixed.add(k.value.value)
                    elif isinstance(k.value, ast.Name):
                        fixed |= consts.get(k.value.id, set())
        return frozenset(fixed)

    @cached_property
    def ddp_params(self) -> frozenset[str]:
        """Parameter names that hold a DDP-wrapped model handed in by another file: the file imports
        DistributedDataParallel without building one, or its functions are handed the rank and test
        it (a per-rank training loop: ``def train(rank, model, ...): ... if rank == 0:``), and it
        unwraps that name somewhere (``unwrap_model(model)``, ``model.module``, ``hasattr(model,
        "module")``)."""
        if self.ddp_constructors or not self.mentions("module"):
            return frozenset()
        params = {a.arg for fn in self.functions for a in (*fn.args.posonlyargs, *fn.args.args)}
        imports_ddp = any(
            v.startswith("torch.") and v.endswith(".DistributedDataParallel") for v in self.aliases.values()
        )
        if not imports_ddp and not params & rank_facts.RANK_PARAMS:
            return frozenset()
        out = set()
        for node in self.nodes(ast.Attribute):
            if node.attr == "module" and isinstance(node.value, ast.Name):
                out.add(node.value.id)
        for call, _q in self.calls:
            name = (dotted(call.func) or "").rsplit(".", 1)[-1]
            if not (call.args and isinstance(call.args[0], ast.Name)):
                continue
            if "unwrap" in name or (
                name == "hasattr"
                and any(isinstance(a, ast.Constant) and a.value == "module" for a in call.args[1:])
            ):
                out.add(call.args[0].id)
        out &= params
        if out and not imports_ddp and not any(self.is_rank_guard(n.test) for n in self.nodes(ast.If)):
            return frozenset()  # handed a rank but never testing it: not a per-rank training loop
        return frozenset(out)

    @cached_property
    def sync_calls(self) -> list[ast.Call]:
        """Library calls with a collective inside (``trainer.save_checkpoint``, ``accelerator.gather``):
        see ddpdoctor.script.sync_calls."""
        libraries = imported_libraries(self.aliases)
        if not libraries and not self.mentions("_first"):
            return []
        return [c for c, _q in self.calls if sync_call(c, libraries) is not None]

    @cached_property
    def ddp_wrapper_calls(self) -> list[ast.Call]:
        """Calls that wrap a model in DDP out of this file's sight: a helper of another file named for
        it (``ddp_wrap(model)``), accelerate's ``accelerator.prepare(model, ...)``, or a subclass of
        DistributedDataParallel made with keywords only DDP's constructor takes
        (``DistributedModel(module=m, broadcast_buffers=False)``)."""
        # a plain name calls a function, ``obj.f()`` may call a method: a method named like an
        # imported helper (ClassyVision's ``self.init_distributed_data_parallel_model()`` beside
        # the imported one it calls) does not hide the helper
        methods = {fn.name for fn in self.functions if self.is_method(fn)}
        plain = {fn.name for fn in self.functions} - methods
        own = methods | plain  # (once, not once per call)
        accelerate = any(v.split(".", 1)[0] == "accelerate" for v in self.aliases.values())
        return [
            c
            for c, q in self.calls
            if (c.args or c.keywords)
            and (last := (q or "").rsplit(".", 1)[-1]) not in (plain if isinstance(c.func, ast.Name) else own)
            and (
                (c.args and names_a_ddp_wrapper(last))
                or (
                    not (q or "").startswith("torch.")
                    and self._rebinds_its_argument(c)
                    and wraps_for_data_parallel(last, c, self.uses_distributed)
                )
                or (accelerate and c.args and last == "prepare" and (q or "").rsplit(".", 2)[-2:-1] == ["accelerator"])
                or (
                    last != "DistributedDataParallel"
                    and (c.args or any(k.arg == "module" for k in c.keywords))  # a model, not a kwargs handler
                    and any(k.arg in _DDP_ONLY_KEYWORDS for k in c.keywords)
                )
            )
        ]

    def _rebinds_its_argument(self, call: ast.Call) -> bool:
        """``model = f(model, ...)``: the call's result replaces its first argument."""
        first = dotted(call.args[0]) if call.args else None
        return first is not None and self.assigned_to(call) == first

    @cached_property
    def ddp_model_names(self) -> frozenset[str]:
        """Names and attributes bound to a model this file wraps (``model = DDP(model)``,
        ``self.model = accelerator.prepare(model)``, ``net = ddp_wrap(net)``)."""
        return frozenset(n for c in (*self.ddp_constructors, *self.ddp_wrapper_calls) if (n := self.assigned_to(c)))

    @cached_property
    def trainers_handed_ddp(self) -> list[ast.Call]:
        """Calls of a function named for training (``train_one_epoch``) handed a name this file binds
        to a DDP model: its backward all-reduces, a collective of the calling function."""
        held = self.ddp_model_names
        if not held:
            return []
        return [
            c
            for c, _q in self.calls
            if names_training((dotted(c.func) or "").rsplit(".", 1)[-1])
            and any(dotted(a) in held for a in (*c.args, *(k.value for k in c.keywords)))
        ]

    @cached_property
    def interesting_functions(self) -> set[int]:
        """ids of functions whose own body makes a distributed call or calls a DDP model."""
        out: set[int] = set()
        nodes = [node for node, op in self._dist_calls if op in COLLECTIVES or op in P2P]
        nodes += self.sync_calls
        collective_ids = {id(n) for n in nodes}
        nodes += self.ddp_wrapper_calls  # the DDP model's forwards are what such a function may do
        nodes += self.calls_named("torch.save", "torch.load")
        if self.ddp_params:
            nodes += [
                c for c, _q in self.calls if isinstance(c.func, ast.Name) and c.func.id in self.ddp_params
            ]
        # the attributes a class keeps its wrapped model in (``self.model = DDP(...)``, handed in):
        # a method calling one runs the wrapper's forward
        handed = {a for held in (self.class_ddp_attrs, self.class_fsdp_attrs) for attrs in held.values() for a in attrs}
        if handed:
            nodes += [c for c, _q in self.calls if dotted(c.func) in handed]
        nodes += self.trainers_handed_ddp  # another module's `train_one_epoch(..., ddp_model)`
        for node in nodes:
            fn = self.enclosing_function(node)
            if fn is not None:
                out.add(id(fn))
        # and a method that calls one of its class's methods that communicate (`if self.rank == 0:
        # loss = self.reduce_value(loss)` in `train_each_epoch`): a class no code of this file
        # builds is walked from its methods, and this is where the ranks part
        # (through a collective's helper only: a saving method is the caller's to guard)
        talking = {id(self.enclosing_function(n)) for n in nodes if id(n) in collective_ids}
        by_name = {}
        for fn in self.functions:
            if id(fn) in talking and self.is_method(fn):
                by_name.setdefault(fn.name, fn)
        if by_name:
            for c, _q in self.calls:
                f = c.func
                if isinstance(f, ast.Attribute) and f.attr in by_name and dotted(f.value) == "self":
                    fn = self.enclosing_function(c)
                    if fn is not None and self.is_method(fn):
                        out.add(id(fn))
        return out

    @cached_property
    def runs(self) -> list[Run]:
        classes: dict[int, ClassRef] = {}  # id of a method -> its class (one ClassRef per class)
        for c in self.nodes(ast.ClassDef):
            defs = [s for s in c.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
            ref = ClassRef(c, {s.name: s for s in defs})
            for s in defs:
                classes[id(s)] = ref
        sizes = self.world_sizes
        out = self._runs_for("<module>", lambda it: it.run_module(), sizes)
        # a function walked only on a path that ran out (a raise the walk was sure of, the step
        # budget) is still judged on its own: the run that reached it is not
        entered = set().union(*(t.entered for r in out for t in r.traces if not t.truncated))
        for fn in self.functions:
            if self.steps > MAX_FILE_STEPS:
                self.runs_truncated = True
                break
            if id(fn) in self.interesting_functions and id(fn) not in entered and not self._handed_on_some_ranks(fn):
                cls = classes.get(id(fn))
                params = self.ddp_params
                runs = self._runs_for(
                    fn.name,
                    lambda it, fn=fn, cls=cls, params=params: it.run_function(fn, cls, params),
                    sizes[:ENTRY_SIZES],
                )
                out.extend(runs)
                for r in runs:
                    for t in r.traces:
                        if not t.truncated:
                            entered |= t.entered
        return out

    steps = 0
    runs_truncated = False

    def _handed_on_some_ranks(self, fn) -> bool:
        """``fn`` is never called here, only handed on (``register_forward_hook(fn)``), and every
        place that hands it on is under a rank test: it runs on those ranks only, so walking it as
        an entry of every rank would invent what the other ranks do."""
        refs = self._handed_names.get(fn.name)
        if not refs or self.call_sites(fn):
            return False
        return all(self.rank_guard(n) is not None for n in refs)

    @cached_property
    def _handed_names(self) -> dict[str, list[ast.Name]]:
        """Names read as values, not called: ``hook`` in ``register_forward_hook(hook)``."""
        called = {id(c.func) for c, _q in self.calls}
        out: dict[str, list[ast.Name]] = {}
        for n in self.nodes(ast.Name):
            if isinstance(n.ctx, ast.Load) and id(n) not in called:
                out.setdefault(n.id, []).append(n)
        return out

    @cached_property
    def uses_sync_bn(self) -> bool:
        """Some attribute is ``convert_sync_batchnorm`` or ``SyncBatchNorm`` (the interpreter asks, as
        Interpreter._uses_sync_bn; the walk in __init__ found every Attribute node ast.walk would)."""
        return any(n.attr in ("convert_sync_batchnorm", "SyncBatchNorm") for n in self.nodes(ast.Attribute))

    @cached_property
    def _defs(self) -> dict:
        return module_defs(self.tree)

    @cached_property
    def _test_texts(self) -> dict:
        """The text of each ``if`` test the interpreter keys its splits by (Interpreter._test_key):
        the same on every walk, so shared by the walks of this module like _syntax."""
        return {}

    @cached_property
    def _syntax(self) -> dict:
        """The interpreter's per-node facts, shared by every walk of this module."""
        return {}

    @cached_property
    def class_ddp_attrs(self) -> dict[int, tuple[str, ...]]:
        """id of a class -> the ``self.x`` attributes it sets to ``DistributedDataParallel(...)``."""
        out: dict[int, list[str]] = {k: list(v) for k, v in self.handed_ddp_attrs.items()}
        if not self.ddp_constructors:
            return {k: tuple(v) for k, v in out.items()}
        classes = self.nodes(ast.ClassDef)
        for call in self.ddp_constructors:
            target = self.assigned_to(call)
            if target is None or not target.startswith("self."):
                continue
            owner = next((a for a in self.ancestors(call) if isinstance(a, ast.ClassDef)), None)
            if owner is not None and owner in classes:
                out.setdefault(id(owner), []).append(target)
        wraps = {id(c) for c in self.ddp_constructors}
        lines = [c.lineno for c in self.ddp_constructors]
        for cls in classes:
            if not _spans_any(cls, lines):
                continue  # (no wrap in this class)
            for target in _handed_on(cls, lambda v: id(v) in wraps):
                if target not in out.get(id(cls), ()):
                    out.setdefault(id(cls), []).append(target)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def class_fsdp_attrs(self) -> dict[int, tuple[str, ...]]:
        """id of a class -> the ``self.x`` attributes it sets to ``FullyShardedDataParallel(...)``:
        directly, or from one of its own methods that returns such a model (``self.model =
        self._setup_model(model)`` with ``model = FSDP(model, ...); return model`` inside)."""
        calls = self.calls_named("FullyShardedDataParallel")
        if not calls:
            return {}
        out: dict[int, list[str]] = {}
        makers: dict[int, set[str]] = {}  # id(class) -> its methods that return an FSDP model
        for call in calls:
            owner = next((a for a in self.ancestors(call) if isinstance(a, ast.ClassDef)), None)
            if owner is None:
                continue
            target = self.assigned_to(call)
            if target is not None and target.startswith("self."):
                out.setdefault(id(owner), []).append(target)
                continue
            fn = self.enclosing_function(call)
            if fn is None:
                continue
            returned = {dotted(r.value) for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None}
            if (target in returned) or isinstance(self.parents.get(call), ast.Return):
                makers.setdefault(id(owner), set()).add(fn.name)
        ids = {id(c) for c in calls}
        lines = [c.lineno for c in calls]
        for cls in self.nodes(ast.ClassDef):
            names = makers.get(id(cls), set())
            if not names and not _spans_any(cls, lines):
                continue  # (no wrap in this class)

            def makes(v: ast.AST, names: set[str] = names) -> bool:
                called = dotted(v.func) if isinstance(v, ast.Call) else None
                return id(v) in ids or called is not None and called.removeprefix("self.") in names

            for target in _handed_on(cls, makes):
                if target not in out.get(id(cls), ()):
                    out.setdefault(id(cls), []).append(target)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def quiet_ddp_attrs(self) -> frozenset[str]:
        """``self.x`` attributes set to a DDP wrapper made with ``broadcast_buffers=False``."""
        return frozenset(
            key
            for c in self.ddp_constructors
            if (key := self.assigned_to(c)) is not None
            and key.startswith("self.")
            and any(
                k.arg == "broadcast_buffers" and isinstance(k.value, ast.Constant) and k.value.value is False
                for k in c.keywords
            )
        )

    @cached_property
    def rank_decorated(self) -> dict[int, str]:
        """id of a def -> the kind of rank whose 0 alone runs it, by one of its decorators
        (``@master_only``, ``@rank_zero_only``, a wrapper of this file calling it under a rank test)."""
        out: dict[int, str] = {}
        for fn in self.functions:
            for d in fn.decorator_list:
                kind = rank_facts.decorator_guard_kind(self, d)
                if kind is not None:
                    out[id(fn)] = kind
                    break
        return out

    @cached_property
    def fsdp_full_state_dicts(self) -> bool:
        """The file never asks FSDP for sharded or local state dicts (then state_dict() gathers)."""
        return not any(w in self.source for w in ("SHARDED_STATE_DICT", "LOCAL_STATE_DICT"))

    @cached_property
    def handed_ddp_attrs(self) -> dict[int, tuple[str, ...]]:
        """id of a class -> the ``self.x`` attributes that hold a DDP model another file hands in: the
        constructor is given the rank and stores a parameter as ``self.x``, and the class unwraps it
        (``self.x.module``, ``hasattr(self.x, "module")``): a per-rank trainer of a wrapped model."""
        out: dict[int, tuple[str, ...]] = {}
        for cls in self.nodes(ast.ClassDef):
            init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
            if init is None:
                continue
            params = {a.arg for a in (*init.args.args[1:], *init.args.kwonlyargs)}
            if not params & rank_facts.RANK_PARAMS:
                continue
            stored = {
                d
                for st in walk(init)
                if isinstance(st, ast.Assign) and isinstance(st.value, ast.Name) and st.value.id in params
                for t in st.targets
                if (d := dotted(t)) is not None and d.startswith("self.")
            }
            unwrapped = {
                d
                for n in walk(cls)
                if isinstance(n, ast.Attribute) and n.attr == "module" and (d := dotted(n.value)) in stored
            }
            if unwrapped:
                out[id(cls)] = tuple(sorted(unwrapped))
        return out

    @cached_property
    def int_option_defaults(self) -> dict[str, int]:
        """The file's argparse options with a literal int default and no rank meaning of their own
        (``--main_gpu``, default 0; not ``--local_rank``): what the walk compares a rank with."""
        out = {}
        for dest in self.argparse_dests().values():
            d = dest.default
            if isinstance(d, ast.Constant) and d.value.__class__ is int and not dest.kind:
                out[dest.dest] = d.value
        return out

    @cached_property
    def world_group_names(self) -> frozenset[str]:
        """Names that hold the default process group wherever the file sets them (``self.group =
        dist.group.WORLD``): a collective given one runs on every rank, as with no group at all."""
        kinds: dict[str, set[bool]] = {}
        for a in self.nodes(ast.Assign):
            world = (qualify(dotted(a.value), self.aliases) or "").endswith("distributed.group.WORLD")
            for t in a.targets:
                if (key := dotted(t)) is not None:
                    kinds.setdefault(key, set()).add(world)
        return frozenset(k for k, v in kinds.items() if v == {True})

    @cached_property
    def set_attribute_names(self) -> frozenset[str]:
        """Attribute names the file assigns on objects it holds (``model.epoch = e``,
        ``setattr(model, "name", ...)``), not on ``self`` in a class body: a network's own
        ``self.model = ...`` is not on the DDP wrapper that holds the network."""
        out = {
            t.attr
            for a in self.nodes(ast.Assign, ast.AugAssign, ast.AnnAssign)
            for t in (a.targets if isinstance(a, ast.Assign) else [a.target])
            if isinstance(t, ast.Attribute) and not (isinstance(t.value, ast.Name) and t.value.id == "self")
        }
        for c, q in self.calls:
            if q == "setattr" and len(c.args) > 1 and isinstance(c.args[1], ast.Constant):
                out.add(str(c.args[1].value))
        return frozenset(out)

    @cached_property
    def rank_nodes(self) -> dict[int, str]:
        """ids of the attributes and subscripts compared in this file that hold a rank, by kind
        (``self.gpu_id == 0`` after ``self.gpu_id = int(os.environ["LOCAL_RANK"])``)."""
        out: dict[int, str] = {}
        for node in self.nodes(ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, (ast.Attribute, ast.Subscript)):
                    kind = rank_facts.strict_rank_kind(self, side)
                    if kind is not None:
                        out[id(side)] = kind
        return out

    # -- other files of the project ------------------------------------------------------------
    @cached_property
    def project_imports(self) -> dict[str, tuple[str, str | None, int]]:
        """Local name -> (module, name imported from it or None, relative level), every import."""
        out: dict[str, tuple[str, str | None, int]] = {}
        for node in self.nodes(ast.Import, ast.ImportFrom):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        out[a.asname] = (a.name, None, 0)
                    else:
                        out.setdefault(a.name.split(".", 1)[0], (a.name.split(".", 1)[0], None, 0))
            else:
                for a in node.names:
                    if a.name != "*":
                        out[a.asname or a.name] = (node.module or "", a.name, node.level or 0)
        return out

    def resolve(self, name: str | None, importer: str | None = None):
        """(ModuleAnalysis, def) of the project function that the dotted call name ``name`` of this
        file reaches through its imports (``utils.train``, ``train`` after ``from utils import train``),
        else None. ``importer``: resolve in another file of the project instead."""
        found = self.resolve_def(name, importer)
        if found is None or not isinstance(found[1], FuncRef):
            return None
        return found[0], found[1].node

    def resolve_def(self, name: str | None, importer: str | None = None, depth: int = 0):
        """(ModuleAnalysis, FuncRef or ClassRef) that ``name`` reaches in another file of the project,
        through re-exports too (a package's ``__init__.py`` that does ``from .checkpoint import
        CheckpointHandler``), else None."""
        project = self.project
        if project is None or not name or depth > 3:
            return None
        if importer is not None and importer != self.path:
            other = project.analysis(Path(importer))
            return other.resolve_def(name, depth=depth) if other is not None else None
        head, _, rest = name.partition(".")
        imp = self.project_imports.get(head)
        if imp is None:
            return None
        module, attr, level = imp
        candidates = []
        if attr is None:
            candidates.append((module, rest))
        else:
            sub = f"{module}.{attr}" if module else attr
            candidates.append((sub, rest))  # from pkg import utils; utils.train
            if not rest:
                candidates.append((module, attr))  # from utils import train; train
        for mod, symbol in candidates:
            if not symbol or "." in symbol:
                continue
            path = project.module_path(mod, self.path, level)
            if path is None or str(path) == self.path:
                continue
            other = project.analysis(path)
            if other is None:
                continue
            target = other._defs.get(symbol)
            if isinstance(target, (FuncRef, ClassRef)):
                return other, target
            if target is None and symbol in other.project_imports:  # re-exported there
                found = other.resolve_def(symbol, depth=depth + 1)
                if found is not None:
                    return found
        return None

    def _resolver(self):
        """For the interpreter: a FuncRef or ClassRef that walks a project function or class with its
        own file's names."""
        if self.project is None:
            return None
        # every rank of every world size asks the same names: answered once per entry point's runs
        # (kept with this resolver only, so nothing outlives the runs)
        memo: dict[tuple[str, str | None], FuncRef | ClassRef | None] = {}

        def resolve(name: str, importer: str | None):
            key = (name, importer)
            if key in memo:
                return memo[key]
            found = self.resolve_def(name, importer)
            if found is None:
                memo[key] = None
                return None
            other, target = found
            ctx = other.__dict__.get("_context")
            if ctx is None:
                ctx = ModuleContext(
                    other.path, other.aliases, {**other._defs, "__name__": Path(other.path).stem}
                )
                other.__dict__["_context"] = ctx
            if isinstance(target, ClassRef):
                memo[key] = ref = ClassRef(target.node, target.methods, ctx)
            else:
                memo[key] = ref = FuncRef(target.node, ctx=ctx)
            return ref

        return resolve

    def event_anchor(self, ev) -> ast.AST:
        """Where to report an event: its node in this file, or for an event in another file of the
        project the last call of its chain that is in this file."""
        if ev.path is None or ev.path == self.path:
            return ev.node
        for line, path in zip(reversed(ev.chain), reversed(ev.chain_paths)):
            if path is None or path == self.path:
                on_line = [c for c, _q in self.calls if c.lineno == line]
                # `out = prepare(os.environ.get(...))`: the call that goes into the other file
                into = [c for c in on_line if self.resolve_def(dotted(c.func)) is not None]
                return (into or on_line or [None])[0] or _Place(line)
        return _Place(1)

    def event_chain(self, ev) -> str:
        """``train.py:88 -> utils.py:41`` for an event reached through calls, else ""."""
        if not ev.chain:
            return ""
        items = [(p or self.path, ln) for ln, p in zip(ev.chain, ev.chain_paths or (None,) * len(ev.chain))]
        items.append((ev.path or self.path, ev.node.lineno))
        return " -> ".join(f"{Path(p).name}:{ln}" for p, ln in items)

    def _runs_for(self, entry: str, walk, sizes) -> list[Run]:
        resolver = self._resolver()

        rank_nodes = self.rank_nodes
        set_attributes = self.set_attribute_names
        world_groups = self.world_group_names
        option_defaults = self.int_option_defaults
        class_ddp_attrs = self.class_ddp_attrs
        class_fsdp_attrs = self.class_fsdp_attrs
        fsdp_full = self.fsdp_full_state_dicts
        rank_decorated = self.rank_decorated
        quiet_ddp_attrs = self.quiet_ddp_attrs

        test_texts = self._test_texts

        def sync_bn() -> bool:
            return self.uses_sync_bn

        touched = []  # not kept on self: an interpreter holds the resolver, which holds self (a cycle
        # the garbage collector would have to find, keeping every file's tree alive until it does)
        # rank -> its trace, for the ranks whose walk never read the world size: the same in every
        # larger world, so each larger world walks only its new ranks
        any_size: dict[int, Trace] = {}

        def go(w: int, r: int) -> Trace:
            it = Interpreter(self.tree, self.aliases, w, r, self._defs, self._syntax)
            it.resolve = resolver
            it.rank_nodes = rank_nodes
            it.set_attributes = set_attributes
            it.world_groups = world_groups
            it.option_defaults = option_defaults
            it.class_ddp_attrs = class_ddp_attrs
            it.class_fsdp_attrs = class_fsdp_attrs
            it.rank_decorated = rank_decorated
            it.quiet_ddp_attrs = quiet_ddp_attrs
            it.fsdp_full_state_dicts = fsdp_full
            it.sync_bn = sync_bn
            it.test_texts = test_texts
            trace = walk(it)
            self.steps += it.steps
            touched.append(it.touched_rank)
            if not it.touched_world:
                any_size[r] = trace
            return trace

        t0 = go(sizes[0], 0)
        if not touched[0]:
            # nothing depended on the rank: every rank of every size does exactly this
            return [Run(entry, w, [t0] * w) for w in sizes]
        out = []
        for w in sizes:
            if w == sizes[0]:
                traces = [t0 if r == 0 else go(w, r) for r in range(w)]
            else:
                traces = [any_size[r] if r in any_size else go(w, r) for r in range(w)]
            out.append(Run(entry, w, traces))
            if w == sizes[0] and not any(t.events for t in traces):
                # nothing distributed happens at the smallest size: assume none at larger ones either
                out.extend(Run(entry, w2, [t0] * w2) for w2 in sizes[1:])
                break
        return out


def _handed_on(cls: ast.ClassDef, makes) -> list[str]:
    """The ``self.x`` attributes of ``cls`` that come to hold a model its methods wrap (``makes(value)``
    says whether an assigned value is one): through a local name (``model = self._wrap(model)``, then
    ``self.model = model``), or handed by keyword to a base class's constructor this file does not
    show (``super().__init__(model=model, ...)``), which keeps it under that name: trainer base
    classes store what they are given as ``self.model``."""
    out: list[str] = []
    for fn in (f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))):
        held: set[str] = set()  # local names given such a model
        for st in sorted(
            (n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.Call))), key=lambda n: (n.lineno, n.col_offset)
        ):
            if isinstance(st, ast.Call):
                if held and calls_base_init(st):
                    out += [f"self.{k.arg}" for k in st.keywords if k.arg and dotted(k.value) in held]
                continue
            if len(st.targets) != 1 or not (target := dotted(st.targets[0])):
                continue
            if makes(st.value) or isinstance(st.value, ast.Name) and st.value.id in held:
                if target.startswith("self."):
                    out.append(target)
                else:
                    held.add(target)
            else:
                held.discard(target)
    return out


def _spans_any(node: ast.AST, lines: list[int]) -> bool:
    """One of ``lines`` falls within ``node``'s lines."""
    end = node.end_lineno or node.lineno
    return any(node.lineno <= ln <= end for ln in lines)
