"""The per-rank symbolic interpreter: what each rank of a world of size W does, in order.

For one (world size, rank) it walks the module body (with ``__name__ == "__main__"``), inlining calls
to functions and methods defined in the same file and ``mp.spawn`` targets. Values are concrete
Python values where they can be known (constants, ``dist.get_rank()``, ``RANK``/``LOCAL_RANK``/
``WORLD_SIZE`` from ``os.environ``, arithmetic and comparisons on them) and UNKNOWN elsewhere.

* a condition that evaluates to a concrete value takes that branch only: this is where ranks part;
* an UNKNOWN condition does not depend on the rank as far as we can tell, so every rank walks both
  branches the same way (early exits inside them are ignored);
* loops over a small concrete ``range`` are unrolled (p2p rings), other loops run their body once.

The output is a Trace: the rank's distributed operations (collectives, p2p, DDP forwards,
checkpoint saves/loads, ...) as Events with their source nodes and call chain. Nothing is executed.
The walk has a step budget; a trace that ran out is marked truncated and rules ignore it.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field

from ddpdoctor.script import event_engines
from ddpdoctor.script.names import (
    EXIT_CALLS,
    calls_base_init,
    dist_op,
    dotted,
    is_distributed_flag,
    is_property,
    is_torch_name,
    names_a_ddp_wrapper,
    names_evaluation,
    names_evaluator,
    names_training,
    qualify,
)
from ddpdoctor.script.ranks import GLOBAL, predicate_name_kind
from ddpdoctor.script.sync_calls import imported_libraries, sync_call
from ddpdoctor.script.values import FREE, UNKNOWN, bind_arguments, negation, truth_of, unknown_default

_RANK_ENV = frozenset(
    [
        "RANK",
        "SLURM_PROCID",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "LOCAL_RANK",
        "SLURM_LOCALID",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "WORLD_SIZE",
        "SLURM_NTASKS",
        "OMPI_COMM_WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "PMI_SIZE",
    ]
)


COLLECTIVES = frozenset(
    [
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "all_to_all",
        "all_to_all_single",
        "barrier",
        "broadcast",
        "broadcast_object_list",
        "gather",
        "gather_object",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "scatter",
        "scatter_object_list",
        "monitored_barrier",
        "new_group",
        "_all_gather_base",
        "_reduce_scatter_base",
    ]
)
P2P = frozenset({"send", "recv", "isend", "irecv"})
RANK_NAMES = {
    "rank": "rank",
    "global_rank": "rank",
    "world_rank": "rank",
    "local_rank": "local",
    "device_id": "local",  # a process's own GPU index kept by a trainer: its local rank
    "world_size": "world",
    "local_world_size": "world",
    # one process per GPU, as the walk models a job (one node): the GPU count is the world
    "num_gpus": "world",
    "n_gpus": "world",
    "ngpus": "world",
}
MAIN_PROCESS_NAMES = frozenset(
    {
        "is_main_process",
        "is_master",
        "is_rank_zero",
        "is_rank_0",
        "main_process",
        "is_global_zero",
        "is_local_main_process",
        "is_main",
        "is_master_process",
        "is_local_master",
    }
)


def _main_process_kind(name: str) -> str | None:
    """GLOBAL or LOCAL for a main-process predicate (``is_main_process``, ``dist.is_primary()``,
    ``is_local_master``; one list for the walk and the rank tests, script/ranks.py), else None."""
    return predicate_name_kind(name) or (GLOBAL if name in MAIN_PROCESS_NAMES else None)


MAX_STEPS = 20000
MAX_DEPTH = 12
MAX_UNROLL = 8  # enough for p2p loops over the world; epoch loops run once


_SYNCS = frozenset(("collective", "p2p", "ddp_forward"))  # events every rank must match


@dataclass
class Event:
    kind: str  # collective | p2p | wait | ddp_forward | save | load | state_dict | spawn | fs | missing_attr
    op: str
    node: ast.AST
    chain: tuple[int, ...] = ()  # lines of the calls that led here (outermost first)
    peer: object = None  # p2p: int, None (any source) or UNKNOWN
    req: int | None = None  # isend/irecv: request id; wait: the id waited on
    # save/load: the path expression's source; collective: its group's source, if not the default
    arg: str | None = None
    path: str | None = None  # the file of ``node`` when it is not the file being linted
    chain_paths: tuple[str | None, ...] = ()  # the file of each chain line (None: the linted file)
    # the innermost ``while`` loop it was made in (walked once: how many times it really runs is
    # not known), else None
    open_loop: ast.AST | None = None
    # collective: the library call it happens in (``trainer.save_checkpoint``), else None
    library: str | None = None


@dataclass
class Trace:
    world_size: int
    rank: int
    events: list[Event] = field(default_factory=list)
    truncated: bool = False
    entered: set = field(default_factory=set)  # ids of FunctionDef nodes walked


# nn.Module methods that return the module itself
# The public methods of DistributedDataParallel (nn.Module's and its own, torch 2.13): any other
# method called on the wrapper is not there (nn.Module's __getattr__ finds only parameters, buffers
# and the submodule `module`) and raises AttributeError.
DDP_METHODS = frozenset(
    """add_module apply bfloat16 buffers children compile cpu cuda double eval extra_repr float forward
    gather get_buffer get_extra_state get_parameter get_submodule half ipu join join_hook load_state_dict
    modules mtia named_buffers named_children named_modules named_parameters no_sync parameters
    register_backward_hook register_buffer register_comm_hook register_forward_hook
    register_forward_pre_hook register_full_backward_hook register_full_backward_pre_hook
    register_load_state_dict_post_hook register_load_state_dict_pre_hook register_module
    register_parameter register_state_dict_post_hook register_state_dict_pre_hook requires_grad_
    scatter set_extra_state set_submodule share_memory state_dict to to_empty to_kwargs train type
    will_sync_module_buffers xpu zero_grad""".split()
)
# Its data attributes (an instance's, torch 2.13, and nn.Module's `training`): reading any other
# attribute of the wrapper (`model.model.state_dict()`, `model.encoder.layers`) raises AttributeError.
DDP_ATTRIBUTES = frozenset(
    """module batched_grad_copy broadcast_bucket_size bucket_bytes_cap bucket_bytes_cap_default
    bucket_bytes_cap_list device device_ids device_type dim find_unused_parameters forward_sync_buffers
    gradient_as_bucket_view is_multi_device_module logger mixed_precision modules_buffers
    named_module_buffers output_device parameters_to_ignore process_group reducer
    require_backward_grad_sync require_forward_param_sync skip_all_reduce_unused_params static_graph
    training use_side_stream_for_tensor_copies broadcast_buffers call_super_init dump_patches
    join_device join_process_group""".split()
)
_COPIES = frozenset(("shutil.copyfile", "shutil.copy", "shutil.copy2"))
# methods of an evaluation object that run it over its data (besides ones named for evaluating)
_RUNS_EVALUATION = frozenset(("__call__", "run", "process", "compute", "sample", "forward"))
_RETURNS_SELF = frozenset(("to", "cuda", "cpu", "train", "eval", "float", "half", "double", "bfloat16"))


class DDPModel:
    """A value made by DistributedDataParallel(...): calling it is a collective forward, unless it
    was made with ``broadcast_buffers=False`` (a forward then syncs nothing: it is not recorded)."""

    def __init__(self, broadcasts: bool = True, sync_bn_only: bool = False):
        self._broadcasts = broadcasts
        # made with broadcast_buffers=False around SyncBatchNorm layers: only the layers' statistics
        # sync, and only in training mode (in eval mode they use their running statistics)
        self.sync_bn_only = sync_bn_only
        self.training = True

    @property
    def broadcasts(self) -> bool:
        """Its forward communicates."""
        return self._broadcasts and (self.training or not self.sync_bn_only)


class FSDPModel:
    """A value made by FullyShardedDataParallel(...): its forward all-gathers each wrapped unit's
    parameters and its ``state_dict()`` (FULL_STATE_DICT, the default) all-gathers them too, so both
    are collectives every rank must join, whatever the model holds."""


@dataclass
class Evaluator:
    """An object of another module's evaluation class handed the wrapped model (``SegEvaluator(
    network=ddp_model)``, ``Tester(model, loader)``): running it runs the wrapper's forward."""

    name: str
    model: DDPModel | FSDPModel


@dataclass
class Request:
    id: int


@dataclass
class FuncRef:
    node: ast.FunctionDef | ast.AsyncFunctionDef
    cls: ClassRef | None = None
    bound_self: bool = False
    ctx: ModuleContext | None = None  # set for a function of another file of the project
    # a function defined inside another: the frame it was defined in, whose names it reads
    closure: dict | None = None


@dataclass
class LambdaRef:
    """A ``lambda``, with the frame it was made in (its free names are read there when called)."""

    node: ast.Lambda
    closure: dict | None = None


@dataclass
class Engine:
    """An event-driven training engine (see ddpdoctor.script.event_engines): ``run`` calls its step
    (``process``, or a forward of ``model`` for ignite's supervised engines) on every batch."""

    process: object = None  # FuncRef / LambdaRef
    model: object = None


