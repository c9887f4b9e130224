"""Which files to read, the cheap byte-level pre-filter, and decoding with PEP 263 cookies."""

from __future__ import annotations

import io
import os
import tokenize
from fnmatch import fnmatch
from pathlib import Path


class LintInputError(Exception):
    """A path given on the command line that cannot be linted (missing, unreadable)."""


# A file that contains none of these never reaches the parser: no rule can fire on it.
TRIGGERS = (
    b"distributed", b"DataParallel", b"local_rank", b"LOCAL_RANK", b"NCCL_", b"MASTER_PORT",
    b"DistributedSampler", b"get_rank", b"set_epoch",
)


def worth_parsing(data: bytes) -> bool:
    return any(t in data for t in TRIGGERS)


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
                out.extend(rootp / f for f in sorted(files) if f.endswith((".py", ".pyi")) and not _excluded(rootp / f, exclude))
        else:
            raise LintInputError(f"{raw}: no such file or directory")
    return out


def decode(data: bytes) -> str:
    """Source text with its declared encoding; raises UnicodeDecodeError/SyntaxError on bad bytes."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    text = data.decode(encoding)
    return text[1:] if text.startswith("\ufeff") else text
