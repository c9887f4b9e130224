"""Which files to read, the cheap byte-level pre-filter, and decoding with PEP 263 cookies."""

from __future__ import annotations

import io
import os
import re
import tokenize
from fnmatch import translate
from pathlib import Path

# A Python file larger than this is generated data, not a training script: not read.
FILE_LIMIT = 8 << 20


class LintInputError(Exception):
    """A path given on the command line that cannot be linted (missing, unreadable)."""


# The cheap pre-filter. A file reaches the parser if it names something only DDP code names ...
STRONG = (
    b"init_process_group",
    b"DistributedDataParallel",
    b"DistributedSampler",
    b"set_epoch",
    b"MASTER_PORT",
    b"NCCL_ALGO",
    b"NCCL_PROTO",
    b"local_rank",
    b"local-rank",
    b"LOCAL_RANK",  # the launcher's environment (os.environ["LOCAL_RANK"]): one of several processes
    b"distributed.launch",
    b"isend",
    b"irecv",
    b"Accelerator(",  # accelerate: DDP under the hood in a distributed run
    b"is_global_zero",  # Lightning's rank test
    b"wait_for_everyone",  # accelerate's barrier
    b"deepspeed.comm",  # DeepSpeed's mirror of torch.distributed (script/names.py reads it as such)
    b"deepspeed import comm",
    b"global_rank",  # the job-wide rank by name (DDP402 trusts it even when set in another module)
    b"num_replicas=",  # a sampler sharded across processes (DDP107 reads any such call)
    b"convert_sync_batchnorm",  # batch norm synchronised across ranks: a model trained by every rank
    b"save_on_each_node",  # Hugging Face's multi-node saving switch (DDP506)
    # keywords only DDP's constructor takes: a DDP subclass built in this file (script/analysis.py)
    b"broadcast_buffers",
    b"find_unused_parameters",
    b"gradient_as_bucket_view",
)
# ... or imports torch.distributed, looks at a rank, and communicates (a helper module of a script).
_DIST = (b"torch.distributed", b"import distributed")
_COMM = (
    b"all_reduce",
    b"barrier",
    b"broadcast",
    b"all_gather",
    b"reduce_scatter",
    b"all_to_all",
    b"send(",
    b"recv(",
    b"gather(",
    b"scatter(",
    b"reduce(",
    b"new_group",
    b"torch.save",
)

# Each ``in`` is one pass over the file, and most files are rejected after trying every token. A token
# can only be present where a shorter part of it is, so the tokens that share a part are tried only
# when that part is (one pass instead of several); the answer is exactly that of trying them all.
_RANK, _DISTRIBUTED, _NCCL, _DEEPSPEED, _DDP = b"rank", b"istributed", b"NCCL_", b"deepspeed", b"ddp"
PER_NODE = b"per_node"
UNWRAP = b".module."
RANK_ZERO = (b"rank == 0", b"rank==0")
GETTER_ZERO = (b"get_rank() == 0", b"get_rank()==0")
SAVE_HELPERS = (b"save_checkpoint", b"save_model", b"save_ckpt", b"save_state", b"save_weights")
# ... or calls a project's DDP helper and tests a rank or the main process, or calls a barrier and
# tests the main process (kernels' barriers and tensor ranks are neither)
DDP_HELPERS = (b"ddp_wrap", b"_ddp(", b"_DDP(")
MAIN_TESTS = (b"rank", b"is_main", b"is_master", b"is_global_", b"main_process")
_BARRIER = b"barrier("
_ALL_REDUCE = b"all_reduce"
_BACKWARDS = (b"backward(", b"loss_scaler(")
_WITH_DISTRIBUTED = tuple(t for t in STRONG if _DISTRIBUTED in t)
_WITH_NCCL = tuple(t for t in STRONG if _NCCL in t)
_WITH_RANK = tuple(t for t in STRONG if _RANK in t)
_WITH_DEEPSPEED = tuple(t for t in STRONG if _DEEPSPEED in t and t not in _WITH_DISTRIBUTED + _WITH_NCCL + _WITH_RANK)
_UNSHARED = tuple(t for t in STRONG if t not in _WITH_DISTRIBUTED + _WITH_NCCL + _WITH_RANK + _WITH_DEEPSPEED)
_HELPERS_WITH_DDP = tuple(t for t in DDP_HELPERS if _DDP in t)
_HELPERS_WITHOUT = tuple(t for t in DDP_HELPERS if _DDP not in t)
assert all(_DISTRIBUTED in t for t in _DIST)  # the last line of worth_parsing relies on it
assert MAIN_TESTS[0] == _RANK  # worth_parsing looks for "rank" once, for both


