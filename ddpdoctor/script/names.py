"""Import aliases and dotted names: turn ``dist.all_reduce`` into ``torch.distributed.all_reduce``.

Pure ast; the module being read is never imported.
"""

from __future__ import annotations

import ast
import re

from ddpdoctor.script.nodes import walk


def collect_aliases(imports) -> dict[str, str]:
    """Local name -> fully qualified name, from the file's Import/ImportFrom nodes wherever they are
    (scripts often import inside ``main()`` or ``try:``)."""
    out: dict[str, str] = {}
    for node in imports:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    out[a.asname] = a.name
                else:
                    top = a.name.split(".", 1)[0]
                    out.setdefault(top, top)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name != "*":
                    out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


_Name, _Attribute = ast.Name, ast.Attribute

# methods that hand back the module (or tensor) they are called on, moved, cast or switched in
# mode: `model = model.to(device)` still names the same module
SAME_MODULE = frozenset(("to", "cuda", "cpu", "half", "float", "bfloat16", "train", "eval", "requires_grad_"))


def dotted(expr: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None (no alias resolution)."""
    # rules ask this of every call and name, often many times: a bare name and ``x.y`` (most of the
    # answers) without building a list
    cls = expr.__class__
    if cls is _Name:
        return expr.id
    if cls is _Attribute and expr.value.__class__ is _Name:
        return f"{expr.value.id}.{expr.attr}"
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


# Modules that mirror torch.distributed's functions under the same names and meanings, read as
# torch.distributed so every rule sees their ranks and collectives. deepspeed.comm: DeepSpeed's
# communication facade (deepspeed/comm/comm.py: get_rank, get_world_size, barrier, all_reduce,
# broadcast, ... with torch.distributed's signatures); scripts import it as `dist`.
_MIRRORS = (("deepspeed.comm", "torch.distributed"),)


def qualify(name: str | None, aliases: dict[str, str]) -> str | None:
    if name is None:
        return None
    head, _, rest = name.partition(".")
    full = aliases.get(head)
    if full is None:
        return name
    full = f"{full}.{rest}" if rest else full
    for mirror, real in _MIRRORS:
        if full == mirror or full.startswith(mirror + "."):
            return real + full[len(mirror):]
    return full


# torch.distributed sub-modules re-export the same functions; strip them so rules see one name.
_DIST_PREFIXES = (
    "torch.distributed.distributed_c10d.",
    "torch.distributed.",
)


def dist_op(qualname: str | None) -> str | None:
    """``all_reduce`` for ``torch.distributed[.distributed_c10d].all_reduce``, else None."""
    if not qualname:
        return None
    for p in _DIST_PREFIXES:
        if qualname.startswith(p):
            rest = qualname[len(p) :]
            return rest if "." not in rest else None
    return None


# NVIDIA apex's DistributedDataParallel (`from apex.parallel import DistributedDataParallel as DDP`,
# common in older training code) wraps a model as torch's does: `module.` keys, gradients all-reduced
# in backward, the data to be sharded per rank. It counts as torch's.
APEX_DDP = frozenset({"apex.parallel.DistributedDataParallel", "apex.parallel.distributed.DistributedDataParallel"})


def is_torch_name(qualname: str | None, last: str) -> bool:
    """True if ``qualname`` is a torch object whose final component is ``last`` (so both
    ``torch.nn.parallel.DistributedDataParallel`` and ``...parallel.distributed.DistributedDataParallel``,
    and apex's DistributedDataParallel)."""
    if not qualname:
        return False
    return qualname.rsplit(".", 1)[-1] == last and (qualname.startswith("torch.") or qualname in APEX_DDP)


_PROPERTY_DECORATORS = frozenset({"property", "cached_property", "functools.cached_property"})


def is_property(fn: ast.AST) -> bool:
    """A method read as an attribute (``@property``): ``obj.name`` is what it returns."""
    return any(dotted(d) in _PROPERTY_DECORATORS for d in getattr(fn, "decorator_list", ()))


def names_a_ddp_wrapper(last: str | None) -> bool:
    """A helper named for wrapping a model in DDP (``ddp_wrap``, ``wrap_ddp``, ``smart_DDP``,
    ``build_ddp_model``, ``init_distributed_data_parallel_model``): what it returns is the DDP
    model. Not ``ddp_setup``, ``init_ddp`` (a process group) or ``is_ddp``."""
    low = (last or "").lower()
    flat = low.replace("_", "")
    if not ("ddp" in flat or "distributeddataparallel" in flat) or flat == "distributeddataparallel":
        return False
    if low.startswith(("is_", "has_", "get_", "unwrap", "save_", "load_")):
        return False  # a question, or what is done with a DDP model: not what makes one
    return "wrap" in low or "smart" in low or low.startswith(("to_", "make_", "build_")) or low.endswith("_model")


_OTHER_SHARDING = ("fsdp", "zero", "deepspeed", "fullyshard", "horovod", "tensorparallel", "modelparallel")
_RANK_WORDS = frozenset({"local_rank", "localrank", "gpu", "gpu_id", "device_ids", "rank"})


def wraps_for_data_parallel(last: str | None, call: ast.Call, distributed: bool) -> bool:
    """A project helper that returns the model it is given wrapped for data-parallel training,
    named in other words than DDP: ``model = make_data_parallel(model, cfg)`` in a file that sets
    up torch.distributed, or ``model = wrap_model(model, device, opts.local_rank)`` (a wrapper told
    its local rank places DDP on that GPU). Not FSDP, ZeRO, Horovod or tensor/model parallelism."""
    low = (last or "").lower()
    flat = low.replace("_", "")
    if not call.args or flat in ("dataparallel", "") or any(w in flat for w in _OTHER_SHARDING):
        return False
    if low.startswith(("is_", "has_", "get_", "unwrap", "save_", "load_")):
        return False
    if "criterion" in flat or "loss" in flat:
        return False  # a loss spread over replicas (`DataParallelCriterion(criterion)`), not a model
    if "dataparallel" in flat:
        return distributed
    if "wrap" not in low:
        return False
    given = [*call.args[1:], *(k.value for k in call.keywords)]
    words = {(dotted(a) or "").rsplit(".", 1)[-1].lower() for a in given}
    words |= {k.arg.lower() for k in call.keywords if k.arg}
    return bool(words & _RANK_WORDS)


_NAME_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


# calls that iterate what they are handed: the builtins and the progress bars
# (`for i, x in enumerate(tqdm(loader))` iterates the loader)
_ITER_WRAPPERS = frozenset(("enumerate", "tqdm", "trange", "iter", "islice", "zip", "track", "progress_bar", "chain"))


def wraps_iteration(func: ast.AST) -> bool:
    """The call iterates its first arguments: a builtin wrapper, a progress bar, or a project's own
    progress helper named for one (`iterate_tqdm(loader, verbosity)`, `tqdm_notebook`)."""
    last = (dotted(func) or "").rsplit(".", 1)[-1]
    return last in _ITER_WRAPPERS or "tqdm" in last.lower()


def path_extension(path: ast.AST) -> str | None:
    """The file extension a path expression ends with, when its text says so: ``"a/b.png"``,
    ``f"{out}/b.png"``, ``os.path.join(out, "b.png")``, ``out / "b.png"``, ``out + "b.png"``."""
    after_value = False  # the text follows a formatted value: `f"{step}.ckpt"` ends in ".ckpt"
    while True:
        if isinstance(path, ast.Constant) and isinstance(path.value, str):
            tail = path.value.rsplit("/", 1)[-1]
            dot = tail.rfind(".")
            return tail[dot:].lower() if dot > 0 or (dot == 0 and after_value and len(tail) > 1) else None
        if isinstance(path, ast.JoinedStr) and path.values:
            after_value = len(path.values) > 1
            path = path.values[-1]
        elif isinstance(path, ast.BinOp) and isinstance(path.op, (ast.Div, ast.Add)):
            path = path.right
        elif isinstance(path, ast.Call) and (dotted(path.func) or "").endswith("path.join") and path.args:
            path = path.args[-1]
        else:
            return None


def short_text(node: ast.AST, n: int = 40) -> str:
    """A node's source, cut to ``n`` characters for a message."""
    try:
        text = ast.unparse(node)
    except Exception:  # noqa: BLE001 - a node ast cannot unparse: say so
        return "..."
    return text if len(text) <= n else text[: n - 3] + "..."


def declares_shared(scope: ast.AST, name: str) -> bool:
    """``scope`` declares ``name`` ``global`` or ``nonlocal``: its assignments there are not its own."""
    return any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in walk(scope))


def rebinds(scope: ast.AST, name: str) -> bool:
    """``scope`` assigns ``name`` somewhere (a store, not only reads): its value there is not only
    what it came in with."""
    return any(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load) for n in ast.walk(scope))


