"""The ``--local_rank`` options a script declares for torch.distributed.launch, shared by DDP401
(the option is the only source of the rank) and DDP412 (the option beside LOCAL_RANK)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from ddpdoctor.script.writers import spawn_calls

FLAGS = ("--local_rank", "--local-rank")


@dataclass(frozen=True)
class LocalRankOption:
    call: ast.Call  # the add_argument call
    flags: tuple[str, ...]  # its option strings
    dest: str  # where argparse stores it (`"--rank", "--local_rank"` both fill `args.rank`)
    flag: ast.Constant  # the `--local_rank` string itself: the line to change


def reads_local_rank_env(m) -> bool:
    """The quoted key ``"LOCAL_RANK"`` (the launcher's variable), not ``config.LOCAL_RANK`` filled
    from the option."""
    return m.mentions('"LOCAL_RANK"', "'LOCAL_RANK'")


def local_rank_options(m) -> Iterator[LocalRankOption]:
    """Each ``add_argument("--local_rank", ...)`` that a launcher has to fill: not one whose default
    already reads LOCAL_RANK, nor one an ``mp.spawn`` script sets itself (``args.local_rank = gpu``)."""
    for call in m.method_calls("add_argument"):
        flags = tuple(a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
        if not any(f in FLAGS for f in flags):
            continue
        default = m.keyword(call, "default")
        if default is not None and "LOCAL_RANK" in ast.unparse(default):
            continue  # the default comes from torchrun's LOCAL_RANK: works under both launchers
        dest = next((d.dest for d in m.argparse_dests().values() if d.node is call), None) or "local_rank"
        if _set_by_the_script(m, dest):
            continue  # `args.local_rank = gpu` in an mp.spawn worker: the option's value is never used
        flag = next(a for a in call.args if isinstance(a, ast.Constant) and a.value in FLAGS)
        yield LocalRankOption(call, flags, dest, flag)


def _set_by_the_script(m, dest: str) -> bool:
    """The script starts its own workers (``mp.spawn``, or ``Process(target=...)`` in a loop) and
    gives the option's attribute their index (``args.local_rank = gpu`` in the worker, ``args.local_rank
    = rank`` in the loop that starts them): no launcher passes the option, and its value is never
    used."""
    starts = bool(spawn_calls(m)) or any(
        (q or "").endswith("multiprocessing.Process") for _c, q in m.calls
    )
    return starts and any(
        isinstance(t, ast.Attribute) and t.attr == dest for a in m.nodes(ast.Assign) for t in a.targets
    )
