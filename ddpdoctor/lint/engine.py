"""Run the rules over files: pre-filter, decode, parse, analyse, rules, noqa; parallel over cores."""

from __future__ import annotations

import ast
import gc
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from ddpdoctor.boundary.inputs import InputError, read_bytes
from ddpdoctor.core.report import Finding, Location, Severity
from ddpdoctor.lint.config import LintConfig
from ddpdoctor.lint.files import FILE_LIMIT, decode, discover, worth_parsing
from ddpdoctor.lint.noqa import suppressed
from ddpdoctor.lint.pyversion import needs_newer_python, parse_source, removed_syntax
from ddpdoctor.lint.rules import PARSE_CODE, on_by_default, script_rules
from ddpdoctor.script.analysis import ModuleAnalysis

_PARALLEL_MIN_FILES = 24  # below this a worker pool costs more than it saves
# The files linted together (set by lint_paths before it forks its workers, which inherit it): rules
# follow calls from one file into another through it.
_PROJECT = None


def _problem(path: str, kind: str, message: str, line: int = 1, col: int = 1, **more: str) -> Finding:
    return Finding(
        code=PARSE_CODE,
        severity=Severity.INFO if kind == BUDGET_KIND else Severity.ERROR,
        message=message,
        evidence={"kind": kind, **more},
        location=Location(path=path, line=max(1, line), col=max(1, col)),
    )


def lint_source(
    path: str,
    data: bytes | str,
    config: LintConfig | None = None,
    rules=None,
    prefilter: bool = True,
    project=None,
) -> list[Finding]:
    """Findings for one file's content. Never raises on bad input: it becomes a DDP000 finding.
    ``project``: the ddpdoctor.lint.project.Project this file is linted with (calls into its other
    files are followed)."""
    config = config or LintConfig()
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if prefilter and not worth_parsing(raw):
        return []
    try:
        text = data if isinstance(data, str) else decode(raw)
    except (UnicodeDecodeError, SyntaxError, LookupError) as e:
        return [_problem(path, "encoding", f"cannot decode: {e}")]
    with _collector_paused():
        return _lint_text(path, text, config, rules, project)


