"""`ddpdoctor hang DIR... [--json PATH] [--allow-pickle]`: diagnose a hang from saved evidence.

Also the API ``ddpdoctor watch`` calls::

    diag = analyse([Path(d)], allow_pickle=False, lint=True)   # raises EvidenceError(path, msg)
    print_diagnosis(diag, console)
    diag.to_dict()

Never imports torch (tests/test_imports.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddpdoctor.model.hang.analysis import HangDiagnosis
    from ddpdoctor.model.hang.evidence import EvidenceError

DESCRIPTION = (
    "Diagnose a hung or crashed distributed job from saved evidence: the folders `ddpdoctor watch` "
    "writes (rank-<R>.json, watch.json), or torch's own Flight Recorder dumps in JSON form, and NCCL "
    "RAS's JSON report saved as ncclras.json (`ncclras -f json`; untested on hardware). Names the "
    "first operation the ranks disagree on, the ranks that wait, and where each culprit rank is "
    "(path:line). Exit codes: 0 no hang found, 1 a hang or mismatch diagnosed, 2 could not read the evidence."
)

__all__ = ["EvidenceError", "HangDiagnosis", "analyse", "attach_lint", "print_diagnosis"]


def __getattr__(name: str):
    """The diagnosis model is imported when first used, not when the CLI builds its parser (every
    ddpdoctor command, `lint` included, would pay for compiling it)."""
    if name == "HangDiagnosis":
        from ddpdoctor.model.hang.analysis import HangDiagnosis

        return HangDiagnosis
    if name == "EvidenceError":
        from ddpdoctor.model.hang.evidence import EvidenceError

        return EvidenceError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dirs", nargs="+", metavar="DIR", help="evidence folders (one per node) or files")
    p.add_argument(
        "--json", metavar="PATH", help="also write the diagnosis as JSON (`ddpdoctor tui PATH` opens it)"
    )
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="read pickled Flight Recorder dumps (torch's default form); only for files you wrote yourself",
    )
    p.add_argument("--no-lint", action="store_true", help="do not lint the source files in the stacks")


def attach_lint(diag: HangDiagnosis) -> None:
    """Run `ddpdoctor lint` on the source files in every rank's stack, with the job's real world
    size, and put each finding on the stack line it is about ("this is DDP301: barrier reached by
    rank 0 only"), culprit or not. Files that no longer exist (evidence from another machine) are
    skipped."""
    from ddpdoctor.lint import CONFIRMED_AT_RUN_TIME, LintConfig, LintInputError, lint_paths

    lines = [s for r in diag.ranks for s in r.chain]
    files = sorted({s.file for s in lines if Path(s.file).is_file()})
    if not files:
        return
    try:
        config = LintConfig(world_sizes=(max(1, diag.world_size),), extend_select=CONFIRMED_AT_RUN_TIME)
        found = lint_paths(files, config, jobs=1)
    except (LintInputError, OSError, SyntaxError):
        return  # the verdict stands without lint; lint problems are `ddpdoctor lint`'s to report
    by_place: dict[tuple[str, int], list[dict[str, str]]] = {}
    for f in found:
        if f.location is None:
            continue
        item = {"code": f.code, "message": f.message}
        for key in _places(f):
            if item not in by_place.setdefault(key, []):
                by_place[key].append(item)
    for s in lines:
        s.lint = by_place.get((str(Path(s.file).resolve()), s.line), [])


def _places(f) -> set[tuple[str, int]]:
    """Where a lint finding is about: its own line, and the end of its call chain (DDP301 reports a
    rank-dependent call of a helper at the call, and the collective the chain ends at is where a
    stack waits)."""
    path = Path(f.location.path).resolve()
    out = {(str(path), f.location.line)}
    chain = str((f.evidence or {}).get("chain", "")).split(" -> ")
    name, _, line = chain[-1].rpartition(":")
    if name and line.isdigit():
        out.add((str(path.parent / name), int(line)))
    return out


def analyse(dirs: list[Path], allow_pickle: bool = False, lint: bool = True) -> HangDiagnosis:
    """Read the evidence under ``dirs`` and diagnose it. Raises EvidenceError naming the bad file."""
    from ddpdoctor.model.hang.analysis import diagnose
    from ddpdoctor.readers.hang_files import collector_paused, read_evidence

    with collector_paused():  # the diagnosis walks the same millions of entries
        diag = diagnose(read_evidence([Path(d) for d in dirs], allow_pickle=allow_pickle))
    if lint:
        attach_lint(diag)
    return diag


def print_diagnosis(diag: HangDiagnosis, console: Any) -> None:
    from ddpdoctor.report.hang_view import HangView

    console.print(HangView(diag))


def run(args: argparse.Namespace) -> int:
    from ddpdoctor.boundary.outputs import OutputError, check_output, write_output
    from ddpdoctor.model.hang.evidence import EvidenceError
    from ddpdoctor.report.console import make_console

    try:
        check_output(args.json, "--json")
    except OutputError as e:
        print(f"ddpdoctor hang: {e}", file=sys.stderr)
        return 2
    try:
        diag = analyse([Path(d) for d in args.dirs], allow_pickle=args.allow_pickle, lint=not args.no_lint)
    except EvidenceError as e:
        print(f"ddpdoctor hang: {e}", file=sys.stderr)
        return 2
    print_diagnosis(diag, make_console())
    if args.json:
        try:
            write_output(args.json, json.dumps(diag.to_dict(), indent=1) + "\n", "--json")
        except OutputError as e:
            print(f"ddpdoctor hang: {e}", file=sys.stderr)
            return 2
    return 0 if diag.kind == "none" else 1