def name_words(text: str) -> list[str]:
    """The words of identifiers, snake or camel case (``getEvalDataLoader`` -> get, Eval, Data, Loader)."""
    return _NAME_WORD.findall(text)


_EVALUATION_WORDS = frozenset(
    ("eval", "evaluate", "evaluation", "validate", "validation", "valid", "val", "test", "testing",
     "inference", "infer", "predict", "accuracy")
)


_EVALUATOR_WORDS = frozenset(("evaluator", "validator", "tester", "predictor", "inferencer"))


def names_evaluator(name: str) -> bool:
    """A class named for running a model over held-out data (``SegEvaluator``, ``Tester``,
    ``ValidationRunner``): an object of it handed a model runs the model's forward when it is run."""
    if not name[:1].isupper():
        return False
    return any((w := word.lower()) in _EVALUATOR_WORDS or w in _EVALUATION_WORDS for word in name_words(name))


def names_evaluation(name: str) -> bool:
    """A function named for running a model over held-out data (``evaluate``, ``validate_one_epoch``,
    ``test_model``, ``run_inference``): handed a model, it calls the model's forward."""
    return any(w.lower() in _EVALUATION_WORDS for w in name_words(name))


_TRAINING_WORDS = frozenset(("train", "training", "pretrain", "finetune", "fit"))


