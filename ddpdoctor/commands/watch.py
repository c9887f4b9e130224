"""`ddpdoctor watch -- COMMAND ARGS...`: run a training job unchanged and, when a rank hangs in a
collective or p2p operation (or the job crashes), say which rank, which operation, which line."""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

from ddpdoctor.commands import flags

MIN_HANG_AFTER_S = 1.0  # a shorter wait is an ordinary collective, not a hang
MIN_CONFIRM_S = 0.5

DESCRIPTION = (
    "Run the launch command (torchrun ..., python -m torch.distributed.run ..., srun ...) unchanged, with "
    "Flight Recorder and a small helper switched on in every rank through the environment. A deadlock "
    "that is certain (ranks of one group in different collectives, a cycle of p2p waits, a collective "
    "of a group one of whose members has ended, new_group called by some ranks only) is called after "
    "--confirm seconds; any other wait when a rank has waited inside one operation for longer than "
    "--hang-after. Then collect every "
    "rank's Flight Recorder entries and thread stacks into --dumps, print the diagnosis, end the job "
    "and exit 1. A job that finishes exits with its own code; a crash is diagnosed from the evidence "
    "its ranks left. Several nodes: run `ddpdoctor watch` on every node, as torchrun, or once around "
    "srun (--dumps on storage every node sees)."
)
EPILOG = "example: ddpdoctor watch --hang-after auto -- torchrun --nproc-per-node 8 train.py --epochs 3"


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, found {text!r}") from None