@contextmanager
def _collector_paused():
    """The cyclic garbage collector off while one file is parsed and analysed. ast.parse makes
    hundreds of thousands of young objects for a big file, so the collector runs every few hundred
    allocations and re-traverses the growing tree each time (15-20% of parse time on torch's tree),
    yet the tree holds no cycles: reference counting frees it. Anything cyclic left behind is
    collected as usual once the collector is back on."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


# The collector's middle generation during a lint run: collected once every this many young
# collections instead of every 10 (Python's default).
_MIDDLE_EVERY = 100


@contextmanager
def _middle_generation_rarely():
    """The analyses the project keeps (parsed modules rules look into, up to project._KEEP of them)
    live through the run. Each young collection (about one per file that parsed one) moves them to
    the middle generation, and at the default threshold every tenth one traverses all of them there
    again, finding almost nothing: a file's own cycles are found young (on torch's tree 6.6k of the
    182k objects collected, for a tenth of a CPU second per middle collection). Restored after."""
    old = gc.get_threshold()
    gc.set_threshold(old[0], max(old[1], _MIDDLE_EVERY), *old[2:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def _lint_text(path: str, text: str, config: LintConfig, rules, project=None) -> list[Finding]:
    # a file another file's rules looked into is parsed already: its tree, when of this same text
    tree = project.parsed(path, text) if project is not None else None
    if tree is not None:
        return _lint_tree(path, text, tree, config, rules, project)
    try:
        tree = parse_source(text, path)
    except SyntaxError as e:
        newer = needs_newer_python(text, e.lineno)
        if newer is not None:
            running = ".".join(map(str, sys.version_info[:2]))
            return [
                _problem(
                    path,
                    "python-version",
                    f"needs Python {newer.version}+: line {newer.line} uses {newer.what}, which Python "
                    f"{running} (running ddpdoctor) cannot parse; run ddpdoctor with Python "
                    f"{newer.version} or newer to lint this file",
                    newer.line,
                    e.offset if e.lineno == newer.line and e.offset else 1,
                )
            ]
        old = removed_syntax(text, e.lineno)
        if old is not None:
            msg = (
                f"SyntaxError: line {e.lineno} uses {old}: code for an older Python, which no "
                "current Python parses; not linted until that line is changed"
            )
            return [_problem(path, "syntax", msg, e.lineno or 1, e.offset or 1)]
        return [_problem(path, "syntax", f"SyntaxError: {e.msg}", e.lineno or 1, e.offset or 1)]
    except (ValueError, MemoryError, RecursionError) as e:  # null bytes, absurd nesting
        return [_problem(path, "syntax", f"cannot parse: {type(e).__name__}: {e}")]
    return _lint_tree(path, text, tree, config, rules, project)


def _lint_tree(path: str, text: str, tree: ast.Module, config: LintConfig, rules, project) -> list[Finding]:
    module = ModuleAnalysis(path, text, tree, config.world_sizes)
    out: list[Finding] = []
    if project is not None:
        module.project = project  # (not kept in the project: a kept tree costs garbage-collector time)
    ignored = config.ignored_for(path)
    for spec in rules if rules is not None else script_rules():
        if not config.enabled(spec.code, on_by_default(spec)) or any(
            spec.code.startswith(c) for c in ignored
        ):
            continue
        try:
            found = list(spec.module.check(module))
        except RecursionError:
            continue  # pathologically deep code: skip the rule rather than crash
        except Exception as e:  # noqa: BLE001 - a rule bug must not take the whole run down; report it
            out.append(_problem(path, "internal", f"internal error in {spec.code}: {type(e).__name__}: {e}"))
            continue
        lines = module.lines
        dead = module.shadowed_defs if found else ()
        for f in found:
            line = f.location.line if f.location else 1
            if 0 < line <= len(lines) and suppressed(lines[line - 1], f.code):
                continue
            if dead and any(a <= line <= b for a, b in dead):
                continue  # in a def that a later def of the same name replaces: never runs
            out.append(f)
    if module.runs_truncated:  # the step budget of the per-rank simulation ran out somewhere
        out.append(_problem(path, BUDGET_KIND, "partly linted: the per-rank simulation of this file reached "
                            "its step budget, so findings in the code it did not walk may be missing", limit="steps"))
    return out


def is_budget_note(f: Finding) -> bool:
    """A note that a file was cut short by a per-file budget: said, but not a finding to fail on."""
    return f.code == PARSE_CODE and f.evidence.get("kind") == BUDGET_KIND


# Per-file budgets. Bytes: FILE_LIMIT (lint/files.py). CPU time: the analysis of one file stops after this many CPU seconds (CPU, not wall time, so a loaded
# machine does not cut files short); torch's costliest file takes well under a second.
FILE_CPU_BUDGET_S = 20.0
BUDGET_KIND = "budget"  # DDP000 findings of this kind are notes: the file was cut short, not wrong


def lint_file(path: Path, config: LintConfig, rules=None, cache=None, project=None) -> list[Finding]:
    try:  # the input boundary: a FIFO or device named *.py is refused, never opened for a blocking read
        data = read_bytes(path, "Python file", FILE_LIMIT)
    except InputError as e:
        return [_problem(str(path), "io", f"cannot lint: {e.problem}")]
    unreadable = not_text(data)
    if unreadable:
        return [_problem(str(path), "encoding", unreadable)]
    if not worth_parsing(data):
        return []  # most files: decided here, without the CPU timer or a second pass of the pre-filter
    if cache is None:
        return _within_budget(str(path), data, config, rules, project)
    hit = cache.get(str(path), data)
    if hit is not None:
        return hit
    found = _within_budget(str(path), data, config, rules, project)
    if not any(is_budget_note(f) and f.evidence.get("limit") == "cpu" for f in found):
        # a file cut short by CPU time may finish next time; the step budget gives the same answer
        cache.put(str(path), data, found)
    return found


def not_text(data: bytes) -> str | None:
    """Why ``data`` cannot be Python source (NUL bytes: UTF-16 or binary; bytes its declared
    encoding cannot decode), or None. ASCII files, nearly all, cost one fast scan."""
    if b"\0" in data:
        return ("not Python source text: it holds NUL bytes (UTF-16 or a binary file); save it as UTF-8 "
                "to lint it")
    if data.isascii():
        return None
    try:
        decode(data)
    except (UnicodeDecodeError, SyntaxError, LookupError) as e:
        return f"not Python source text: cannot decode it ({e}); save it as UTF-8 to lint it"
    return None


class _OutOfTime(BaseException):
    """Not an Exception: a rule's own error handler (one rule's bug is a note, the run goes on)
    must not swallow the budget's end and let the file run on."""


def _out_of_time(signum, frame):
    raise _OutOfTime


def _within_budget(path: str, data: bytes, config: LintConfig, rules, project) -> list[Finding]:
    """lint_source under the per-file CPU budget (a profiling timer, main thread only)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lint_source(path, data, config, rules, prefilter=False, project=project)
    old = signal.signal(signal.SIGPROF, _out_of_time)
    signal.setitimer(signal.ITIMER_PROF, FILE_CPU_BUDGET_S)
    try:
        return lint_source(path, data, config, rules, prefilter=False, project=project)
    except _OutOfTime:
        return [_problem(path, BUDGET_KIND, f"not linted: its analysis took more than the "
                         f"{FILE_CPU_BUDGET_S:g} s CPU budget per file; lint it on its own or split it", limit="cpu")]
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)


def _result_cache(config: LintConfig, extra_rules: tuple[str, ...], cache_dir: str):
    from ddpdoctor.lint.cache import ResultCache

    # user rule files are part of the key, by path and modification time
    extra_key = [(p, os.stat(p).st_mtime_ns if os.path.exists(p) else 0) for p in extra_rules]
    # a file's findings may depend on the project's other files: any change there is a new key
    project_key = _PROJECT.signature if _PROJECT is not None else ""
    return ResultCache(cache_dir, repr((config, config.root, extra_key, project_key)))


# The result cache of the running lint_paths (made before it forks its workers, which inherit it):
# its key stats every rule file and every project file, once per run rather than once per chunk.
_CACHE = None


def _lint_chunk(
    paths: list[str], config: LintConfig, extra_rules: tuple[str, ...] = (), cache_dir: str | None = None
) -> list[Finding]:
    rules = script_rules(extra_rules)
    cache = None
    if cache_dir is not None:
        cache = _CACHE if _CACHE is not None else _result_cache(config, extra_rules, cache_dir)
    out: list[Finding] = []
    for p in paths:
        out.extend(lint_file(Path(p), config, rules, cache, _PROJECT))
    return out


def _size(path: Path) -> int:
    """Bytes in the file, 0 when it cannot be read (one stat, not an exists() and a stat)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