@dataclass
class EngineMethod:
    engine: Engine
    name: str


@dataclass
class ModuleContext:
    """What a function of another file of the project needs to be walked: its file's names."""

    path: str
    aliases: dict[str, str]
    globals: dict[str, object]


@dataclass
class ClassRef:
    node: ast.ClassDef
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    ctx: ModuleContext | None = None  # as for FuncRef: its methods are walked with that file's names


@dataclass
class Instance:
    """An object of a class defined in this file: its methods resolve to FuncRefs."""

    cls: ClassRef


class _Return(Exception):
    def __init__(self, value):
        self.value = value


class _Raise(_Return):
    """A raise: inside an UNKNOWN branch it is ignored; on a path the walk is sure of, the rank
    crashes there, and the trace is not judged (an error path, not a hang)."""


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _Exit(Exception):
    """The rank stops: sys.exit(), raise, or the step budget."""


class _ExitCall(_Exit):
    """The script exits (sys.exit(), raise SystemExit): on a branch every rank takes alike, only the
    ranks of runs that take it stop; the walk goes on along the other way."""


_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Div: operator.truediv,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}
_CMPOPS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_CONCRETE = (int, float, str, bool, type(None), tuple, range)
# file-system writes recorded (kind "fs") while another file of the project is walked, for DDP505 to
# judge there; the linted file's own writes are read from its syntax
_FS_WRITES = frozenset(
    ("makedirs", "mkdir", "open", "write_text", "write_bytes", "save", "savez", "savetxt", "save_pretrained")
)


_PROGRESS_BARS = frozenset(("tqdm", "track", "progress_bar"))


def _keyword_is_false(call: ast.Call, name: str) -> bool:
    return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is False for k in call.keywords)


def _tests_for_wrapper(q: str, arg: ast.expr, value: object, aliases: dict[str, str]) -> object:
    """The truth of ``hasattr(ddp_model, arg)`` or ``isinstance(ddp_model, arg)``, or UNKNOWN."""
    if q == "hasattr":
        return True if value == "module" or value in DDP_METHODS else UNKNOWN
    classes = arg.elts if isinstance(arg, ast.Tuple) else [arg]
    names = [(qualify(dotted(c), aliases) or "").rsplit(".", 1)[-1] for c in classes]
    if "DistributedDataParallel" in names:
        return True
    return UNKNOWN


def _concrete(*vals) -> bool:
    return all(isinstance(v, _CONCRETE) for v in vals)


def is_accelerate_prepare(node: ast.Call) -> bool:
    """``accelerator.prepare(...)`` with something to prepare."""
    func = node.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "prepare"
        and (dotted(func.value) or "").rsplit(".", 1)[-1] == "accelerator"
        and bool(node.args)
    )


def _names_a_model(e: ast.AST) -> bool:
    """``model``, ``self.unet``, ``net_g``: what a script calls the module it trains."""
    name = (dotted(e) or "").rsplit(".", 1)[-1].lower()
    return "model" in name or "net" in name


def _same(a, b) -> bool:
    """Two walked values are the same value (the same object, or equal concrete values of one type)."""
    if a is b:
        return True
    try:
        return _concrete(a, b) and type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - a comparison that fails says nothing is the same
        return False


def _small(v) -> bool:
    """Guard against values that would blow up (huge strings or ints from ``"x" * n``)."""
    if isinstance(v, (str, tuple)):
        return len(v) < 10000
    if isinstance(v, int) and not isinstance(v, bool):
        return abs(v) < 1 << 64
    return True


