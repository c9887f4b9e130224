"""`ddpdoctor watch -- COMMAND ARGS...`: run a training job unchanged and, when a rank hangs in a
collective or p2p operation (or the job crashes), say which rank, which operation, which line."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from ddpdoctor.commands import flags

DESCRIPTION = (
    "Run the launch command (torchrun ..., python -m torch.distributed.run ..., srun ...) unchanged, with "
    "Flight Recorder and a small helper switched on in every rank through the environment. When a rank "
    "has waited inside one collective or p2p operation for longer than --hang-after, collect every "
    "rank's Flight Recorder entries and thread stacks into --dumps, print the diagnosis, end the job "
    "and exit 1. A job that finishes exits with its own code; a crash is diagnosed from the evidence "
    "its ranks left. Several nodes: run `ddpdoctor watch` on every node, as torchrun, or once around "
    "srun (--dumps on storage every node sees)."
)
EPILOG = "example: ddpdoctor watch --hang-after 120 -- torchrun --nproc-per-node 8 train.py --epochs 3"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.add_argument(
        "--hang-after",
        type=flags.seconds,
        default=300.0,
        metavar="S",
        help="call it a hang when a rank has waited in one operation this long (default 300)",
    )
    p.add_argument(
        "--dumps",
        metavar="DIR",
        help="where the evidence goes (default ./ddpdoctor-hang-<time>/; kept only when used)",
    )
    p.add_argument("--json", metavar="PATH", help="also write the diagnosis as JSON (`ddpdoctor tui PATH`)")
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
    if not args.hang_after > 0:
        return _error(f"--hang-after must be a positive number of seconds, not {args.hang_after:g}")
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
    from ddpdoctor.boundary.outputs import OutputError, check_output

    try:
        check_output(args.json, "--json")
    except OutputError as e:
        return _error(str(e))

    watch = Watch(command, args.hang_after, dumps, collect_s=args.collect_timeout)
    result = watch.run()
    have_evidence = bool(result.evidence_ranks)
    if result.outcome == "finished" and not have_evidence:
        if args.json:
            _write_json(args.json, result.record)
        return 0
    code = 1 if result.outcome == "hang" else result.exit_code
    if not have_evidence:
        hosts = result.record.get("hosts") or {}
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
    diag_code = _diagnose(result, args.json)
    return code if diag_code != 2 else 2


def _diagnose(result, json_path: str | None) -> int:
    from ddpdoctor.commands.hang import EvidenceError, analyse, print_diagnosis
    from ddpdoctor.report.console import make_console

    try:
        diag = analyse([result.dumps], allow_pickle=False, lint=True)
    except EvidenceError as e:
        print(f"ddpdoctor watch: cannot read the evidence: {e}", file=sys.stderr)
        return 2
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