# chunks per worker: enough that the workers, pulling the next chunk when free, finish together
_CHUNKS_PER_JOB = 48


def _chunks(files: list[Path], jobs: int) -> list[list[str]]:
    """The files in chunks of about equal bytes, biggest files first: a worker takes the next chunk
    when it is free, so the few costly big files start early, each nearly alone, and the many small
    ones even out the end. (Bytes are a rough cost: most files are rejected by the pre-filter, and
    one big file that is not can cost a quarter of the run, so a few large fixed shares would leave
    one worker finishing long after the other.)"""
    sized = sorted(((_size(f), str(f)) for f in files), key=lambda sf: -sf[0])
    target = max(1, sum(s for s, _ in sized) // (jobs * _CHUNKS_PER_JOB))
    chunks: list[list[str]] = []
    chunk: list[str] = []
    held = 0
    for size, f in sized:
        chunk.append(f)
        held += size
        if held >= target:
            chunks.append(chunk)
            chunk, held = [], 0
    if chunk:
        chunks.append(chunk)
    return chunks


def _sort_key(f: Finding):
    loc = f.location
    return (loc.path, loc.line, loc.col, f.code) if loc else ("", 0, 0, f.code)


def lint_paths(
    paths: list[str] | list[Path],
    config: LintConfig | None = None,
    jobs: int | None = None,
    extra_rules: tuple[str, ...] = (),
    cache_dir: str | Path | None = None,
) -> list[Finding]:
    """Every finding under ``paths`` (files or folders), sorted by place. Raises LintInputError for a
    path that does not exist. This is what ``check --script`` and the TUI call. ``cache_dir``: keep
    results per file content there (the CLI uses .ddpdoctor_cache)."""
    cache_dir = str(cache_dir) if cache_dir is not None else None
    config = config or LintConfig()
    files = discover([str(p) for p in paths], config.exclude + config.extend_exclude)
    if not files:
        from ddpdoctor.lint.files import LintInputError

        raise LintInputError(f"{', '.join(map(str, paths))}: no Python files (*.py, *.pyi) to lint; give a "
                             "Python file or a folder that holds some")
    global _PROJECT
    _PROJECT = None
    if len(files) > 1:
        from ddpdoctor.lint.project import Project

        _PROJECT = Project(files, roots=[str(p) for p in paths if Path(p).is_dir()])
    jobs = jobs or config.jobs or os.cpu_count() or 1
    script_rules(extra_rules)  # load once in the parent, so forked workers inherit the modules
    global _CACHE
    _CACHE = _result_cache(config, extra_rules, cache_dir) if cache_dir is not None else None
    with _middle_generation_rarely():  # (forked workers inherit it)
        out = _lint_all(files, config, jobs, extra_rules, cache_dir)
    _PROJECT = _CACHE = None
    return _one_per_cause(sorted(out, key=_sort_key))


def _lint_all(files: list[Path], config: LintConfig, jobs: int, extra_rules: tuple[str, ...], cache_dir) -> list[Finding]:
    if jobs <= 1 or len(files) < _PARALLEL_MIN_FILES:
        out = _lint_chunk([str(f) for f in files], config, extra_rules, cache_dir)
    else:
        chunks = _chunks(files, jobs)
        from concurrent.futures import ProcessPoolExecutor  # only when there is enough to share out
        from multiprocessing import get_context

        out = []
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("fork")) as pool:
            for part in pool.map(
                _lint_chunk,
                chunks,
                [config] * len(chunks),
                [extra_rules] * len(chunks),
                [cache_dir] * len(chunks),
            ):
                out.extend(part)
    return out


def _one_per_cause(findings: list[Finding]) -> list[Finding]:
    """Project mode: two scripts that reach the same helper line report the same cause (evidence
    ``cause``: that line); the first, in path order, stands for both."""
    seen: set[tuple[str, str]] = set()
    out = []
    for f in findings:
        cause = f.evidence.get("cause") if f.evidence else None
        if cause is not None:
            if (f.code, cause) in seen:
                continue
            seen.add((f.code, cause))
        out.append(f)
    return out
