"""DDP401: torch.distributed.launch and a --local_rank argument.

## What it does
Finds uses of the deprecated `torch.distributed.launch` launcher and an argparse `--local_rank`
option that is not backed by the `LOCAL_RANK` environment variable. An option nothing in the file
reads (under any name it fills: `"--rank", "--local_rank"` fill `args.rank`) in a file that leaves
the process group to a setup helper elsewhere is left alone: it is kept so the old launcher's flag
is accepted, and that helper picks the rank. So is an option beside a read of `LOCAL_RANK` (torchrun
works): that one is DDP412's, opt-in; unless the option's value then overwrites the name that read
went into (`local_rank = int(os.environ.get("LOCAL_RANK", -1))`, later `local_rank =
opt.local_rank`), which throws torchrun's value away. And a GPU picked by `args.local_rank` of a
command line another file's parser makes (`args = get_args()`), where nothing in the file reads
LOCAL_RANK, sets `args.local_rank` or hands `args` to a setup helper that could: the option is then
the only source of the rank (reported at the first device pick).

## Why is this bad?
`torch.distributed.launch` is deprecated in favour of `torchrun`, which does not pass
`--local_rank`/`--local-rank` to the script (it sets `LOCAL_RANK`). A script that reads the rank only
from the argument gets its default (often -1 or 0) on every rank, so all ranks pick GPU 0 or
silently skip distributed setup.

## Example
```python
parser.add_argument("--local_rank", type=int, default=-1)
torch.cuda.set_device(args.local_rank)
```

## Use instead
```python
local_rank = int(os.environ["LOCAL_RANK"])   # set by torchrun
torch.cuda.set_device(local_rank)
```
"""

from __future__ import annotations

import ast
import re

from ddpdoctor.script.launch_args import local_rank_options, reads_local_rank_env
from ddpdoctor.script.names import dotted
from ddpdoctor.script.nodes import walk
from ddpdoctor.script.ranks import env_key
from ddpdoctor.script.values import bound_argument

CODE = "DDP401"
TITLE = "torch.distributed.launch / --local_rank argument"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"


def _read_anywhere(m, dest: str) -> bool:
    """``args.local_rank``, ``cfg["local_rank"]`` or ``getattr(args, "local_rank")`` somewhere."""
    for n in ast.walk(m.tree):
        if isinstance(n, ast.Attribute) and n.attr == dest and isinstance(n.ctx, ast.Load):
            return True
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value == dest:
            return True
        if (
            isinstance(n, ast.Call)
            and dotted(n.func) == "getattr"
            and any(isinstance(a, ast.Constant) and a.value == dest for a in n.args)
        ):
            return True
    return False


def _parser_of_other_files(m, call: ast.Call) -> bool:
    """The option is declared in a function that returns the parser or what it parsed (``def
    get_args(): ...; return parser.parse_args()``): the training code of another file reads it, and
    nothing in this one (a setup helper handed ``args``) may take the rank from LOCAL_RANK instead."""
    fn = m.enclosing_function(call)
    if fn is None:
        return False
    if any(_hands_args_to_setup(c) for c, _q in m.calls):
        return False
    parsed = {"parser"}
    for a in ast.walk(fn):
        if isinstance(a, ast.Assign) and _parses(a.value):
            parsed |= {t.id for t in a.targets if isinstance(t, ast.Name)}
    for r in ast.walk(fn):
        if isinstance(r, ast.Return) and r.value is not None:
            values = r.value.elts if isinstance(r.value, ast.Tuple) else [r.value]
            if any(_parses(v) or (isinstance(v, ast.Name) and v.id in parsed) for v in values):
                return True
    return False


_PARSE_CALLS = ("parse_args", "parse_known_args")


def _parses(e: ast.AST) -> bool:
    return isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _PARSE_CALLS


def _hands_args_to_setup(c: ast.Call) -> bool:
    """``init_distributed_mode(args)``, ``setup_dist(args)``: a helper that sets up the group."""
    name = (dotted(c.func) or "").rsplit(".", 1)[-1].lower()
    return bool(c.args) and "dist" in name and ("init" in name or "setup" in name)


# calls whose string arguments are text for a person to read, not a command to run
_MESSAGE_CALLS = frozenset(
    ("print", "debug", "info", "warning", "warn", "error", "exception", "critical", "log", "echo", "secho")
)