class Interpreter:
    """Walks one module for one (world_size, rank). Create one per run; it is cheap."""

    def __init__(
        self,
        tree: ast.Module,
        aliases: dict[str, str],
        world_size: int,
        rank: int,
        defs: dict | None = None,
        syntax: dict | None = None,
    ):
        self.tree = tree
        self.aliases = aliases
        # what a node's own text says (names, qualified names), the same on every walk of this tree
        # with these aliases: share one dict between the walks of a module (see _call_syntax)
        self.syntax: dict[ast.AST, object] = syntax if syntax is not None else {}
        self._world = world_size
        self.touched_world = False  # did the walk read the world size? (see the W property)
        self.rank = rank
        self.local = rank  # one node: local rank == global rank
        self.trace = Trace(world_size, rank)
        self.globals: dict[str, object] = {"__name__": "__main__"}
        self.defs = defs  # the module's top-level functions and classes, shared between walks
        self.attrs: dict[str, object] = {}  # "self.model", "args.rank" -> value
        self.steps = 0
        self.stack: list[ast.AST] = []  # FunctionDefs being walked (recursion guard)
        self.chain: list[int] = []
        self.chain_paths: list[str | None] = []
        self.path: str | None = None  # the other file being walked; None for the linted file
        # resolve(name) -> FuncRef/ClassRef of another file of the project for a dotted call name
        self.resolve = None
        # ids of attribute/subscript nodes the file shows to hold a rank (``self.gpu_id``,
        # ``config["rank"]``), by kind: "global", "local" or "node" (see ddpdoctor.script.ranks)
        self.rank_nodes: dict[int, str] = {}
        self.set_attributes: frozenset[str] = frozenset()  # `x.name = ...` somewhere in the file
        self.world_groups: frozenset[str] = frozenset()  # names the file sets to dist.group.WORLD only
        self.option_defaults: dict[str, int] = {}  # argparse dests with an int default (`--main_gpu 0`)
        # id(def) -> the kind of rank (GLOBAL, LOCAL) whose 0 alone runs it, by a decorator
        # (`@master_only`, a wrapper of this file that calls it under a rank test)
        self.rank_decorated: dict[int, str] = {}
        self.seeded: set[str] = set()  # attributes an entry method's walk assumed wrapped
        self.quiet_ddp_attrs: frozenset[str] = frozenset()  # ... with broadcast_buffers=False
        self.class_ddp_attrs: dict[int, tuple[str, ...]] = {}  # id(ClassDef) -> ("self.model", ...)
        self.class_fsdp_attrs: dict[int, tuple[str, ...]] = {}  # the same for FSDP(...)
        # False where the file asks FSDP for sharded or local state dicts: state_dict() may then
        # gather nothing, so it is not recorded
        self.fsdp_full_state_dicts = True
        self.next_req = 0
        self.open_loops: list[ast.AST] = []  # ``while`` loops being walked (see Event.open_loop)
        # per function being walked: the values of the returns in branches the walk could not decide
        self.returns_seen: list[list[object]] = []
        self.touched_rank = False  # did any value depend on the rank or world size?
        # names that are the DDP model on one side of an undecidable test only (see RoleSplits)
        self.splits = RoleSplits()
        self.test_texts: dict[ast.AST, str] = {}
        # libraries whose calls may synchronise every rank (see ddpdoctor.script.sync_calls)
        self.sync_libraries = imported_libraries(aliases)
        self.sync_names = bool(self.sync_libraries) or any("_first" in name for name in aliases)

    # the module's answer to _uses_sync_bn, when the caller knows it (ModuleAnalysis.uses_sync_bn:
    # one look per file instead of a walk of the whole tree per rank and world size)
    sync_bn = None

    def _uses_sync_bn(self) -> bool:
        if self.sync_bn is not None:
            return self.sync_bn()
        found = self.__dict__.get("_sync_bn")
        if found is None:
            found = self._sync_bn = any(
                isinstance(n, ast.Attribute) and n.attr in ("convert_sync_batchnorm", "SyncBatchNorm")
                for n in ast.walk(self.tree)
            )
        return found

    # -- entry points ------------------------------------------------------------------------
    def run_module(self) -> Trace:
        self._guarded(lambda: self.exec_block(self.tree.body, self.globals))
        return self.trace

    def run_function(
        self,
        fn: ast.FunctionDef | ast.AsyncFunctionDef,
        cls: ClassRef | None,
        ddp_params: frozenset[str] = frozenset(),
    ) -> Trace:
        """Walk one function as if called with unknown arguments (rank-named ones get the rank;
        ``ddp_params``: names of parameters that other files hand in wrapped in DDP)."""
        self.globals.update(self.defs if self.defs is not None else module_defs(self.tree))
        # an entry point's callers are unknown: its parameters are too, defaults included
        frame = self._bind(FuncRef(fn, cls, bound_self=cls is not None), [], {}, use_defaults=False)
        for name in ddp_params:
            if name in frame:
                frame[name] = DDPModel()
        if cls is not None:
            # the constructor did not run: attributes the class sets to a DDP model are one (not
            # those this function binds itself: the method that wraps the model has it plain first)
            own = _wrapped_self_attributes(fn, self.aliases)
            for key in self._ddp_attributes(cls):
                if key not in own:
                    if key in self.quiet_ddp_attrs:  # made with broadcast_buffers=False
                        sync_bn = self._uses_sync_bn()
                        self.attrs[key] = DDPModel(broadcasts=sync_bn, sync_bn_only=sync_bn)
                    else:
                        self.attrs[key] = DDPModel()
                    self.seeded.add(key)
            for key in self.class_fsdp_attrs.get(id(cls.node), ()):
                if key not in own:
                    self.attrs[key] = FSDPModel()
                    self.seeded.add(key)
        self._guarded(lambda: self._walk_function(fn, frame))
        return self.trace

    def _ddp_attributes(self, cls: ClassRef) -> tuple[str, ...]:
        """``self.model`` for ``self.model = DDP(...)`` anywhere in the class (from the module's index)."""
        return self.class_ddp_attrs.get(id(cls.node), ())

    def _guarded(self, fn) -> None:
        try:
            fn()
        except _Exit:
            pass
        except _Raise:
            self.trace.truncated = True
        except (_Return, _Break, _Continue):
            pass
        except RecursionError:
            self.trace.truncated = True

    # -- statements ---------------------------------------------------------------------------
    def exec_block(self, body: list[ast.stmt], frame: dict) -> None:
        for st in body:
            self.exec_stmt(st, frame)

    def exec_stmt(self, st: ast.stmt, frame: dict) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            self.trace.truncated = True
            raise _Exit()
        t = type(st)
        if t is ast.Expr:
            self.ev(st.value, frame)
        elif t is ast.Assign:
            v = self.ev(st.value, frame)
            for target in st.targets:
                self.bind(target, v, frame)
        elif t is ast.AnnAssign:
            if st.value is not None:
                self.bind(st.target, self.ev(st.value, frame), frame)
        elif t is ast.AugAssign:
            cur = self.ev(st.target, frame)
            rhs = self.ev(st.value, frame)
            self.bind(st.target, self._binop(type(st.op), cur, rhs), frame)
        elif t is ast.If:
            self._exec_if(st, frame)
        elif t in (ast.For, ast.AsyncFor):
            self._exec_for(st, frame)
        elif t is ast.While:
            test = truth_of(self.ev(st.test, frame))
            if test is not False:
                self.open_loops.append(st)
                try:
                    self._loop_body(st.body, frame)
                finally:
                    self.open_loops.pop()
            self.exec_block(st.orelse, frame)
        elif t in (ast.With, ast.AsyncWith):
            if any(_expects_error(item.context_expr) for item in st.items):
                return  # a test that expects this block to fail (assertRaises, pytest.raises)
            for item in st.items:
                v = self.ev(item.context_expr, frame)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, v if isinstance(v, (Request,)) else UNKNOWN, frame)
            self.exec_block(st.body, frame)
        elif t in (ast.Try, getattr(ast, "TryStar", ast.Try)):
            try:
                self.exec_block(st.body, frame)
                self.exec_block(st.orelse, frame)
            finally:
                self.exec_block(st.finalbody, frame)
        elif t is ast.Return:
            raise _Return(self.ev(st.value, frame) if st.value is not None else None)
        elif t is ast.Break:
            raise _Break()
        elif t is ast.Continue:
            raise _Continue()
        elif t is ast.Raise:
            exc = st.exc.func if isinstance(st.exc, ast.Call) else st.exc
            if isinstance(exc, ast.Name) and exc.id == "SystemExit":
                raise _ExitCall()  # a clean exit, like sys.exit()
            # error paths behind UNKNOWN conditions are ignored like early returns (see _branch)
            raise _Raise(UNKNOWN)
        elif t in (ast.FunctionDef, ast.AsyncFunctionDef):
            ref = frame[st.name] = FuncRef(st, closure=frame if frame is not self.globals else None)
            if st.decorator_list:
                self._engine_decorators(st, ref, frame)
        elif t is ast.ClassDef:
            methods = {s.name: s for s in st.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
            frame[st.name] = ClassRef(st, methods)
        elif t is ast.Match:
            self.ev(st.subject, frame)
            for case in st.cases:
                self._branch(case.body, frame)
        # Import, Global, Nonlocal, Pass, Delete, Assert: nothing a rank does differently

    def _exec_if(self, st: ast.If, frame: dict) -> None:
        test = truth_of(self.ev(st.test, frame))
        if test is True:
            self.exec_block(st.body, frame)
        elif test is False:
            self.exec_block(st.orelse, frame)
        else:
            key = self._test_key(st.test)
            before = dict(frame), dict(self.attrs)
            met = self.splits.meet(key, frame, self.attrs)
            met.enter(True)
            seen = len(self.trace.events)
            returned = self._branch(st.body, frame)
            if returned is not None and self._synchronises(seen):
                # every rank decides this test alike, and the arm synchronises and then returns: a
                # rank that takes it never reaches what follows the `if`, so one walk on past it must
                # not hold the arm's collectives as well (`if not ok: barrier(); return` ...
                # `barrier()` is one barrier either way); the walk goes on as the ranks that skip it
                del self.trace.events[seen:]
            after_body = dict(frame), dict(self.attrs)
            mark = self.splits.tick
            if st.orelse:
                # the else arm starts from the state before the if: `model = model.cuda()` there
                # is the plain model even when the body wrapped it in DDP
                _reset(frame, before[0])
                _reset(self.attrs, before[1])
                met.enter(False)
                body_end = len(self.trace.events)
                self._branch(st.orelse, frame)
                if returned is None and self._partly_known(st.test, frame) and self._same_collectives(seen, body_end):
                    # `if rank == 0 and n > 1: ...; barrier() else: barrier()`: whichever arm this
                    # rank takes, it makes the same collectives; one walk records them once
                    self.trace.events[body_end:] = [e for e in self.trace.events[body_end:] if e.kind not in _SYNCS]
            else:
                _reset(frame, before[0])
                _reset(self.attrs, before[1])
                met.enter(False)
            self.splits.join(key, frame, after_body[0], mark, before[0])
            self.splits.join(key, self.attrs, after_body[1], mark, before[1])
            met.leave()

    def _test_key(self, test: ast.expr) -> tuple[str, bool]:
        """The text of an ``if`` test without its ``not``s, and whether they negate it: two tests
        with the same text decide alike while the names in them are not rebound."""
        positive = True
        while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, positive = test.operand, not positive
        text = self.test_texts.get(test)
        if text is None:
            text = self.test_texts[test] = ast.unparse(test)
        return text, positive

    def _branch(self, body: list[ast.stmt], frame: dict) -> _Return | None:
        """A branch every rank may or may not take alike: walk it, ignore its early exits. Gives the
        return that ended it, if it surely returned."""
        try:
            self.exec_block(body, frame)
        except (_Raise, _ExitCall):
            pass
        except _Return as r:
            if self.returns_seen:  # the function may return this instead: see _walk_function
                self.returns_seen[-1].append(r.value)
            return r
        except (_Break, _Continue):
            pass
        return None

    def _partly_known(self, test: ast.expr, frame: dict) -> bool:
        """``rank == 0 and n > 1`` on rank 0: a part of the test is decided here (the rank's), the
        rest is not. Other ranks may have decided the whole test; this one takes one arm or the
        other, not both."""
        if not isinstance(test, ast.BoolOp):
            return False
        mark = len(self.trace.events)
        try:
            return any(truth_of(self.ev(v, frame)) in (True, False) for v in test.values)
        finally:
            del self.trace.events[mark:]  # asked again, not run again: what the test records, it did once

    def _same_collectives(self, seen: int, body_end: int) -> bool:
        """The events from ``seen`` to ``body_end`` (the if's body) and those after (its else) hold
        the same collectives in the same order, and at least one."""
        def ops(events):
            return [(e.kind, e.op, e.arg) for e in events if e.kind in _SYNCS]

        body = ops(self.trace.events[seen:body_end])
        return bool(body) and body == ops(self.trace.events[body_end:])

    def _synchronises(self, since: int) -> bool:
        """A collective, point-to-point call or DDP forward was recorded after event ``since``."""
        return any(e.kind in _SYNCS for e in self.trace.events[since:])

    def _exec_for(self, st: ast.For | ast.AsyncFor, frame: dict) -> None:
        it = self.ev(st.iter, frame)
        if isinstance(it, (range, tuple, list)) and len(it) <= MAX_UNROLL:
            for v in it:
                self.bind(st.target, v, frame)
                try:
                    self.exec_block(st.body, frame)
                except _Break:
                    return
                except _Continue:
                    continue
        else:
            self.bind(st.target, UNKNOWN, frame)
            self._loop_body(st.body, frame)
        self.exec_block(st.orelse, frame)

    def _loop_body(self, body: list[ast.stmt], frame: dict) -> None:
        try:
            self.exec_block(body, frame)
        except (_Break, _Continue):
            pass

    def bind(self, target: ast.AST, value: object, frame: dict) -> None:
        if isinstance(target, ast.Name):
            frame[target.id] = self._heuristic(target.id, value)
            self.splits.wrote(frame, target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            elts = target.elts
            vals = value if isinstance(value, tuple) and len(value) == len(elts) else (UNKNOWN,) * len(elts)
            for e, v in zip(elts, vals):
                self.bind(e.value if isinstance(e, ast.Starred) else e, v, frame)
        elif isinstance(target, ast.Attribute):
            key = dotted(target)
            if key:
                self.attrs[key] = self._heuristic(target.attr, value)
                self.splits.wrote(self.attrs, key)
        elif isinstance(target, ast.Subscript):
            self.ev(target.value, frame)

    def _heuristic(self, name: str, value: object) -> object:
        """``rank = <something we cannot read>`` is still the rank: scripts name it for what it is."""
        if value is UNKNOWN and name in RANK_NAMES:
            return self._named_value(name)
        return value

    @property
    def W(self) -> int:
        """The world size; reading it marks the walk as one whose path may depend on it (a walk that
        never reads it is the same for that rank in every larger world)."""
        self.touched_world = True
        return self._world

    def _named_value(self, name: str) -> object:
        self.touched_rank = True
        kind = RANK_NAMES[name]
        return self.rank if kind == "rank" else self.local if kind == "local" else self.W

    # -- expressions -------------------------------------------------------------------------
    def _lookup(self, name: str, frame: dict) -> object:
        if name in frame:
            return frame[name]
        if name in self.globals:
            return self.globals[name]
        if name in RANK_NAMES:
            return self._named_value(name)
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        return UNKNOWN

    def ev(self, e: ast.AST | None, frame: dict) -> object:
        t = type(e)
        if t is ast.Constant:
            return e.value
        if t is ast.Name:
            return self._lookup(e.id, frame)
        if t is ast.Call:
            return self._call(e, frame)
        if t is ast.Attribute:
            return self._attribute(e, frame)
        if t is ast.Compare:
            if len(e.ops) == 1 and type(e.ops[0]) in (ast.Eq, ast.NotEq) and self.option_defaults:
                return self._equality_with_options(e, frame)
            left = self.ev(e.left, frame)
            result: object = True
            for op, comp in zip(e.ops, e.comparators):
                right = self.ev(comp, frame)
                if result is True:
                    if _concrete(left, right):  # ``x is None`` with x unknown is unknown
                        try:
                            result = bool(_CMPOPS[type(op)](left, right))
                        except Exception:  # noqa: BLE001 - any error of a concrete operation means the value is unknown
                            result = UNKNOWN
                    else:
                        result = UNKNOWN
                left = right
            return result
        if t is ast.BoolOp:
            return self._boolop(e, frame)
        if t is ast.BinOp:
            return self._binop(type(e.op), self.ev(e.left, frame), self.ev(e.right, frame))
        if t is ast.UnaryOp:
            v = self.ev(e.operand, frame)
            if isinstance(e.op, ast.Not):
                return negation(v)
            if isinstance(v, (int, float)) and not isinstance(v, bool) or isinstance(v, bool):
                try:
                    return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}[
                        type(e.op)
                    ](v)
                except Exception:  # noqa: BLE001 - any error of a concrete operation means the value is unknown
                    return UNKNOWN
            return UNKNOWN
        if t is ast.IfExp:
            truth = truth_of(self.ev(e.test, frame))
            if truth is True:
                return self.ev(e.body, frame)
            if truth is False:
                return self.ev(e.orelse, frame)
            met = self.splits.meet(self._test_key(e.test), frame, self.attrs)
            met.enter(True)
            self.ev(e.body, frame)
            met.enter(False)
            self.ev(e.orelse, frame)
            met.restore()
            return UNKNOWN
        if t in (ast.Tuple, ast.List):
            return tuple(self.ev(x, frame) for x in e.elts if not isinstance(x, ast.Starred))
        if t is ast.Subscript:
            return self._subscript(e, frame)
        if t is ast.JoinedStr:
            parts = []
            for v in e.values:
                if isinstance(v, ast.Constant):
                    parts.append(str(v.value))
                else:
                    inner = self.ev(v.value, frame)
                    if not _concrete(inner) or v.format_spec is not None:
                        return UNKNOWN
                    parts.append(str(inner))
            return "".join(parts)
        if t is ast.NamedExpr:
            v = self.ev(e.value, frame)
            self.bind(e.target, v, frame)
            return v
        if t in (ast.Dict,):
            for k in e.keys:
                if k is not None:
                    self.ev(k, frame)
            for v in e.values:
                self.ev(v, frame)
            return UNKNOWN
        if t in (ast.Set,):
            for v in e.elts:
                self.ev(v, frame)
            return UNKNOWN
        if t is ast.Starred:
            return self.ev(e.value, frame)
        if t is ast.Await:
            return self.ev(e.value, frame)
        if t in (ast.ListComp, ast.GeneratorExp, ast.SetComp):
            return self._comprehension(e, frame)
        if t is ast.Lambda:  # walked where it is called (or handed to an engine), not here
            return LambdaRef(e, frame if frame is not self.globals else None)
        # dict comprehensions: their calls run many times; skip
        return UNKNOWN

    def _comprehension(self, e: ast.ListComp | ast.GeneratorExp | ast.SetComp, frame: dict) -> object:
        gen = e.generators[0]
        it = self.ev(gen.iter, frame)
        inner = dict(frame)
        if len(e.generators) == 1 and isinstance(it, (range, tuple)) and len(it) <= MAX_UNROLL:
            out = []
            for v in it:
                self.bind(gen.target, v, inner)
                keep = [truth_of(self.ev(c, inner)) for c in gen.ifs]
                if any(k is UNKNOWN for k in keep):
                    return UNKNOWN
                if all(keep):
                    out.append(self.ev(e.elt, inner))
            return tuple(out) if isinstance(e, ast.ListComp) else UNKNOWN
        for g in e.generators:
            self.bind(g.target, UNKNOWN, inner)
        self.ev(e.elt, inner)  # once, so its calls are seen; its values are unknown
        return UNKNOWN

    def _boolop(self, e: ast.BoolOp, frame: dict) -> object:
        # short-circuit like Python; an UNKNOWN operand only matters if nothing decides the result
        is_and = isinstance(e.op, ast.And)
        seen_unknown = False
        last: object = None
        for v in e.values:
            last = self.ev(v, frame)
            truth = truth_of(last)
            if truth is UNKNOWN:
                seen_unknown = True
            elif truth is (not is_and):
                return last
        return UNKNOWN if seen_unknown else last

    def _binop(self, op: type, a: object, b: object) -> object:
        fn = _BINOPS.get(op)
        if fn is None or not _concrete(a, b):
            return UNKNOWN
        if op is ast.Mult and (isinstance(a, (str, tuple)) or isinstance(b, (str, tuple))):
            return UNKNOWN
        try:
            v = fn(a, b)
        except Exception:  # noqa: BLE001 - any error of a concrete operation means the value is unknown
            return UNKNOWN
        return v if _small(v) else UNKNOWN

    def _subscript(self, e: ast.Subscript, frame: dict) -> object:
        q = self.syntax.get(e, _MISSING)
        if q is _MISSING:
            q = self.syntax[e] = qualify(dotted(e.value), self.aliases)
        key = self.ev(e.slice, frame)
        if q == "os.environ":
            return self._env(key)
        base = self.ev(e.value, frame)
        if _concrete(base, key) and isinstance(base, (tuple, str, range)):
            try:
                return base[key]
            except Exception:  # noqa: BLE001 - any error of a concrete operation means the value is unknown
                return UNKNOWN
        if base is UNKNOWN and isinstance(key, str) and is_distributed_flag(key):
            return True  # `cfg["DDP"]` read from a file: in the distributed run it holds
        return self._rank_node(e) if self.rank_nodes else UNKNOWN

    def _env(self, key: object) -> object:
        if key in _RANK_ENV:
            self.touched_rank = True
        if key in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
            return str(self.rank)
        if key in ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"):
            return str(self.local)
        if key in ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "LOCAL_WORLD_SIZE", "PMI_SIZE"):
            return str(self.W)
        return UNKNOWN

    def _equality_with_options(self, e: ast.Compare, frame: dict) -> object:
        """``a == b`` / ``a != b`` in a file with int-valued command-line options: each side walked
        once, and the rank against an option the walk cannot read (``rank != args.main_gpu``) taken
        at the option's default (``default=0``), as the script runs unless told otherwise."""
        sides = (e.left, e.comparators[0])
        values, by_rank = [], []
        for side in sides:
            touched, self.touched_rank = self.touched_rank, False
            values.append(self.ev(side, frame))
            by_rank.append(self.touched_rank)
            self.touched_rank = touched or self.touched_rank
        left, right = values
        for i, side in enumerate(sides):
            other = sides[1 - i]
            named = (
                isinstance(side, ast.Name) and RANK_NAMES.get(side.id, "world") != "world"
            ) or id(side) in self.rank_nodes
            if (
                values[1 - i] is UNKNOWN
                and isinstance(other, ast.Attribute)
                and other.attr in self.option_defaults
                and values[i].__class__ is int
                and (by_rank[i] or named)
            ):
                left, right = values[i], self.option_defaults[other.attr]
                break
        if not _concrete(left, right):
            return UNKNOWN
        try:
            return bool(_CMPOPS[type(e.ops[0])](left, right))
        except Exception:  # noqa: BLE001 - any error of a concrete operation means the value is unknown
            return UNKNOWN

    def _attribute(self, e: ast.Attribute, frame: dict) -> object:
        key = self.syntax.get(e, _MISSING)
        if key is _MISSING:
            key = self.syntax[e] = dotted(e)
        if key is not None and key in self.attrs:
            return self.attrs[key]
        base = self.ev(e.value, frame)
        if base is not UNKNOWN:  # the usual case skips the three checks
            if base.__class__ is tuple and len(base) == 3 and base[0] == "ddp_attr":
                name = base[2]
                if not (name.startswith("_") or name in DDP_ATTRIBUTES or name in DDP_METHODS or name in self.set_attributes):
                    self._record("missing_attr", name, e.value)  # `ddp.model.state_dict()`
                return UNKNOWN
            if isinstance(base, Engine):
                # its other attributes (``trainer.state``) are not modelled
                return EngineMethod(base, e.attr) if e.attr in event_engines.METHODS else UNKNOWN
            if isinstance(base, DDPModel):
                return UNKNOWN if e.attr == "module" else ("ddp_attr", base, e.attr)
            if isinstance(base, Evaluator):
                return ("evaluator_attr", base, e.attr)
            if isinstance(base, FSDPModel):
                return UNKNOWN if e.attr == "module" else ("fsdp_attr", base, e.attr)
            if isinstance(base, ClassRef) and e.attr in base.methods:
                return FuncRef(base.methods[e.attr], base, ctx=base.ctx)
            if isinstance(base, Instance):
                if e.attr in base.cls.methods:
                    ref = FuncRef(base.cls.methods[e.attr], base.cls, bound_self=True, ctx=base.cls.ctx)
                    return self._property(ref, e) if is_property(ref.node) else ref
                if e.attr in _self_attributes(base.cls.node):
                    # ``ctx.is_main`` reads what the class's methods set as ``self.is_main``: a rank
                    # test stored on an object goes wherever the object goes
                    return self.attrs.get(f"self.{e.attr}", UNKNOWN)
        if isinstance(e.value, ast.Name) and e.value.id == "self":
            cls = frame.get("__class__")
            if isinstance(cls, ClassRef) and e.attr in cls.methods:
                ref = FuncRef(cls.methods[e.attr], cls, bound_self=True, ctx=cls.ctx)
                return self._property(ref, e) if is_property(ref.node) else ref
        if base is UNKNOWN:
            if e.attr == "WORLD" and (qualify(key, self.aliases) or "").endswith("distributed.group.WORLD"):
                return WORLD_GROUP  # kept in `self.group = dist.group.WORLD`: the default group
            main = _main_process_kind(e.attr) if e.attr.startswith("is_") or e.attr in MAIN_PROCESS_NAMES else None
            if main is not None:
                self.touched_rank = True
            if e.attr in RANK_NAMES:
                return self._named_value(e.attr)
            if main is not None:
                return self.rank == 0 if main == GLOBAL else self.local == 0
            if is_distributed_flag(e.attr):
                return True  # `args.distributed` set where the walk cannot see: this run is one
            if self.rank_nodes:
                return self._rank_node(e)
        return UNKNOWN

    def _property(self, ref: FuncRef, e: ast.Attribute) -> object:
        """``obj.is_main`` of a ``@property``: its value is what the method returns (``self.rank ==
        0``), not the method, which would read as true on every rank."""
        return self._invoke(ref, e, [], {}, sources=False)

    def _rank_node(self, e: ast.AST) -> object:
        kind = self.rank_nodes.get(id(e))
        if kind is None:
            return UNKNOWN
        self.touched_rank = True
        return self.rank if kind == "global" else self.local if kind == "local" else 0  # one node

    # -- calls -------------------------------------------------------------------------------
    def _record(self, kind: str, op: str, node: ast.AST, **kw) -> Event:
        ev = Event(
            kind,
            op,
            node,
            tuple(self.chain),
            path=self.path,
            chain_paths=tuple(self.chain_paths),
            open_loop=self.open_loops[-1] if self.open_loops else None,
            **kw,
        )
        self.trace.events.append(ev)
        return ev

    def _call_syntax(self, node: ast.Call) -> _CallSyntax:
        facts = self.syntax.get(node)
        if facts is None:
            facts = self.syntax[node] = _CallSyntax.of(node, self.aliases)
        return facts  # type: ignore[return-value]

    def _args(self, node: ast.Call, frame: dict) -> tuple[list, dict]:
        args: list = []
        spread = True
        for a in node.args:
            v = self.ev(a, frame)
            if not spread:
                continue
            if isinstance(a, ast.Starred):
                # ``fn(*args)``: a known tuple spreads over the parameters; after an unknown one the
                # positions are unknown (the parameters' names still tell the rank)
                if isinstance(v, tuple):
                    args.extend(v)
                    continue
                v, spread = UNKNOWN, False
            args.append(v)
        kwargs = {k.arg: self.ev(k.value, frame) for k in node.keywords if k.arg}
        for k in node.keywords:
            if k.arg is None:
                self.ev(k.value, frame)
        return args, kwargs

    def _call(self, node: ast.Call, frame: dict) -> object:
        syntax = self._call_syntax(node)
        try:
            return self._call_inner(node, frame, syntax)
        finally:
            # Lists are modelled as tuples; a call may fill one in place (``broadcast_object_list(objs)``,
            # ``objs.append(x)``), so a list variable handed to a call is no longer known.
            for name in syntax.handed:
                if isinstance(frame.get(name), tuple):
                    frame[name] = UNKNOWN

    def _call_inner(self, node: ast.Call, frame: dict, syntax: _CallSyntax) -> object:
        func = node.func
        name, head, op = syntax.name, syntax.head, syntax.dist_op
        # names defined in this file win over the heuristics below
        local = (
            self.ev(func, frame)
            if name is None or head in frame or (head in self.globals) or syntax.on_self
            else UNKNOWN
        )
        if (
            local is UNKNOWN
            and self.resolve is not None
            and name is not None
            and op is None
            and head not in frame
            and head not in self.globals
        ):
            local = self.resolve(name, self.path)  # a function of another file of the project
            if local is None:
                local = UNKNOWN
        if op is not None and not isinstance(local, FuncRef):
            return self._dist_call(op, node, frame)
        args, kwargs = self._args(node, frame)
        if syntax.last is not None and "unwrap" in syntax.last.lower():
            return UNKNOWN  # unwrap_model(model): the plain module, whatever the helper's branches say
        if local is not UNKNOWN:  # the usual case: nothing this file defines
            if isinstance(local, FuncRef):
                return self._invoke(local, node, args, kwargs, frame)
            if isinstance(local, LambdaRef):
                return self._invoke_lambda(local, node, args, kwargs)
            if isinstance(local, EngineMethod):
                return self._engine_call(local, node, args)
            if isinstance(local, ClassRef):
                init = local.methods.get("__init__")
                if init is not None:
                    self._invoke(
                        FuncRef(init, local, bound_self=True, ctx=local.ctx), node, args, kwargs, frame
                    )
                return Instance(local)
            if isinstance(local, DDPModel):
                if local.broadcasts:
                    self._record("ddp_forward", "forward", node)
                return UNKNOWN
            if isinstance(local, FSDPModel):
                self._record("collective", "all_gather", node, library=f"{name}(...)")  # the forward
                return UNKNOWN
            if isinstance(local, Evaluator) or isinstance(local, tuple) and local[0] == "evaluator_attr":
                ev, method = (local, "__call__") if isinstance(local, Evaluator) else (local[1], local[2])
                if method in _RUNS_EVALUATION or names_evaluation(method):
                    self._evaluator_forward(ev, f"{ev.name}.{method}" if method != "__call__" else ev.name, node)
                return UNKNOWN
            if isinstance(local, tuple) and len(local) == 3 and local[0] == "fsdp_attr":
                if local[2] in _RETURNS_SELF:
                    return local[1]
                if local[2] == "forward" or local[2] == "state_dict" and self.fsdp_full_state_dicts:
                    self._record("collective", "all_gather", node, library=f"{name}()")
                return UNKNOWN
            if isinstance(local, tuple) and len(local) == 3 and local[0] == "ddp_attr":
                if local[2] in _RETURNS_SELF:  # DDP(model).to(device) is still the DDP model
                    if local[2] in ("train", "eval"):
                        local[1].training = local[2] == "train" and not (args and args[0] is False)
                    return local[1]
                if local[2] == "state_dict":
                    self._record("state_dict", "state_dict", node)
                elif local[2] == "load_state_dict":
                    self._record("load_state_dict", "load_state_dict", node)  # keys with `module.`
                elif local[2] in ("forward",):
                    if local[1].broadcasts:
                        self._record("ddp_forward", "forward", node)
                elif not local[2].startswith("_") and local[2] not in DDP_METHODS:
                    self._record("missing_attr", local[2], node)  # AttributeError: it is on `.module`
                return UNKNOWN
        if node.keywords and calls_base_init(node):
            # a base class this file does not show keeps what its constructor is given under the
            # keyword's name (``super().__init__(model=model)`` -> ``self.model``): a wrapped model too
            for k in node.keywords:
                if k.arg and isinstance(kwargs.get(k.arg), (DDPModel, FSDPModel)):
                    self.attrs.setdefault(f"self.{k.arg}", kwargs[k.arg])
        if isinstance(func, ast.Attribute) and func.attr == "wait" and node.args == []:
            base = self.ev(func.value, frame)
            if isinstance(base, Request):
                self._record("wait", "wait", node, req=base.id)
            return UNKNOWN
        return self._known_call(syntax, node, args, kwargs, frame)

    def _known_call(
        self, syntax: _CallSyntax, node: ast.Call, args: list, kwargs: dict, frame: dict
    ) -> object:
        q = syntax.qualname
        if q is None:
            return UNKNOWN
        if self.sync_names:
            row = sync_call(node, self.sync_libraries)
            if row is not None:  # a library call with a collective inside
                self._record("collective", row.op, node, library=dotted(node.func))
                return UNKNOWN
            if "accelerate" in self.sync_libraries and is_accelerate_prepare(node):
                # accelerate's Accelerator.prepare wraps the model in DDP in a distributed run and
                # gives the objects back in the order they came
                wrapped = tuple(DDPModel() if _names_a_model(a) else UNKNOWN for a in node.args)
                return wrapped[0] if len(wrapped) == 1 else wrapped
        last = syntax.last
        if syntax.is_fsdp:
            return FSDPModel()
        if q == "torch.compile" and args and isinstance(args[0], (DDPModel, FSDPModel)):
            return args[0]  # the compiled module's forward is the wrapper's: its collectives too
        if syntax.is_ddp:
            # (a SyncBatchNorm model syncs its statistics in the forward whatever DDP broadcasts)
            quiet_buffers = _keyword_is_false(node, "broadcast_buffers")
            sync_bn = self._uses_sync_bn()
            return DDPModel(broadcasts=not quiet_buffers or sync_bn, sync_bn_only=quiet_buffers and sync_bn)
        if last in _PROGRESS_BARS and args and isinstance(args[0], (tuple, range)):
            return args[0]  # `tqdm(seeds)` iterates the seeds: on rank 0 as the others do without it
        if last == "trange" and args and all(isinstance(a, int) and not isinstance(a, bool) for a in args[:3]):
            return range(*args[:3])  # tqdm's `trange(n)` is `tqdm(range(n))`
        if q == "apex.amp.initialize" and len(args) >= 2:
            return args[0], args[1]  # apex gives back the models and optimizers it was handed
        if last and last[:1].isupper():
            model = next((a for a in (*args, *kwargs.values()) if isinstance(a, (DDPModel, FSDPModel))), None)
            if model is not None and names_evaluator(last):
                return Evaluator(last, model)
        if (
            last
            and any(isinstance(a, DDPModel) and a.broadcasts for a in (*args, *kwargs.values()))
            and names_evaluation(last)  # (a regex: after the cheap test, most calls get no DDP model)
        ):
            # `evaluate(ddp_model, val_loader)` of another module: it runs the wrapper's forward
            self._record("ddp_forward", "forward", node, arg=last)
            return UNKNOWN
        if last and any(isinstance(a, FSDPModel) for a in (*args, *kwargs.values())) and names_evaluation(last):
            # `compute_accuracy(model=fsdp_model, ...)` of another module: the forward all-gathers
            self._record("collective", "all_gather", node, library=f"{last}(...)")
            return UNKNOWN
        if (
            last
            and any(isinstance(a, (DDPModel, FSDPModel)) for a in (*args, *kwargs.values()))
            and names_training(last)
        ):
            # `train_one_epoch(epoch, loader, opt, ddp_model)` of another module: the wrapper's
            # backward all-reduces the gradients with every rank
            self._record("collective", "all_reduce", node, library=f"{last}(...)")
            return UNKNOWN
        if q in ("hasattr", "isinstance") and len(args) == 2 and isinstance(args[0], DDPModel):
            # `hasattr(model, "module")`, `isinstance(model, DDP)`: true of the DDP wrapper, so the
            # other arm runs the plain model only (BigVGAN's validation picks its forward so)
            return _tests_for_wrapper(q, node.args[1], args[1], self.aliases)
        made = event_engines.makes_engine(q)
        if made is not None:
            first = (
                args[0] if args else kwargs.get("process_function" if made == "process" else "model", UNKNOWN)
            )
            return Engine(process=first) if made == "process" else Engine(model=first)
        if self.path is not None and last in _FS_WRITES and q not in ("torch.save",):
            self._record("fs", last, node)
        if q in ("torch.save",):
            self._record(
                "save", "save", node, arg=_path_src(node.args[1], frame) if len(node.args) > 1 else None
            )
            return None
        if q in _COPIES and len(node.args) > 1:
            # `shutil.copyfile(last, best)`: the copy writes `best` as a save would (a load of it
            # on the other ranks races the copy just the same)
            self._record("save", "copy", node, arg=_path_src(node.args[1], frame))
        if q in ("torch.load",):
            self._record("load", "load", node, arg=_path_src(node.args[0], frame) if node.args else None)
            return UNKNOWN
        if q in ("os.environ.get", "os.getenv"):
            v = self._env(args[0]) if args else UNKNOWN
            return v if v is not UNKNOWN else (args[1] if len(args) > 1 and _concrete(args[1]) else UNKNOWN)
        if q in EXIT_CALLS:
            raise _ExitCall()
        if q in ("int", "str", "bool", "float") and len(args) == 1 and _concrete(args[0]):
            try:
                return {"int": int, "str": str, "bool": bool, "float": float}[q](args[0])
            except Exception:  # noqa: BLE001 - any error of a concrete operation means the value is unknown
                return UNKNOWN
        if q == "range" and args and _concrete(*args) and all(isinstance(a, int) for a in args):
            try:
                r = range(*args)
            except Exception:  # noqa: BLE001 - any error of a concrete operation means the value is unknown
                return UNKNOWN
            return r if len(r) <= 1 << 20 else UNKNOWN
        if q in ("len",) and args and isinstance(args[0], (tuple, str, range)):
            return len(args[0])
        if q in ("min", "max") and len(args) > 1 and _concrete(*args):
            try:
                return (min if q == "min" else max)(*args)
            except Exception:  # noqa: BLE001 - any error of a concrete operation means the value is unknown
                return UNKNOWN
        if last in ("spawn", "start_processes") and ("multiprocessing" in q or q.startswith("torch.")):
            return self._spawn(node, frame)
        if "." not in q or q.startswith("utils") or "." in q and q.rsplit(".", 1)[0] not in ("os", "sys"):
            main = _main_process_kind(last)
            if main is not None or last in (
                "get_rank",
                "get_global_rank",
                "get_local_rank",
                "get_world_size",
            ):
                self.touched_rank = True
            if main is not None:
                return self.rank == 0 if main == GLOBAL else self.local == 0
            if last in ("get_rank", "get_global_rank"):
                return self.rank
            if last == "get_local_rank":
                return self.local
            if last == "get_world_size":
                return self.W
        return UNKNOWN

    def _evaluator_forward(self, ev: Evaluator, what: str, node: ast.Call) -> None:
        if isinstance(ev.model, FSDPModel):
            self._record("collective", "all_gather", node, library=f"{what}(...)")
        elif ev.model.broadcasts:
            self._record("ddp_forward", "forward", node, arg=what)

    def _dist_call(self, op: str, node: ast.Call, frame: dict) -> object:
        args, kwargs = self._args(node, frame)
        if op in ("get_rank", "get_global_rank", "get_world_size", "get_node_local_rank"):
            self.touched_rank = True
        if op == "get_rank" or op == "get_global_rank":
            return self.rank if not node.args and "group" not in kwargs else UNKNOWN
        if op == "get_world_size":
            return self.W if not node.args and "group" not in kwargs else UNKNOWN
        if op == "get_node_local_rank":
            return self.local
        if op in ("is_initialized", "is_available", "is_nccl_available", "is_gloo_available"):
            return True
        if op in COLLECTIVES:
            group = group_of(op, node)
            if group is not None and (group in self.world_groups or WORLD_GROUP in (kwargs.get("group"), *args[1:])):
                group = None  # a name that holds the default group (`group=self.group`)
            self._record("collective", op, node, arg=group)
            return UNKNOWN
        if op in P2P:
            key = "dst" if op in ("send", "isend") else "src"
            peer = kwargs.get(key, args[1] if len(args) > 1 else None)
            if "group" in kwargs or "group_dst" in kwargs or "group_src" in kwargs or len(args) > 2:
                peer = UNKNOWN  # group-relative ranks: not modelled
            if op in ("isend", "irecv"):
                self.next_req += 1
                self._record("p2p", op, node, peer=peer, req=self.next_req)
                return Request(self.next_req)
            self._record("p2p", op, node, peer=peer)
            return None
        if op in ("init_process_group", "destroy_process_group"):
            self._record("lifecycle", op, node)
        return UNKNOWN

    def _spawn(self, node: ast.Call, frame: dict) -> object:
        if not node.args:
            return UNKNOWN
        fn = self.ev(node.args[0], frame)
        if not isinstance(fn, FuncRef):
            return UNKNOWN
        extra: list = []
        for k in node.keywords:
            if k.arg == "args":
                v = self.ev(k.value, frame)
                extra = list(v) if isinstance(v, tuple) else [UNKNOWN] * len(getattr(k.value, "elts", []))
        self.touched_rank = True
        return self._invoke(fn, node, [self.local, *extra], {}, sources=False)

    def _bind(self, ref: FuncRef, args: list, kwargs: dict, use_defaults: bool = True) -> dict:
        return bind_arguments(
            ref.node.args,
            args,
            kwargs,
            (lambda d: self.ev(d, self.globals)) if use_defaults else unknown_default,
            {"__class__": ref.cls} if ref.cls is not None else {},
            UNKNOWN if ref.bound_self else FREE,
            self._heuristic,
        )

    def _invoke(
        self,
        ref: FuncRef,
        node: ast.Call,
        args: list,
        kwargs: dict,
        caller: dict | None = None,
        sources: bool = True,
    ) -> object:
        fn = ref.node
        if fn in self.stack or len(self.stack) >= MAX_DEPTH:
            return UNKNOWN
        if self.seeded and ref.bound_self:
            # the method that wraps the model, called from the entry: before it the model is plain
            for key in self.seeded & _wrapped_self_attributes(fn, self.aliases):
                self.attrs[key] = UNKNOWN
                self.seeded.discard(key)
        kind = self.rank_decorated.get(id(fn)) if ref.ctx is None else None
        if kind is not None:
            # `@master_only def validate(self)`: the decorator runs it on one rank only
            self.touched_rank = True
            if (self.rank if kind == GLOBAL else self.local) != 0:
                return UNKNOWN
        ctx = ref.ctx
        saved = None
        if ctx is not None and ctx.path != self.path:
            # walk it with its own file's names (and record its events as that file's); a function
            # handed over (a callback, ``run(main)``) keeps the names of the file it came from
            here = self._context()
            args = [_carry(a, here) for a in args]
            kwargs = {k: _carry(v, here) for k, v in kwargs.items()}
            saved = (self.aliases, self.globals, self.path)
            self.chain.append(node.lineno)
            self.chain_paths.append(self.path)
            self.aliases, self.globals, self.path = ctx.aliases, ctx.globals, ctx.path
        else:
            self.chain.append(node.lineno)
            self.chain_paths.append(self.path)
        try:
            frame = self._bind(ref, args, kwargs)
            _enclose(frame, ref.closure)
            if sources:
                frame[_SRC] = (ref, node, caller)  # worked out only if a save/load asks (unparse is slow)
            result = self._walk_function(fn, frame)
            # a function the other file hands back (``get_train_fn()``) is walked with its names
            return _carry(result, ctx) if saved is not None else result
        finally:
            self.chain.pop()
            self.chain_paths.pop()
            if saved is not None:
                self.aliases, self.globals, self.path = saved

    def _invoke_lambda(self, ref: LambdaRef, node: ast.AST, args: list, kwargs: dict) -> object:
        fn = ref.node
        if fn in self.stack or len(self.stack) >= MAX_DEPTH:
            return UNKNOWN
        frame = bind_arguments(
            fn.args, args, kwargs, lambda d: self.ev(d, self.globals), {}, FREE, self._heuristic
        )
        _enclose(frame, ref.closure)
        self.chain.append(node.lineno)
        self.chain_paths.append(self.path)
        self.stack.append(fn)
        try:
            return self.ev(fn.body, frame)
        finally:
            self.stack.pop()
            self.chain.pop()
            self.chain_paths.pop()

    def _call_value(self, fn: object, node: ast.AST, args: list) -> object:
        """Call a function value handed over (an engine's step, a handler), if the file defines it."""
        if isinstance(fn, FuncRef):
            return self._invoke(fn, node, args, {}, sources=False)
        if isinstance(fn, LambdaRef):
            return self._invoke_lambda(fn, node, args, {})
        return UNKNOWN

    def _engine_call(self, method: EngineMethod, node: ast.Call, args: list) -> object:
        """``engine.run(data)``: one step, as a loop body runs once; ``engine.add_event_handler(ev,
        handler, *args)``: the handler runs on this rank, so the walk calls it here."""
        engine = method.engine
        if method.name == event_engines.RUN:
            if engine.process is not None:
                self._call_value(engine.process, node, [engine, UNKNOWN])
            elif isinstance(engine.model, DDPModel) and engine.model.broadcasts:
                self._record("ddp_forward", "forward", node)
        elif method.name == event_engines.ADD_HANDLER and len(args) > 1:
            self._call_value(args[1], node, [engine, *args[2:]])
        return UNKNOWN

    def _engine_decorators(self, st: ast.AST, ref: FuncRef, frame: dict) -> None:
        """``@engine.on(Events.X)``: the handler runs on the ranks that define it."""
        for d in st.decorator_list:
            if (
                isinstance(d, ast.Call)
                and isinstance(d.func, ast.Attribute)
                and d.func.attr == event_engines.ON
            ):
                base = self.ev(d.func.value, frame)
                if isinstance(base, Engine):
                    self._call_value(ref, d, [base])

    def _context(self) -> ModuleContext:
        """The names of the file being walked now (path None: the linted file)."""
        return ModuleContext(self.path, self.aliases, self.globals)

    def _walk_function(self, fn: ast.AST, frame: dict) -> object:
        self.stack.append(fn)
        self.trace.entered.add(id(fn))
        self.returns_seen.append([])
        result = None
        try:
            self.exec_block(fn.body, frame)
        except _Raise:
            if self.path is not None:
                # a function of another file of the project raised: walked without its caller's
                # context, its checks decide on less than they would at run time, so its error path
                # says nothing certain about this rank; the call just gives an unknown value
                return UNKNOWN
            self.trace.truncated = True
            raise _Exit() from None
        except _Return as r:
            result = r.value
        except (_Break, _Continue):
            pass
        finally:
            self.stack.pop()
            seen = self.returns_seen.pop()
        # a return in a branch the walk could not decide may be the one taken: the value is known
        # only when every such return gives the same (``if not found: return False ... return True``
        # is unknown, not True)
        if any(not _same(v, result) for v in seen):
            return UNKNOWN
        return result