def names_training(name: str) -> bool:
    """A function named for training a model (``train_one_epoch``, ``_train_epoch``, ``fit``), not
    for evaluating it too (``train_and_eval``): handed a model, it runs its forward and backward."""
    words = {w.lower() for w in name_words(name)}
    return bool(words & _TRAINING_WORDS) and not words & _EVALUATION_WORDS


# flags that say "this run is distributed" (`args.distributed`, `cfg["DDP"]`): the per-rank walk
# simulates a distributed run, where they hold
DISTRIBUTED_FLAGS = frozenset(
    ("ddp", "distributed", "is_distributed", "use_ddp", "use_distributed", "is_ddp", "multiprocessing_distributed")
)
# the same said in a project's own words: `cfg.MODEL.DIST_TRAIN`, `args.use_dist`, `opt.ddp_mode`
_DISTRIBUTED_FLAG = re.compile(
    r"(?:is_|use_|enable_|do_)?(?:ddp|dist|distributed)(?:_(?:train|training|mode|run|enabled|on))?"
)


def is_distributed_flag(word: str) -> bool:
    """A switch that says the run is distributed, by its last name (``distributed``, ``DIST_TRAIN``,
    ``use_dist``); not ``dist`` alone, which is torch.distributed's usual alias."""
    low = word.lower().lstrip("_")  # (`self._use_ddp`: a private attribute of the same switch)
    return low in DISTRIBUTED_FLAGS or (low != "dist" and _DISTRIBUTED_FLAG.fullmatch(low) is not None)

# calls that end the process (with the status they are given: none or 0 is a clean exit)
EXIT_CALLS = frozenset(("exit", "quit", "sys.exit", "os._exit"))


def training_state(call: ast.Call) -> str | None:
    """``scheduler`` for ``scheduler.step()`` (or ``.load_state_dict(...)``): the learning-rate
    scheduler, optimizer or loss scaler (``scaler.step(optimizer)``) whose method is called, else
    None."""
    owner = dotted(call.func.value) if isinstance(call.func, ast.Attribute) else None
    if owner is None:
        return None
    last = owner.rsplit(".", 1)[-1].lower()
    if "sched" in last or "optim" in last or last in ("opt", "lr_scheduler"):
        return owner
    if "scaler" in last and call.args:
        return owner
    return None


def also_lines(lines) -> str:
    """`` (also line 7)`` / `` (also lines 7, 9)`` for the other places of one finding's cause; ``""``
    for none."""
    lines = sorted(set(lines))
    if not lines:
        return ""
    return f" (also line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))})"


def turns_grad_off(e: ast.AST) -> bool:
    """``torch.no_grad()`` / ``inference_mode`` (a context manager or a decorator, called or not):
    no backward, so no gradient all-reduce, runs under it."""
    f = e.func if isinstance(e, ast.Call) else e
    return (dotted(f) or "").rsplit(".", 1)[-1] in ("no_grad", "inference_mode")


# what the helpers that act on one rank are called: `save_on_master`, `print_rank_0`, `log_rank_zero`
_ONE_RANK_WORDS = ("master", "main_process", "rank0", "rank_0", "rank_zero")
_OUTPUT_VERBS = frozenset(("print", "save", "log", "write", "dump"))


def names_one_rank_function(name: str) -> bool:
    """A function named for running on one rank: ``save_on_master``, ``print_rank_0``,
    ``is_main_process``, or an output verb with ``_rank`` (``print_rank``, ``save_rank``: the
    helpers that print or write on the rank they are given, rank 0 by default)."""
    return any(k in name.lower() for k in _ONE_RANK_WORDS) or names_one_rank_output(name)


def names_one_rank_output(name: str) -> bool:
    """An output helper named for one rank by the ``_rank`` convention (``save_rank(text, path)``)."""
    head, _, tail = name.lower().rpartition("_")
    return tail == "rank" and head.rsplit("_", 1)[-1] in _OUTPUT_VERBS


def names_a_loader(name: str | None) -> bool:
    """A data loader by its name: ``train_loader``, ``self.val_dl``, ``dl``."""
    last = (name or "").rsplit(".", 1)[-1].lower()
    return "loader" in last or last.endswith("_dl") or last == "dl"


# code that strips or adds the `module.` prefix of a DDP wrapper's state_dict keys
PREFIX_HANDLING = (
    "consume_prefix_in_state_dict_if_present",
    '"module."',
    "'module.'",
    "[7:]",
    'len("module.")',
)


def calls_base_init(call: ast.Call) -> bool:
    """``super().__init__(...)`` or ``super(Trainer, self).__init__(...)``."""
    f = call.func
    return (
        isinstance(f, ast.Attribute)
        and f.attr == "__init__"
        and isinstance(f.value, ast.Call)
        and isinstance(f.value.func, ast.Name)
        and f.value.func.id == "super"
    )
