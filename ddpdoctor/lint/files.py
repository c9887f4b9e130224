"""Which files to read, the cheap byte-level pre-filter, and decoding with PEP 263 cookies."""

from __future__ import annotations

import io
import os
import tokenize
from fnmatch import fnmatch
from pathlib import Path


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
    b"distributed.launch",
    b"isend",
    b"irecv",
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


def worth_parsing(data: bytes) -> bool:
    if any(t in data for t in STRONG):
        return True
    return b"rank" in data and any(t in data for t in _DIST) and any(t in data for t in _COMM)


def _excluded(path: Path, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch(path.name, p) or fnmatch(str(path), p) for p in patterns)


def discover(paths: list[str], exclude: tuple[str, ...] = ()) -> list[Path]:
    """Python files under ``paths`` (given files are always linted, even if excluded)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            for root, dirs, files in os.walk(p):
                rootp = Path(root)
                dirs[:] = sorted(d for d in dirs if not _excluded(rootp / d, exclude))
                out.extend(
                    rootp / f
                    for f in sorted(files)
                    if f.endswith((".py", ".pyi")) and not _excluded(rootp / f, exclude)
                )
        else:
            raise LintInputError(f"{raw}: no such file or directory")
    return out


def decode(data: bytes) -> str:
    """Source text with its declared encoding; raises UnicodeDecodeError/SyntaxError on bad bytes."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    text = data.decode(encoding)
    return text[1:] if text.startswith("\ufeff") else text
