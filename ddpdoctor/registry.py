"""The check registry: every module in ``ddpdoctor.checks`` (the top-level ``checks/`` folder) and any
user check files given by path.

A check module declares, at module level and without importing torch:

    CODE = "COL001"            stable, unique: letters (digits allowed after the first, P2P) + 3 digits
    TITLE = "Collective correctness"
    KIND = "cluster"           "cluster" (runs on every rank under torchrun) or "script" (a lint rule)
    __doc__                    its documentation (lint rules: fixed sections, see ddpdoctor/lint)

cluster checks also declare
    ORDER = 30                 position in the suite (lower runs first)
    BUDGET_S = 20.0            time budget on this 2-core CPU machine; the watchdog ends it after that
    SUITES = ("quick", "full") suites that include it
    def run(ctx) -> dict       per rank; returns JSON-able data (may hold "findings": [Finding.to_dict()])
    def summarize(results, world) -> Summary   optional; pure; on rank 0 over every rank's dict

script checks (lint rules) declare what ddpdoctor/lint documents.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

CODE_RE = re.compile(r"^[A-Z][A-Z0-9]{1,4}[0-9]{3}$")  # ENV001, DDP301, P2P001
KINDS = ("cluster", "script")


class RegistryError(Exception):
    """A check module that breaks the contract; the message names the module."""


@dataclass(frozen=True)
class CheckSpec:
    code: str
    title: str
    kind: str
    module: ModuleType
    order: int = 100
    budget_s: float = 30.0
    suites: tuple[str, ...] = ("quick", "full")

    @property
    def doc(self) -> str:
        return (self.module.__doc__ or "").strip()

    @property
    def name(self) -> str:
        return self.module.__name__.rsplit(".", 1)[-1]

    @property
    def blurb(self) -> str:
        """One sentence for `check --list`, saying what the code and the title do not already say."""
        return blurb(self.doc, self.code, self.title)


def _words(text: str) -> list[str]:
    return [w[:5] for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP]


_STOP = {"the", "a", "an", "and", "of", "its", "their", "nvidia", "each", "every"}


def blurb(doc: str, code: str, title: str) -> str:
    """The docstring's first sentence without the code, the title or a label repeating it (when nothing
    new is left: the next paragraph's, "What it does: ..."), up to its first clause, no asides."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", doc.strip()) if p.strip()]
    title_words = set(_words(title))
    for para in paragraphs:
        if para.startswith("#") and not re.match(r"#+\s*What it does", para):
            continue  # "## Why is this bad?" and the other lint-rule sections
        text = re.sub(r"^(#+\s*)?What it does\s*:?\s*", "", para).replace("``", "").replace("`", "")
        text = re.sub(rf"^{re.escape(code)}\s*[—:-]\s*", "", text)
        text = re.sub(rf"^{re.escape(title)}\s*[,:—-]\s*", "", text, flags=re.IGNORECASE)
        sentence = re.split(r"(?<=\.)\s", text, maxsplit=1)[0]
        label, sep, rest = sentence.partition(": ")
        if sep and set(_words(label)) <= title_words | {"consi"}:  # "Rendezvous: how long ..."
            sentence = rest
        sentence = re.sub(r"\s+\([^()]*\)", "", sentence)  # asides in parentheses, not call syntax
        sentence = re.split(r"; | — |(?<=.{20}): ", sentence, maxsplit=1)[0].rstrip(".") + "."
        new = [w for w in _words(sentence) if w not in title_words]
        if len(new) >= 2 and not sentence.lower().startswith(title.lower()):
            first = sentence.split(" ", 1)[0].strip(",.:;")
            return sentence[:1].upper() + sentence[1:] if first.isalpha() else sentence
    return ""


