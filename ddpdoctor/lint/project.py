"""The files linted together, by module name: so ``train.py`` calling ``utils.train(...)`` can be
followed into ``utils.py``.

A file ``src/pkg/utils.py`` is known as ``pkg.utils`` and ``utils`` (every dotted suffix of its path
below the folder it was found in, ``__init__`` dropped); the first file found keeps a name two files
share. Other modules are read and analysed only when a rule follows a call into them, once per
process. Nothing here imports the code.
"""

from __future__ import annotations

import ast
import hashlib
import os
import sys
from collections import OrderedDict
from functools import cached_property
from pathlib import Path

_MAX_BYTES = 2_000_000  # a module bigger than this is not followed (generated code, vendored data)
# analyses kept at once: every kept tree is memory the garbage collector keeps walking, and a whole
# library's trees (torch) would slow the run down by a third
_KEEP = 48
_STDLIB = frozenset(sys.stdlib_module_names)


class Project:
    def __init__(self, files: list[Path] | list[str], roots: list[str] | None = None):
        self.files = [Path(f) for f in files]
        self.by_name: dict[str, Path] = {}
        bases = self._bases = [Path(r).parts for r in roots or ()]
        for f in self.files:
            for name in _module_names(f, bases):
                self.by_name.setdefault(name, f)
        self._analyses: OrderedDict[Path, object] = OrderedDict()

    @cached_property
    def signature(self) -> str:
        """Changes when any file of the project changes (it goes into each file's cache key); worked
        out once per run (a stat of every file)."""
        h = hashlib.sha1()
        for f in sorted(self.files):
            try:
                st = f.stat()
            except OSError:
                continue
            h.update(f"{f}:{st.st_size}:{st.st_mtime_ns}".encode())
        return h.hexdigest()

    def module_path(self, module: str, importer: str | None = None, level: int = 0) -> Path | None:
        """The file of ``module`` (``from .utils import x`` in ``pkg/train.py``: level 1)."""
        if level and importer is not None:
            base = Path(importer).parent
            for _ in range(level - 1):
                base = base.parent
            candidate = base.joinpath(*module.split(".")) if module else base
            for p in (candidate.with_suffix(".py"), candidate / "__init__.py"):
                if p in self._file_set:
                    return p
            return None
        found = self.by_name.get(module)
        if found is not None and module.partition(".")[0] in _STDLIB and not self._where_python_looks(
            found, module, importer
        ):
            return None  # `import logging` is the standard library's, not torch/_dynamo/logging.py
        return found

    def _where_python_looks(self, found: Path, module: str, importer: str | None) -> bool:
        """``found`` is where an absolute import would find ``module`` first: beside the importing
        script (its folder is on sys.path) or at the top of a folder given to lint."""
        if importer is not None:
            base = Path(importer).parent.joinpath(*module.split("."))
            if found in (base.with_suffix(".py"), base / "__init__.py"):
                return True
        names = _module_names(found, self._bases)
        return bool(names) and names[0] == module

    @property
    def _file_set(self) -> set[Path]:
        s = self.__dict__.get("_files_cached")
        if s is None:
            s = self.__dict__["_files_cached"] = set(self.files)
        return s

    def analysis(self, path: Path):
        """The ModuleAnalysis of another file of the project, or None if it cannot be read or parsed."""
        if path in self._analyses:
            self._analyses.move_to_end(path)
            return self._analyses[path]
        from ddpdoctor.boundary.inputs import read_bytes
        from ddpdoctor.lint.files import decode
        from ddpdoctor.lint.pyversion import parse_source
        from ddpdoctor.script.analysis import ModuleAnalysis

        out = None
        try:
            if path.stat().st_size <= _MAX_BYTES:  # InputError (a FIFO, a device) is a ValueError
                text = decode(read_bytes(path, "Python file", _MAX_BYTES))
                tree = parse_source(text, str(path))
                out = ModuleAnalysis(str(path), text, tree)
                out.project = self
        except (
            OSError,
            SyntaxError,
            ValueError,
            UnicodeDecodeError,
            LookupError,
            RecursionError,
            MemoryError,
        ):
            out = None
        self._keep(path, out)
        return out

    def parsed(self, path: str, text: str):
        """The tree analysis() holds for ``path`` if it parsed this very ``text``, else None: linting
        a file that rules have already looked into then needs no second parse (parsing is
        deterministic, and nothing changes a tree). Not kept for the lint: a fresh ModuleAnalysis."""
        found = self._analyses.get(Path(path))
        return found.tree if found is not None and found.source == text else None

    def mentions(self, path: Path, word: str) -> bool:
        """The text of ``path``, decoded as analysis() decodes it, holds ``word`` (False when it cannot
        be read): asked before parsing a module only to look for a word in it, since most imported
        modules lack the word and a parse costs a hundred times the read."""
        found = self._analyses.get(path)
        if found is not None:
            return word in found.source
        from ddpdoctor.boundary.inputs import read_bytes
        from ddpdoctor.lint.files import decode

        try:
            if path.stat().st_size > _MAX_BYTES:  # as analysis(): not followed
                return False
            return word in decode(read_bytes(path, "Python file", _MAX_BYTES))
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError, LookupError):
            return False

    def _keep(self, path: Path, module) -> None:
        self._analyses[path] = module
        self._analyses.move_to_end(path)
        while len(self._analyses) > _KEEP:
            self._analyses.popitem(last=False)

    # a reverse index over at most this many files: beyond it (a whole library such as torch)
    # reading every file in every worker would cost more than the answers are worth
    MAX_CALLER_INDEX = 400

    def callers(self, path: str, name: str) -> list[tuple[object, ast.Call]]:
        """(module, call) for calls in the project's other files that reach the top-level function
        ``name`` of the file ``path`` through their imports. Only files that look like DDP code (the
        lint pre-filter) are read; empty for a project larger than MAX_CALLER_INDEX files."""
        index = self.__dict__.get("_callers")
        if index is None:
            index = self.__dict__["_callers"] = self._caller_index()
        return index.get((str(Path(path)), name), [])

    def _caller_index(self) -> dict[tuple[str, str], list]:
        from ddpdoctor.boundary.inputs import InputError, read_bytes
        from ddpdoctor.lint.files import FILE_LIMIT, worth_parsing
        from ddpdoctor.script.names import dotted

        out: dict[tuple[str, str], list] = {}
        if len(self.files) > self.MAX_CALLER_INDEX:
            return out
        for f in self.files:
            try:  # the input boundary: never a blocking read of a FIFO named *.py
                if not worth_parsing(read_bytes(f, "Python file", FILE_LIMIT)):
                    continue
            except InputError:
                continue
            mod = self.analysis(f)
            if mod is None:
                continue
            for call, _q in mod.calls:
                name = dotted(call.func)
                if name is None or name.split(".", 1)[0] not in mod.project_imports:
                    continue
                found = mod.resolve(name)
                if found is not None:
                    other, fn = found
                    out.setdefault((str(Path(other.path)), fn.name), []).append((mod, call))
        return out


def _module_names(f: Path, bases: list[tuple[str, ...]]) -> list[str]:
    """``bases``: the parts of the folders given (Path.parts). Worked on the parts as tuples: pathlib's
    relative_to and with_suffix build new paths, a tenth of a second over a library of 2,000 files
    before any worker can start."""
    parts = f.parts
    for b in bases:
        if (parts[: len(b)] == b) if b else not f.is_absolute():  # as f.relative_to(b) decides
            parts = parts[len(b) :]
            break
    if not parts:
        return []
    last = parts[-1]
    dot = last.rfind(".")
    if 0 < dot < len(last) - 1:  # with_suffix(""): the last suffix, not a leading dot
        last = last[:dot]
    parts = [*parts[:-1]] if last == "__init__" else [*parts[:-1], last]
    parts = [p for p in parts if p not in ("", ".", "..", os.sep)]
    return [".".join(parts[i:]) for i in range(len(parts)) if all(p.isidentifier() for p in parts[i:])]