def _in_message(m, node: ast.AST) -> bool:
    """The string is (part of) a message: printed, logged, an option's help, or the text of a raised error. It tells
    someone how the script was once launched; it launches nothing."""
    for a in m.ancestors(node):
        if isinstance(a, ast.Raise) or isinstance(a, ast.keyword) and a.arg == "help":
            return True  # (an option's `help=` text too)
        if isinstance(a, ast.Call) and (dotted(a.func) or "").rsplit(".", 1)[-1] in _MESSAGE_CALLS:
            return True
        if isinstance(a, (ast.Assign, ast.AugAssign)):
            return _becomes_message(m, a)
        if isinstance(a, ast.stmt):
            return False
    return False


def _becomes_message(m, st: ast.Assign | ast.AugAssign) -> bool:
    """``error_msg += ". Did you launch with torch.distributed.launch?"`` where ``error_msg`` is
    then only raised or printed in the same function: a message too (a command that is also
    printed before it runs is still a command)."""
    targets = st.targets if isinstance(st, ast.Assign) else [st.target]
    names = {t.id for t in targets if isinstance(t, ast.Name)}
    scope = m.enclosing_function(st) or m.tree
    uses = [
        n
        for n in walk(scope)
        if isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load) and n.lineno > st.lineno
    ]
    return bool(uses) and all(_in_message(m, n) for n in uses)


def _own_rank_option(m) -> bool:
    """``init_process_group(rank=args.rank, ...)`` with ``args.rank`` an option of this file's parser
    (``--rank``, required or not): the script is started by its own commands, one per process or
    node, so an unused ``--local_rank`` beside it says nothing of torch.distributed.launch."""
    dests = {d for d in m.argparse_dests()}
    for call in m.dist_calls("init_process_group"):
        rank = m.keyword(call, "rank")
        if isinstance(rank, ast.Attribute) and rank.attr in dests and rank.attr not in ("local_rank",):
            return True
    return False


def _device_beside_env(m, dest: str) -> tuple[ast.AST, ast.AST] | None:
    """(``os.environ["LOCAL_RANK"]`` read with no default, the first GPU pick by the option's value)
    when nothing sets ``args.<dest>``: the environment read says torchrun, the device says the option,
    and torchrun never passes the option. The pick is ``args.<dest>`` itself or a name given it."""
    # (a subscript, not `.get("LOCAL_RANK", 0)`: the script cannot run without the variable)
    env = next(
        (n for n in m.nodes(ast.Subscript) if isinstance(n.ctx, ast.Load) and env_key(m, n) == "LOCAL_RANK"),
        None,
    )
    if env is None:
        return None
    reads = [n for n in m.nodes(ast.Attribute) if n.attr == dest]
    if any(isinstance(n.ctx, ast.Store) for n in reads):
        return None  # `args.local_rank = int(os.environ["LOCAL_RANK"])`: the option carries the launcher's value
    names = {
        a.targets[0].id for a in m.nodes(ast.Assign)
        if len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
        and isinstance(a.value, ast.Attribute) and a.value.attr == dest
    }
    uses = [n for n in reads if _device_use(m, n)]
    uses += [n for n in m.nodes(ast.Name) if n.id in names and isinstance(n.ctx, ast.Load) and _device_use(m, n)]
    uses += _device_uses_in_callee(m, reads)
    if not uses:
        return None
    return env, min(uses, key=lambda n: (n.lineno, n.col_offset))


def _device_uses_in_callee(m, reads: list) -> list[ast.AST]:
    """``train(cfg, args.local_rank)`` where this file's ``def train(cfg, local_rank=0)`` picks its
    GPU by that parameter: the uses of the parameter as a device there."""
    out = []
    by_name = {f.name: f for f in m.functions}
    for n in reads:
        call = m.parents.get(n)
        if isinstance(call, ast.keyword):
            call = m.parents.get(call)
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.func.id not in by_name:
            continue
        fn = by_name[call.func.id]
        for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs):
            known, value = bound_argument(fn, call, a.arg)
            if known and value is n:
                out += [
                    x for x in ast.walk(fn)
                    if isinstance(x, ast.Name) and x.id == a.arg and isinstance(x.ctx, ast.Load) and _device_use(m, x)
                ]
    return out


def _env_overwritten(m, dest: str) -> tuple[ast.Assign, ast.Assign] | None:
    """(the read of LOCAL_RANK into a name, a later assignment of the option ``args.<dest>`` to that
    same name that no test of the option guards): the launcher's value is thrown away."""
    env_reads = {}
    for a in m.nodes(ast.Assign):
        if len(a.targets) == 1 and "LOCAL_RANK" in ast.unparse(a.value):
            env_reads.setdefault(ast.unparse(a.targets[0]), a)
    if not env_reads:
        return None
    for a in m.nodes(ast.Assign):
        if len(a.targets) != 1 or not (isinstance(a.value, ast.Attribute) and a.value.attr == dest):
            continue
        first = env_reads.get(ast.unparse(a.targets[0]))
        if first is None or first.lineno >= a.lineno:
            continue
        if any(
            isinstance(p, ast.If) and dest in ast.unparse(p.test)
            for p in m.ancestors(a)
        ):
            continue  # `if args.local_rank != -1: local_rank = args.local_rank`: the env value stays
        return first, a
    return None