def _hang_after(text: str) -> float | str:
    return "auto" if text.strip().lower() == "auto" else _seconds(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.add_argument(
        "--hang-after",
        type=_hang_after,
        default=300.0,
        metavar="S|auto",
        help="call a wait that is not certainly a deadlock a hang when a rank has waited in one "
        f"operation this long (at least {MIN_HANG_AFTER_S:g}; default 300); auto: from the job's own "
        "rhythm, never below 60",
    )
    p.add_argument(
        "--confirm",
        type=_seconds,
        default=3.0,
        metavar="S",
        help="a certain deadlock must be seen unchanged this long before the job is ended (default 3)",
    )
    p.add_argument(
        "--dumps",
        metavar="DIR",
        help="where the evidence goes (default ./ddpdoctor-hang-<time>/; kept only when used)",
    )
    p.add_argument("--json", metavar="PATH", help="also write the diagnosis as JSON (`ddpdoctor tui PATH`)")
    p.add_argument(
        "--verify",
        action="store_true",
        help="for the first runs of a script: check while it runs what lint can only guess "
        "(collectives whose operation, shape, dtype or root differ across ranks, stopped before they "
        "run; isend/irecv requests never waited; DDP forwards run by some ranks only; a shuffling "
        "DistributedSampler iterated again with the same epoch); costs a few store round trips per "
        "collective",
    )
    p.add_argument(
        "--collect-timeout",
        type=flags.seconds,
        metavar="S",
        help="how long to wait for every rank's evidence after a hang (default: a few polls)",
    )
    p.add_argument(
        "job", nargs=argparse.REMAINDER, metavar="-- COMMAND ARGS", help="the launch command, after --"
    )


def _error(msg: str) -> int:
    print(f"ddpdoctor watch: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    command = list(args.job)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        return _error("no command to run: give it after --, e.g. `ddpdoctor watch -- torchrun train.py`")
    if args.hang_after != "auto" and not (
        math.isfinite(args.hang_after) and args.hang_after >= MIN_HANG_AFTER_S
    ):
        return _error(
            f"--hang-after must be a finite number of seconds, at least {MIN_HANG_AFTER_S:g}, or auto; "
            f"not {args.hang_after:g}"
        )
    if not (math.isfinite(args.confirm) and args.confirm >= MIN_CONFIRM_S):
        return _error(f"--confirm must be a finite number of seconds, at least {MIN_CONFIRM_S:g}; not {args.confirm:g}")
    if args.collect_timeout is not None and not (math.isfinite(args.collect_timeout) and args.collect_timeout > 0):
        return _error(f"--collect-timeout must be a finite positive number of seconds, not {args.collect_timeout:g}")
    if shutil.which(command[0]) is None and not Path(command[0]).is_file():
        return _error(f"command not found: {command[0]}")
    dumps = Path(args.dumps) if args.dumps else None

    from ddpdoctor.runtime.watch_session import Watch, default_dumps_dir, save_record

    if dumps is None:
        dumps = default_dumps_dir()
    if dumps.exists() and not dumps.is_dir():
        return _error(f"--dumps {dumps}: exists and is not a directory")
    if dumps.is_dir() and any(dumps.glob("rank-*.json")):
        return _error(
            f"--dumps {dumps}: already holds evidence (rank-*.json); give an empty or new directory"
        )
    unwritable = _unwritable(dumps)
    if unwritable:
        return _error(f"--dumps {dumps}: {unwritable}; give a folder you can write to")
    from ddpdoctor.boundary.outputs import OutputError, check_output

    try:
        check_output(args.json, "--json")
    except OutputError as e:
        return _error(str(e))

    watch = Watch(command, args.hang_after, dumps, collect_s=args.collect_timeout, confirm_s=args.confirm,
                  verify=args.verify)  # fmt: skip
    result = watch.run()
    verified = _verify_report(result.record.get("verify") or [], result.record.get("forwards") or [],
                              result.world_size, diagnosed=bool(result.evidence_ranks))  # fmt: skip
    result.record["verify"] = [asdict(f) for f in verified]  # watch.json: the grouped findings
    have_evidence = bool(result.evidence_ranks)
    if result.outcome == "finished" and not have_evidence:
        if args.json:
            _write_json(args.json, _finished_diagnosis(result, verified) if args.verify else result.record)
        return 0
    code = 1 if result.outcome == "hang" else result.exit_code
    if not have_evidence:
        hosts = result.record.get("hosts") or {}
        ends = result.record.get("ends") or {}
        ended = [r for r in result.missing_ranks if ends.get(str(r), {}).get("how") == "exit"]
        if ended and len(ended) == len(result.missing_ranks):
            codes = ", ".join(f"rank {r} ({hosts.get(str(r), '?')}) exited with code {ends[str(r)].get('code')}"
                              for r in ended)  # fmt: skip
            print(f"ddpdoctor watch: the job ended (exit {result.record['job_exit_code']}): {codes}; no rank "
                  "was hung or crashed", file=sys.stderr)  # fmt: skip
            if args.json:
                _write_json(args.json, result.record)
            return code
        lost = ", ".join(f"{r} ({hosts.get(str(r), '?')})" for r in result.missing_ranks)
        why = (
            (
                f"ranks {lost} ended without leaving any (killed, e.g. SIGKILL or the OOM killer, or lost); "
                "the other nodes' watch has the diagnosis"
            )
            if lost
            else "did it create a process group?"
        )
        print(
            f"ddpdoctor watch: the job ended ({result.outcome}, exit {result.record['job_exit_code']}) "
            f"and no rank on this node left evidence: {why}",
            file=sys.stderr,
        )
        if args.json:
            _write_json(args.json, result.record)
        return code
    save_record(result)
    diag_code = _diagnose(result, args.json, verified)
    return code if diag_code != 2 else 2


def _finished_diagnosis(result, verified: list) -> dict:
    """--verify on a job that finished: a hang diagnosis with nothing hung and what --verify found, so
    that `ddpdoctor tui PATH` shows it."""
    from ddpdoctor.model.hang.analysis import HangDiagnosis

    n = len(verified)
    verdict = f"the job finished (exit {result.record.get('job_exit_code')})" + (
        f"; watch --verify found {n} problem{'s' if n != 1 else ''} while it ran" if n else "; watch --verify found nothing"
    )
    r = result.record
    watch = {"command": r.get("command"), "outcome": r.get("outcome"), "exit_codes": r.get("exit_codes"),
             "detected_after_s": None, "hang_after_s": r.get("hang_after_s"), "trigger": None}  # fmt: skip
    diag = HangDiagnosis(verdict, "none", None, None, None, None, [], [], [], [], [], r.get("world_size") or 0,
                         watch=watch, heading="Exit", verify=list(verified))  # fmt: skip
    return diag.to_dict()


def _verify_report(items: list[dict], forwards: list[dict], world: int | None, diagnosed: bool) -> list:
    """Print what --verify found while the job ran, one finding per cause, each joined with the lint
    finding at the same place ("DDP101 at train.py:10, confirmed at run time: ..."). A collective
    mismatch stopped the job: the diagnosis that follows names it, so it is not printed twice."""
    from ddpdoctor.model.hang.verify import forward_findings, group_run_findings

    found = group_run_findings(items + forward_findings(forwards))
    if not found:
        return []
    _join_lint(found, world)
    shown = [f for f in found if not (diagnosed and f.kind == "collective_mismatch")]
    if shown:
        print(f"Verify: {len(shown)} finding{'s' if len(shown) != 1 else ''} while the job ran (watch --verify)")
    for f in shown:
        print(f"  {f.headline()}")
        if f.code:
            print(f"      {f.code}")
        for line in f.calls:
            print(f"      {line}")
        for line in f.joined():
            print(f"      {line}")
    return found


def _join_lint(found: list, world: int | None) -> None:
    """A lint finding joins a run-time one when it is at the same path:line or its chain passes
    through it (DDP101 sits on the sampler and lists the loop that iterates it)."""
    from ddpdoctor.lint import CONFIRMED_AT_RUN_TIME, LintConfig, LintInputError, lint_paths

    files = sorted({f.file for f in found if Path(f.file).is_file()})
    if not files:
        return
    try:
        config = LintConfig(world_sizes=(max(1, world or 2),), extend_select=CONFIRMED_AT_RUN_TIME)
        lints = lint_paths(files, config, jobs=1)
    except (LintInputError, OSError, SyntaxError):
        return
    for f in found:
        here = f"{Path(f.file).name}:{f.line}"
        for x in lints:
            if x.location is None or Path(x.location.path).resolve() != Path(f.file).resolve():
                continue
            chain = str((x.evidence or {}).get("chain", "")).split(" -> ")
            if x.location.line == f.line or here in chain:
                item = {"code": x.code, "message": x.message, "where": f"{Path(x.location.path).name}:{x.location.line}"}
                if item not in f.lint:
                    f.lint.append(item)


def _unwritable(dumps: Path) -> str | None:
    """Why the evidence could not be written there, found before the job starts by writing a probe
    file (permissions alone do not say: root, read-only mounts, /proc), or None. Leaves nothing."""
    made: list[Path] = []
    try:
        missing = [p for p in [dumps, *dumps.parents] if not p.exists()]
        for p in reversed(missing):
            p.mkdir()
            made.append(p)
        probe = dumps / f".ddpdoctor-write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
        return None
    except OSError as e:
        return f"not writable ({e.strerror or e})"
    finally:
        for p in reversed(made):
            try:
                p.rmdir()
            except OSError:
                pass


def _diagnose(result, json_path: str | None, verify: list | None = None) -> int:

    from ddpdoctor.commands.hang import EvidenceError, analyse, print_diagnosis
    from ddpdoctor.report.console import make_console

    try:
        diag = analyse([result.dumps], allow_pickle=False, lint=True)
    except EvidenceError as e:
        print(f"ddpdoctor watch: cannot read the evidence: {e}", file=sys.stderr)
        return 2
    diag.verify = list(verify or [])
    console = make_console()
    print_diagnosis(diag, console)
    print(f"evidence: {result.dumps}/ (again: ddpdoctor hang {result.dumps})")
    if json_path:
        _write_json(json_path, diag.to_dict())
    return 0


def _write_json(path: str, doc: dict) -> None:
    """The output boundary; a failed write keeps the document elsewhere and says where."""
    from ddpdoctor.boundary.outputs import OutputError, write_output

    try:
        write_output(path, json.dumps(doc, indent=1) + "\n", "--json")
    except OutputError as e:
        print(f"ddpdoctor watch: {e}", file=sys.stderr)
