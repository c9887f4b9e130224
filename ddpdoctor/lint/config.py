"""Lint settings: defaults, ``[tool.ddpdoctor.lint]`` (or ``[tool.ddpdoctor]``) in pyproject.toml,
then command-line overrides. Keys follow ruff: select, ignore, extend-select, exclude,
extend-exclude, per-file-ignores, plus world-sizes (for the per-rank interpreter) and jobs."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from ddpdoctor.script.analysis import DEFAULT_WORLD_SIZES

# rules whose doubt a run-time observation settles: DDP308's "does this forward communicate?" and
# DDP305's "does this value part the ranks?" are answered by a job that hung there (`watch`, `hang`
# add them to what they lint)
CONFIRMED_AT_RUN_TIME = ("DDP308", "DDP305")

DEFAULT_EXCLUDE = (
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    ".eggs",
    "__pycache__",
    "build",
    "dist",
    "node_modules",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    "site-packages",
)
_KEYS = {
    "select",
    "ignore",
    "extend-select",
    "exclude",
    "extend-exclude",
    "per-file-ignores",
    "world-sizes",
    "jobs",
}


class ConfigError(ValueError):
    """Bad settings; the message says which key and why."""


@dataclass(frozen=True)
class LintConfig:
    select: tuple[str, ...] | None = None  # None: the rules that are on by default
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    world_sizes: tuple[int, ...] = DEFAULT_WORLD_SIZES
    jobs: int | None = None  # None: one worker per core
    root: str = field(default=".", compare=False)

    def enabled(self, code: str, default: bool = True) -> bool:
        """Is the rule ``code`` selected? ``default``: whether it runs when nothing selects it
        (an opt-in rule runs only when --select or --extend-select names it or a prefix of it)."""

        def hit(pats) -> int:
            return max((len(p) for p in pats if code.startswith(p)), default=-1)

        base = hit(self.select) if self.select is not None else (0 if default else -1)
        selected = max(base, hit(self.extend_select))
        # the most specific pattern wins, as in ruff (--select DDP --ignore DDP2 --extend-select DDP201)
        return selected >= 0 and selected > hit(self.ignore)

    def ignored_for(self, path: str) -> tuple[str, ...]:
        if not self.per_file_ignores:
            return ()  # the usual case: no need to resolve the path (a stat per component)
        from fnmatch import fnmatch

        rel = _relative(path, self.root)
        out: list[str] = []
        for pat, codes in self.per_file_ignores:
            if fnmatch(rel, pat) or fnmatch(Path(rel).name, pat):
                out.extend(codes)
        return tuple(out)

    def with_overrides(self, **kw) -> LintConfig:
        return replace(self, **{k: v for k, v in kw.items() if v is not None})


def _relative(path: str, root: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path(root).resolve()))
    except ValueError:
        return path


def parse_world_sizes(value) -> tuple[int, ...]:
    """``"2-8"``, ``"2,4,8"`` or a list of ints; each from 2 to 64."""
    if isinstance(value, str):
        sizes: list[int] = []
        for part in value.split(","):
            part = part.strip()
            try:
                if "-" in part:
                    lo, hi = (int(x) for x in part.split("-", 1))
                    sizes.extend(range(lo, hi + 1))
                elif part:
                    sizes.append(int(part))
            except ValueError:
                raise ConfigError(f"world sizes {value!r}: expected e.g. '2-8' or '2,4,8'") from None
    elif isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        sizes = list(value)
    else:
        raise ConfigError(f"world-sizes must be a list of integers or a string like '2-8', not {value!r}")
    if not sizes or any(not 2 <= s <= 64 for s in sizes):
        raise ConfigError(f"world sizes {value!r}: each must be between 2 and 64")
    return tuple(sorted(set(sizes)))


def _codes(key: str, value) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"[tool.ddpdoctor] {key} must be a list of rule codes, not {value!r}")
    return tuple(v.strip().upper() for v in value)


def find_pyproject(start: Path) -> Path | None:
    start = start.resolve()
    for d in [start, *start.parents] if start.is_dir() else [start.parent, *start.parent.parents]:
        p = d / "pyproject.toml"
        if p.is_file():
            return p
    return None


def load_config(pyproject: Path | None) -> LintConfig:
    """Settings from a pyproject.toml (defaults when None or when it has no ddpdoctor table)."""
    if pyproject is None:
        return LintConfig()
    # imported here: a run without a pyproject.toml (--isolated, most single files) never reads TOML
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: tomli is the parser that became tomllib (a dependency there only)
        import tomli as tomllib
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{pyproject}: cannot read: {e}") from None
    table = data.get("tool", {}).get("ddpdoctor", {})
    table = table.get("lint", table) if isinstance(table, dict) else {}
    if not isinstance(table, dict):
        raise ConfigError(f"{pyproject}: [tool.ddpdoctor.lint] must be a table")
    kw: dict = {"root": str(pyproject.parent)}
    for key, value in table.items():
        if key not in _KEYS:
            if isinstance(value, dict):
                continue  # another part of ddpdoctor's settings
            raise ConfigError(f"{pyproject}: unknown key {key!r} in [tool.ddpdoctor]; known: {sorted(_KEYS)}")
        if key in ("select", "ignore", "extend-select"):
            kw[key.replace("-", "_")] = _codes(key, value)
        elif key in ("exclude", "extend-exclude"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{pyproject}: {key} must be a list of paths or globs")
            kw[key.replace("-", "_")] = tuple(value)
        elif key == "per-file-ignores":
            if not isinstance(value, dict):
                raise ConfigError(f"{pyproject}: per-file-ignores must be a table of glob = [codes]")
            kw["per_file_ignores"] = tuple((g, _codes(key, c)) for g, c in value.items())
        elif key == "world-sizes":
            kw["world_sizes"] = parse_world_sizes(value)
        elif key == "jobs":
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{pyproject}: jobs must be a positive integer")
            kw["jobs"] = value
    return LintConfig(**kw)