# functions of a project that hand back its parsed command line (`args = get_args()`,
# `args, cfg = merge_config()`, `opt = parse_arguments()`)
_OPTIONS_FROM = re.compile(r"(?:get|parse|load|merge|make)_?(?:args|arguments|config|cfg|opts?|options)")
_DEVICE_CALLS = frozenset(("set_device", "device", "cuda", "to"))


def _options_of_other_files(m) -> set[str]:
    """Names bound to a command line parsed by a parser this file does not build: ``args =
    parser.parse_args()`` with ``parser`` imported, ``args = get_args()`` of another module."""
    own = set(m.function_names)
    out: set[str] = set()
    for a in m.nodes(ast.Assign):
        call = a.value
        if len(a.targets) != 1 or not isinstance(call, ast.Call):
            continue
        name = dotted(call.func) or ""
        last = name.rsplit(".", 1)[-1]
        if not (_parses(call) or (_OPTIONS_FROM.fullmatch(last.lower()) and last not in own) or _options_object(call)):
            continue
        target = a.targets[0]
        out |= {t.id for t in (target.elts if isinstance(target, ast.Tuple) else [target]) if isinstance(t, ast.Name)}
    return out


def _options_object(call: ast.Call) -> bool:
    """``TrainOptions().parse()``: an options class of another file parses the command line (the
    pix2pix family's layout)."""
    f = call.func
    if not (isinstance(f, ast.Attribute) and f.attr == "parse" and isinstance(f.value, ast.Call)):
        return False
    cls = (dotted(f.value.func) or "").rsplit(".", 1)[-1]
    return _OPTIONS_CLASS.search(cls) is not None


_OPTIONS_CLASS = re.compile(r"(?:Options|Opts|Args|Arguments)$")


def _device_use(m, node: ast.Attribute) -> bool:
    """``node`` (``args.local_rank``) picks a GPU: ``set_device(...)``, ``torch.device("cuda", ...)``,
    ``.cuda(...)``, ``.to(...)``, ``device_ids=[...]``, ``output_device=...``."""
    child: ast.AST = node
    for a in m.ancestors(node):
        if isinstance(a, ast.keyword):
            return a.arg in ("device_ids", "output_device", "device")
        if isinstance(a, ast.Call):
            return child is not a.func and (dotted(a.func) or "").rsplit(".", 1)[-1] in _DEVICE_CALLS
        if not isinstance(a, (ast.List, ast.Tuple)):
            return False
        child = a
    return False


def _option_of_other_files(m):
    """The GPU is picked by ``args.local_rank`` of a command line another file's parser makes, and
    nothing here sets it (from LOCAL_RANK or otherwise) or hands ``args`` to a setup helper that
    could: the value is the ``--local_rank`` option only torch.distributed.launch passes. The first
    device pick, where it goes wrong under torchrun."""
    if not m.is_training_script or reads_local_rank_env(m) or next(local_rank_options(m), None):
        return None
    names = _options_of_other_files(m)
    if not names:
        return None
    for n in m.nodes(ast.Attribute):
        if n.attr == "local_rank" and isinstance(n.ctx, ast.Store):
            return None  # `args.local_rank = int(os.environ["LOCAL_RANK"])`, `= gpu` in a spawn worker
    if any(dotted(c.func) == "setattr" or _hands_args_to_setup(c) for c, _q in m.calls):
        return None
    uses = [
        n
        for n in m.nodes(ast.Attribute)
        if n.attr == "local_rank" and isinstance(n.value, ast.Name) and n.value.id in names and _device_use(m, n)
    ]
    return min(uses, key=lambda n: (n.lineno, n.col_offset)) if uses else None