_MISSING = object()


def _reset(store: dict, saved: dict) -> None:
    store.clear()
    store.update(saved)


@dataclass
class _Split:
    """``store[key]`` is ``when_true`` where ``test`` holds and ``when_false`` where it does not;
    ``merged`` is what it reads as elsewhere."""

    store: dict  # held, so that its id is not reused while the split is remembered
    test: tuple[str, bool]
    when_true: object
    when_false: object
    merged: object


class RoleSplits:
    """Path correlation of a model's role with the test it was wrapped under: after
    ``if args.distributed: model = DDP(model) else: model = model.cuda()`` the name is not known to
    be the DDP model (unknown is not guilty), but under the same test again (``if args.distributed:
    model.module.state_dict() else: model.state_dict()``) each arm knows which one it holds."""

    def __init__(self):
        self.by_key: dict[tuple[int, str], _Split] = {}
        # when each name or attribute was last bound (values are often the one UNKNOWN, so whether
        # an arm rebound a name cannot be read from the value)
        self.tick = 0
        self.bound: dict[tuple[int, str], int] = {}

    def wrote(self, store: dict, key: str) -> None:
        self.tick += 1
        sk = (id(store), key)
        self.bound[sk] = self.tick
        if self.by_key:
            self.by_key.pop(sk, None)

    def meet(self, test: tuple[str, bool], *stores: dict) -> _Met:
        """The splits an ``if`` on ``test`` decides (none when nothing was split: the usual case)."""
        found = []
        if self.by_key:
            for (sid, key), sp in self.by_key.items():
                if sp.test[0] == test[0] and any(sid == id(st) for st in stores):
                    if sp.store.get(key, _MISSING) is sp.merged:
                        same = sp.test[1] == test[1]
                        found.append((sp, key, sp.when_true if same else sp.when_false,
                                      sp.when_false if same else sp.when_true))
        return _Met(found)

    def join(self, test: tuple[str, bool], store: dict, after_body: dict, mark: int, before: dict | None = None) -> None:
        """``store`` holds the state after the not-taken side of an undecidable ``if``; join in the
        body's. A name only the body set keeps the body's value (as if that arm ran: in
        ``if args.distributed: model = DDP(model)`` the model is the DDP one). A name that holds a
        DDP model on one side only is remembered as split on ``test``; when the else arm bound it to
        something else it reads as unknown elsewhere, so no rule calls its use a DDP forward or a
        wrapper's state_dict."""
        sid = id(store)
        for key, b in after_body.items():
            v = store.get(key, _MISSING)
            if v is b:
                continue
            rebound = self.bound.get((sid, key), 0) > mark  # by the else arm
            if isinstance(b, DDPModel) != isinstance(v, DDPModel) and v is not _MISSING:
                merged = UNKNOWN if rebound else b
                if rebound and isinstance(v, DDPModel) and before is not None and before.get(key, _MISSING) is b:
                    # only the else arm bound it, to the DDP model (`if not cuda_ok: print(...)
                    # elif args.distributed: model = DDP(model)`): as if that arm ran, like a body's
                    merged = v
                sp = self.by_key.get((id(store), key))
                if sp is not None and sp.test[0] == test[0] and _same_pair(sp, b, v):
                    merged = sp.merged  # the arms of a test this split is on: it stays as it was
                store[key] = merged
                # kept for the test's text without its ``not``: when_true is where that holds
                self.by_key[(sid, key)] = _Split(
                    store, (test[0], True), *((b, v) if test[1] else (v, b)), merged
                )
            elif not rebound:
                store[key] = b  # the else arm left it alone
                self.by_key.pop((sid, key), None)
            else:
                # both arms bound it, to different values (`if args.valid: loader = DataLoader(...)
                # else: loader = None`): after the if it may be either, not the else arm's
                if isinstance(b, (DDPModel, FSDPModel)) and type(b) is type(v):
                    store[key] = b  # a DDP wrapper either way (torch's or apex's): the same role
                elif not _same(b, v):
                    store[key] = UNKNOWN
                self.by_key.pop((sid, key), None)