def worth_parsing(data: bytes) -> bool:
    if any(t in data for t in _UNSHARED):
        return True
    if _DEEPSPEED in data and any(t in data for t in _WITH_DEEPSPEED):
        return True
    distributed = _DISTRIBUTED in data
    if distributed and any(t in data for t in _WITH_DISTRIBUTED):
        return True
    if _NCCL in data and any(t in data for t in _WITH_NCCL):
        return True
    rank = _RANK in data
    # (a helper or a barrier is rarer than a rank: looked for first, "rank" once)
    helper = (_DDP in data and any(t in data for t in _HELPERS_WITH_DDP)) or any(
        t in data for t in _HELPERS_WITHOUT
    )
    if (helper or _BARRIER in data) and ((helper and rank) or any(t in data for t in MAIN_TESTS[1:])):
        # a project's barrier wrapper or DDP helper (``ddp_wrap(model, ctx)``) and a rank or
        # main-process test (``if distr.is_global_main:``)
        return True
    if not rank:
        return _engine(data)
    if any(t in data for t in _WITH_RANK):
        return True
    if PER_NODE in data:
        return True  # a rank and a per-node GPU count: `rank % ngpus_per_node`, an mp.spawn worker's code
    if any(t in data for t in GETTER_ZERO):
        return True  # `if comm.get_rank() == 0:`: a rank test on a project's getter, the code of every rank
    if any(t in data for t in RANK_ZERO) and (UNWRAP in data or any(t in data for t in SAVE_HELPERS)):
        # a rank-0 test and a wrapped model's `.module.` (a per-rank training loop of a DDP job), or
        # a checkpoint helper it may call on one rank in one place and on every rank in another
        return True
    return (distributed and any(t in data for t in _DIST) and any(t in data for t in _COMM)) or _engine(data)


def _engine(data: bytes) -> bool:
    """A training engine of a data-parallel job (MAE's engine_pretrain.py): it all-reduces its
    metrics through a helper and backwards, with no rank or torch.distributed in sight."""
    return _ALL_REDUCE in data and any(t in data for t in _BACKWARDS)


def _exclusion(patterns: tuple[str, ...]):
    """``match(text)`` for the fnmatch-style patterns as one compiled regex (None without patterns):
    one match per name instead of one fnmatch call per pattern."""
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{translate(p)})" for p in patterns)).match


def discover(paths: list[str], exclude: tuple[str, ...] = ()) -> list[Path]:
    """Python files under ``paths`` (given files are always linted, even if excluded). A file or
    folder is excluded when a pattern matches its name or its whole path."""
    match = _exclusion(exclude)

    def excluded(path: Path) -> bool:
        return match is not None and (match(path.name) is not None or match(str(path)) is not None)

    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            for root, dirs, files in os.walk(p):
                rootp = Path(root)
                dirs[:] = sorted(d for d in dirs if not excluded(rootp / d))
                for f in sorted(files):
                    if f.endswith((".py", ".pyi")) and not (match is not None and match(f) is not None):
                        path = rootp / f
                        if match is None or match(str(path)) is None:
                            out.append(path)
        elif os.path.lexists(p):
            from ddpdoctor.boundary.inputs import file_kind

            raise LintInputError(f"{raw}: is {file_kind(os.lstat(p).st_mode)}, not a Python file or a folder")
        else:
            raise LintInputError(f"{raw}: no such file or directory")
    return out


def decode(data: bytes) -> str:
    """Source text with its declared encoding; raises UnicodeDecodeError/SyntaxError on bad bytes."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    text = data.decode(encoding)
    return text.removeprefix("\ufeff")