def check(m):
    if not m.mentions("torch.distributed.launch", "local_rank", "local-rank"):
        return
    use = _option_of_other_files(m)
    if use is not None:
        yield m.finding(
            CODE,
            use,
            f"`{ast.unparse(use)}` comes from a `--local_rank` option of another file's parser, and "
            "nothing here sets it from LOCAL_RANK: only the deprecated torch.distributed.launch passes "
            "that option, so under torchrun every rank gets its default and picks the same GPU",
            SEVERITY,
            hint="read `int(os.environ['LOCAL_RANK'])` (set by torchrun), or give the option "
            "`default=int(os.environ.get('LOCAL_RANK', 0))`",
        )
    for node in m.nodes(ast.Import, ast.ImportFrom, ast.Constant):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [f"{node.module}.{a.name}" for a in node.names]
            )
            if any(
                n == "torch.distributed.launch" or n.startswith("torch.distributed.launch.") for n in names
            ):
                yield m.finding(
                    CODE,
                    node,
                    "`torch.distributed.launch` is deprecated",
                    SEVERITY,
                    hint="launch with `torchrun` and read LOCAL_RANK from the environment",
                )
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "torch.distributed.launch" in node.value
            and not isinstance(m.parents.get(node), ast.Expr)  # a docstring or comment-like string
            and not _in_message(m, node)
        ):
            yield m.finding(
                CODE,
                node,
                "launches with the deprecated `torch.distributed.launch`",
                SEVERITY,
                hint="use `torchrun` (same options, minus --use_env)",
            )
    # with LOCAL_RANK read too the option only matters under the old launcher: DDP412 (opt-in)
    env_too = reads_local_rank_env(m)
    for opt in local_rank_options(m):
        call = opt.call
        if m.keyword_is(call, "required", True):
            message = (
                "`--local_rank` is required, but only the deprecated torch.distributed.launch passes "
                "it: under torchrun the script stops at argument parsing"
            )
            hint = "use `default=int(os.environ.get('LOCAL_RANK', 0))` instead of `required=True`"
        elif env_too:
            over = _env_overwritten(m, opt.dest)
            if over is None:
                beside = _device_beside_env(m, opt.dest)
                if beside is None:
                    continue
                env_read, use = beside
                message = (
                    f"`--local_rank` picks the GPU on line {use.lineno}, but the script also reads LOCAL_RANK "
                    f"from the environment on line {env_read.lineno}, which torchrun (or launch --use_env) "
                    "sets and which never passes `--local_rank`: there every rank gets the option's default GPU"
                )
                message = message.replace("`--local_rank`", f"`{opt.flag.value}`", 1)
                yield m.finding(
                    CODE, opt.flag, message, SEVERITY,
                    hint="pick the GPU with the LOCAL_RANK value (and drop the option)",
                )
                continue
            env_read, overwrite = over
            target = ast.unparse(overwrite.targets[0])
            yield m.finding(
                CODE,
                overwrite,
                f"`{target}` is read from LOCAL_RANK on line {env_read.lineno}, then overwritten here "
                f"by `{ast.unparse(overwrite.value)}`, which only the deprecated torch.distributed.launch "
                f"passes (`{opt.flag.value}`): under torchrun every rank gets the option's default",
                SEVERITY,
                hint="drop this line (and the option) and keep the LOCAL_RANK value",
            )
            continue
        elif not _read_anywhere(m, opt.dest):
            if _own_rank_option(m):
                continue  # `--rank` of its own feeds the process group: launched by its own commands
            if not m.dist_calls("init_process_group") and not _parser_of_other_files(m, call):
                # declared only so that the old launcher's flag is accepted; the process group and
                # the rank are set up in another file (`init_distributed_mode(args)`): unknown, quiet
                continue
            message = (
                "`--local_rank` is declared but this file never reads it: only the deprecated "
                "torch.distributed.launch passes it, and under torchrun whatever reads it gets the default"
            )
            hint = "drop the option and launch with torchrun"
            if not m.dist_calls("init_process_group"):
                message = (
                    "`--local_rank` is declared for the training code this parser serves, but only the "
                    "deprecated torch.distributed.launch passes it: under torchrun whatever reads "
                    "`args.local_rank` gets the default"
                )
                hint = (
                    "use `default=int(os.environ.get('LOCAL_RANK', 0))` or read LOCAL_RANK where it is used"
                )
        else:
            message = (
                "`--local_rank` is only passed by the deprecated torch.distributed.launch; "
                "torchrun sets the LOCAL_RANK environment variable instead, so every rank gets the default"
            )
            hint = "use `default=int(os.environ.get('LOCAL_RANK', 0))` or read LOCAL_RANK directly"
        # name the option as the script spells it (`--local-rank` is torch>=2.0's launcher's flag)
        message = message.replace("`--local_rank`", f"`{opt.flag.value}`", 1)
        # at the option's name: where a call spans lines, that is the line to change
        yield m.finding(CODE, opt.flag, message, SEVERITY, hint=hint)