def _same_pair(sp: _Split, a: object, b: object) -> bool:
    return (a is sp.when_true and b is sp.when_false) or (a is sp.when_false and b is sp.when_true)


@dataclass
class _Met:
    """The splits one ``if`` decides: set each name to the value of the arm being walked."""

    found: list

    def enter(self, arm: bool) -> None:
        for sp, key, on_true, on_false in self.found:
            sp.store[key] = on_true if arm else on_false

    def restore(self) -> None:
        for sp, key, _t, _f in self.found:
            sp.store[key] = sp.merged

    def leave(self) -> None:
        """After the if: a name neither arm rebound reads as before (its split still holds)."""
        for sp, key, _t, _f in self.found:
            now = sp.store.get(key, _MISSING)
            if now is sp.when_true or now is sp.when_false:
                sp.store[key] = sp.merged


def _enclose(frame: dict, closure: dict | None) -> None:
    """A nested function reads the names of the frame it was defined in that it does not bind."""
    if closure:
        for k, v in closure.items():
            if k not in frame and k != _SRC:
                frame[k] = v


def _carry(value: object, ctx: ModuleContext | None) -> object:
    """``value`` with the file it belongs to attached, when it is a function, class or object of a
    class that file defined and is about to be walked from another file."""
    if ctx is None:
        return value
    if isinstance(value, FuncRef) and value.ctx is None:
        return FuncRef(value.node, _carry(value.cls, ctx), value.bound_self, ctx, value.closure)
    if isinstance(value, ClassRef) and value.ctx is None:
        return ClassRef(value.node, value.methods, ctx)
    if isinstance(value, Instance) and value.cls.ctx is None:
        return Instance(ClassRef(value.cls.node, value.cls.methods, ctx))
    if isinstance(value, tuple) and any(isinstance(v, (FuncRef, ClassRef, Instance)) for v in value):
        return tuple(_carry(v, ctx) for v in value)
    return value