def _spec_from_module(mod: ModuleType) -> CheckSpec | None:
    code = getattr(mod, "CODE", None)
    if code is None:
        return None  # helper module, not a check
    title = getattr(mod, "TITLE", None)
    kind = getattr(mod, "KIND", None)
    where = getattr(mod, "__file__", mod.__name__)
    if not isinstance(code, str) or not CODE_RE.match(code):
        raise RegistryError(f"{where}: CODE {code!r} must look like ABC123")
    if not title or not isinstance(title, str):
        raise RegistryError(f"{where}: TITLE is missing")
    if kind not in KINDS:
        raise RegistryError(f"{where}: KIND must be one of {KINDS}, not {kind!r}")
    if not (mod.__doc__ or "").strip():
        raise RegistryError(f"{where}: a check needs a docstring (its documentation)")
    if kind == "cluster" and not callable(getattr(mod, "run", None)):
        raise RegistryError(f"{where}: a cluster check needs run(ctx)")
    return CheckSpec(
        code=code,
        title=title,
        kind=kind,
        module=mod,
        order=int(getattr(mod, "ORDER", 100)),
        budget_s=float(getattr(mod, "BUDGET_S", 30.0)),
        suites=tuple(getattr(mod, "SUITES", ("quick", "full"))),
    )


def _load_path(path: Path) -> ModuleType:
    import os
    import stat

    from ddpdoctor.boundary.inputs import file_kind

    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):  # a FIFO named *.py would block the import forever
        raise RegistryError(f"{path}: is {file_kind(mode)}, not a check file; give Python files")
    name = f"ddpdoctor_user_checks.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RegistryError(f"{path}: cannot load as a Python module")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # a user's file: report, do not crash
        raise RegistryError(f"{path}: failed to import: {type(e).__name__}: {e}") from None
    return mod


def _may_declare(info: pkgutil.ModuleInfo, kind: str) -> bool:
    """False when a built-in check's source shows no ``KIND = "<kind>"``: ``ddpdoctor lint`` then does
    not import (and, without bytecode, compile) the cluster checks and the models they pull in, about
    50 ms of every lint run here. A module whose source cannot be read is imported as before."""
    path = getattr(info.module_finder, "path", None)
    if info.ispkg or path is None:
        return True
    try:
        text = (Path(path) / f"{info.name}.py").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return True
    return re.search(rf"""^KIND\s*=\s*["']{re.escape(kind)}["']""", text, re.MULTILINE) is not None


def discover(extra_paths: list[str] | None = None, kind: str | None = None) -> list[CheckSpec]:
    """All checks, built-in first then user files/folders, sorted by (kind, order, code)."""
    import ddpdoctor.checks as pkg

    mods: list[ModuleType] = []
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("_"):
            continue
        if kind is not None and not _may_declare(info, kind):
            continue
        mods.append(importlib.import_module(f"{pkg.__name__}.{info.name}"))
    for p in extra_paths or []:
        path = Path(p)
        if path.is_dir():
            mods.extend(_load_path(f) for f in sorted(path.glob("*.py")) if not f.name.startswith("_"))
        elif path.is_file():
            mods.append(_load_path(path))
        else:
            raise RegistryError(f"{path}: {'not a regular file or a folder' if path.exists() else 'no such check file or folder'}")
    specs: dict[str, CheckSpec] = {}
    for mod in mods:
        spec = _spec_from_module(mod)
        if spec is None:
            continue
        if spec.code in specs:
            raise RegistryError(
                f"check code {spec.code} is declared twice: {specs[spec.code].module.__name__} "
                f"and {mod.__name__}"
            )
        specs[spec.code] = spec
    out = [s for s in specs.values() if kind is None or s.kind == kind]
    return sorted(out, key=lambda s: (s.kind, s.order, s.code))


def select(specs: list[CheckSpec], select: list[str] | None, skip: list[str] | None) -> list[CheckSpec]:
    """Filter by code or code prefix (``--select BW --skip BW002``), ruff style."""

    def matches(code: str, pats: list[str]) -> bool:
        return any(code == p or code.startswith(p) for p in pats)

    known = {s.code for s in specs}
    for pat in (select or []) + (skip or []):
        if not any(c == pat or c.startswith(pat) for c in known):
            raise RegistryError(f"unknown check code {pat!r}; see `ddpdoctor check --list`")
    out = specs
    if select:
        out = [s for s in out if matches(s.code, select)]
    if skip:
        out = [s for s in out if not matches(s.code, skip)]
    return out