@dataclass(frozen=True)
class _CallSyntax:
    """What a call's own text says: the same on every walk, so worked out once per call node."""

    name: str | None  # the dotted callee, ``dist.send``; None for ``f()()`` and the like
    qualname: str | None  # with the file's import aliases, ``torch.distributed.send``
    head: str | None  # ``dist``
    on_self: bool  # ``self.<something>(...)``
    dist_op: str | None  # ``send`` for torch.distributed functions
    handed: tuple[str, ...]  # variables handed to the call, a method's object included
    last: str | None  # the qualified name's last part, ``send``
    is_ddp: bool  # DistributedDataParallel(...), or a helper named for wrapping in it (``ddp_wrap(model)``)
    is_fsdp: bool  # FullyShardedDataParallel(...)

    @classmethod
    def of(cls, node: ast.Call, aliases: dict[str, str]) -> _CallSyntax:
        name = dotted(node.func)
        q = qualify(name, aliases) if name else None
        handed = [a.id for a in node.args if isinstance(a, ast.Name)]
        handed += [k.value.id for k in node.keywords if isinstance(k.value, ast.Name)]
        if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
            handed.append(node.func.value.id)
        return cls(
            name=name,
            qualname=q,
            head=name.split(".", 1)[0] if name is not None else None,
            on_self=name is not None and name.startswith("self."),
            dist_op=dist_op(q),
            handed=tuple(handed),
            last=q.rsplit(".", 1)[-1] if q is not None else None,
            is_ddp=is_torch_name(q, "DistributedDataParallel")
            or (bool(node.args) and names_a_ddp_wrapper(q.rsplit(".", 1)[-1] if q else None)),
            is_fsdp=is_torch_name(q, "FullyShardedDataParallel"),
        )


# where a collective takes its process group when it is passed by position
_GROUP_POSITION = {
    "barrier": 0,
    "monitored_barrier": 0,
    "broadcast": 2,
    "all_reduce": 2,
    "all_gather": 2,
    "all_gather_object": 2,
    "broadcast_object_list": 2,
    "all_to_all": 2,
    "reduce": 3,
    "gather": 3,
    "scatter": 3,
    "reduce_scatter": 3,
    "gather_object": 3,
    "scatter_object_list": 3,
    "all_gather_into_tensor": 2,
    "reduce_scatter_tensor": 3,
    "all_to_all_single": 4,
}


def _wrapped_self_attributes(fn: ast.AST, aliases: dict[str, str]) -> frozenset[str]:
    """``self.x`` keys a function binds to a model it wraps there (``self.model = DDP(self.model)``);
    not ``self.model = self.model.eval()``, which keeps what it was."""
    out = getattr(fn, "_ddpdoctor_wrapped_self", None)
    if out is None:
        keys = set()
        for n in ast.walk(fn):
            if not (isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)):
                continue
            syntax = _CallSyntax.of(n.value, aliases)
            if not (syntax.is_ddp or syntax.is_fsdp):
                continue
            keys |= {k for t in n.targets if (k := dotted(t)) is not None and k.startswith("self.")}
        out = fn._ddpdoctor_wrapped_self = frozenset(keys)
    return out


def _self_attributes(cls: ast.ClassDef) -> frozenset[str]:
    """The attributes a class's methods assign on ``self`` (once per class, kept on its node)."""
    out = getattr(cls, "_ddpdoctor_self_attributes", None)
    if out is None:
        names = set()
        for n in ast.walk(cls):
            targets = (
                n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
            )
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    names.add(t.attr)
        out = cls._ddpdoctor_self_attributes = frozenset(names)
    return out


class _WorldGroup:
    """``torch.distributed.group.WORLD`` as a value: the default process group, every rank."""

    def __repr__(self) -> str:
        return "WORLD_GROUP"


WORLD_GROUP = _WorldGroup()


def group_of(op: str, node: ast.Call) -> str | None:
    """The source of the process group a collective runs on; None for the default (whole) group."""
    g = next((k.value for k in node.keywords if k.arg == "group"), None)
    if g is None:
        i = _GROUP_POSITION.get(op)
        g = node.args[i] if i is not None and len(node.args) > i else None
    if g is None or (isinstance(g, ast.Constant) and g.value is None):
        return None
    text = _src(g)
    return None if text is None or text.endswith("WORLD") else text


def _expects_error(expr: ast.AST) -> bool:
    func = expr.func if isinstance(expr, ast.Call) else expr
    name = dotted(func) or ""
    return name.rsplit(".", 1)[-1] in ("assertRaises", "assertRaisesRegex", "raises")


def module_defs(tree: ast.Module) -> dict[str, object]:
    """Top-level functions and classes by name, as walking the module's definitions would bind them."""
    out: dict[str, object] = {}
    for st in tree.body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[st.name] = FuncRef(st)
        elif isinstance(st, ast.ClassDef):
            out[st.name] = ClassRef(
                st, {s.name: s for s in st.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
            )
    return out


_SRC = "\0sources"  # frame key: parameter -> the caller's source text for it (not a Python name)


def _argument_sources(ref: FuncRef, node: ast.Call, caller: dict | None) -> dict[str, str]:
    """What the caller wrote for each parameter (through the caller's own parameters), so a path
    handed down to ``save_checkpoint(path)`` is still the caller's ``os.path.join(out, "last.pt")``."""
    fn = ref.node
    params = [p.arg for p in (*fn.args.posonlyargs, *fn.args.args)]
    if ref.bound_self and params:
        params = params[1:]
    out: dict[str, str] = {}
    for i, a in enumerate(node.args[: len(params)]):
        if isinstance(a, ast.Starred):
            break
        text = _path_src(a, caller)
        if text is not None:
            out[params[i]] = text
    for k in node.keywords:
        if k.arg is not None:
            text = _path_src(k.value, caller)
            if text is not None:
                out[k.arg] = text
    return out


def _path_src(node: ast.AST, frame: dict | None) -> str | None:
    if isinstance(node, ast.Name) and frame is not None:
        known = frame.get(_SRC)
        if isinstance(known, tuple):
            known = frame[_SRC] = _argument_sources(*known)
        if known and node.id in known:
            return known[node.id]
    return _src(node)


def _src(node: ast.AST) -> str | None:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001 - any node ast cannot unparse has no source to show
        return None
