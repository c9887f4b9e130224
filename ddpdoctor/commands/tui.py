"""`ddpdoctor tui`: the interactive terminal app.

ddpdoctor tui [--nodes N --nproc-per-node K --backend B --select C --skip C] [-- CHECK_OPTIONS]
    run the checks on this machine live (`ddpdoctor check --events … --json …` in a child process)
ddpdoctor tui REPORT.json      open a saved report (from any cluster)
ddpdoctor tui HANG.json        open a saved hang diagnosis (`ddpdoctor hang --json`, `watch --json`)
ddpdoctor tui --lint PATH      lint PATH and show the findings with their source
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ddpdoctor.commands import flags

DESCRIPTION = "The interactive terminal app: run the checks live, or open a saved report or lint results."
LIVE_OPTIONS = ("nodes", "nproc_per_node", "backend")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "report",
        nargs="?",
        metavar="REPORT.json",
        help="open a saved report or hang diagnosis instead of running",
    )
    p.add_argument("--lint", action="append", metavar="PATH", help="lint PATH (file or folder; repeatable)")
    g = p.add_argument_group("live run (passed on to `ddpdoctor check`)")
    g.add_argument("--nodes", type=flags.count, help="number of nodes")
    g.add_argument("--nproc-per-node", type=flags.count, help="ranks per node")
    g.add_argument("--backend", choices=("gloo", "nccl"), help="process-group backend")
    g.add_argument("--select", action="append", metavar="CODE", help="only these checks (code or prefix)")
    g.add_argument("--skip", action="append", metavar="CODE", help="skip these checks (code or prefix)")
    g.add_argument(
        "--run-timeout",
        type=flags.seconds,
        default=3600.0,
        metavar="S",
        help="stop the whole run after S seconds (default 3600)",
    )
    # nargs="*" rather than REMAINDER: REMAINDER would swallow options given after REPORT.json.
    p.add_argument(
        "passthrough", nargs="*", metavar="-- CHECK_OPTION", help="after --: more options for `check`"
    )
    # Internal: replace `python -m ddpdoctor check` (tests and benchmarks point it at a fake check).
    p.add_argument("--check-cmd", help=argparse.SUPPRESS)
    p.add_argument("--workdir", help=argparse.SUPPRESS)


def check_args(args: argparse.Namespace) -> list[str]:
    out: list[str] = []
    for name in LIVE_OPTIONS:
        value = getattr(args, name)
        if value is not None:
            out += [f"--{name.replace('_', '-')}", str(value)]
    for name in ("select", "skip"):
        for code in getattr(args, name) or []:
            out += [f"--{name}", code]
    return out + list(args.passthrough)


def _fail(msg: str) -> int:
    print(f"ddpdoctor tui: {msg}", file=sys.stderr)
    return 2


def fix_passthrough(args: argparse.Namespace) -> None:
    """argparse hands `tui -- --opt v` the first word after -- as REPORT.json: give it back."""
    if args.report is not None and args.report.startswith("-"):
        args.passthrough = [args.report, *args.passthrough]
        args.report = None
    if args.passthrough[:1] == ["--"]:
        args.passthrough = args.passthrough[1:]


def run(args: argparse.Namespace) -> int:
    fix_passthrough(args)
    live_given = any(getattr(args, n) is not None for n in (*LIVE_OPTIONS, "select", "skip", "check_cmd"))
    if args.report and args.lint:
        return _fail("give either REPORT.json or --lint PATH, not both")
    if (args.report or args.lint) and (live_given or args.passthrough):
        return _fail("live-run options (--nodes, --backend, --select, ...) need no REPORT.json or --lint")

    app_kwargs: dict = {}
    if args.report and (hang := _hang_diagnosis(args.report)) is not None:
        if isinstance(hang, str):
            return _fail(hang)
        from ddpdoctor.tui.views.hang import HangApp

        result = HangApp(hang).run()
        return int(result) if result is not None else (0 if hang.kind == "none" else 1)
    if args.report:
        from ddpdoctor.report.io import ReportError, load_report

        try:
            app_kwargs = {
                "report": load_report(args.report),
                "report_dir": Path(args.report).resolve().parent,
            }
        except ReportError as e:
            return _fail(str(e))
    elif args.lint:
        missing = [p for p in args.lint if not Path(p).exists()]
        if missing:
            return _fail(f"{missing[0]}: no such file or folder")
        app_kwargs = {"lint": _lint_callable(args.lint)}
    else:
        problem = live_problem(check_args(args))
        if problem is not None:  # said here, before the app takes the screen
            return _fail(problem)
        from ddpdoctor.tui.live import LiveConfig

        command = shlex.split(args.check_cmd) if args.check_cmd else None
        app_kwargs = {
            "live": LiveConfig(
                check_args=check_args(args), command=command, workdir=args.workdir, timeout_s=args.run_timeout
            )
        }

    from ddpdoctor.tui.app import DoctorApp

    app = DoctorApp(**app_kwargs)
    try:
        result = app.run()
    finally:
        _end_live_run(app)
    sig = getattr(app, "signalled", None)
    if sig is not None:
        import signal

        print(f"ddpdoctor tui: interrupted ({signal.Signals(sig).name})", file=sys.stderr)
    return app.exit_code if result is None else int(result)


def _end_live_run(app) -> None:
    """Whatever way the app ended (quit, a crash, SIGTERM, SIGHUP): the check it started is ended,
    and its temp folder goes unless it holds the report (the app named it) or the log of a failure."""
    import shutil

    run = getattr(app, "run_handle", None)
    if run is None:
        return
    run.kill_now()
    if run.cfg.workdir is not None:
        return  # the user's folder
    if run.report_path.is_file():
        print(f"report: {run.report_path}")
    elif app.exit_code == 2 and not run.stopped and run.log_path.is_file():
        print(f"ddpdoctor tui: the check ended without a report; log: {run.log_path}", file=sys.stderr)
    else:
        shutil.rmtree(run.dir, ignore_errors=True)


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit
        raise _ArgumentError(message)


def live_problem(argv: list[str]) -> str | None:
    """What `ddpdoctor check ARGV` would refuse before launching (a flag, a profile, an output path,
    an impossible launch plan), in check's own words; None when it would start."""
    import os

    from ddpdoctor.boundary.outputs import OutputError
    from ddpdoctor.commands import check, recommend_args
    from ddpdoctor.runtime.launch_plan import LaunchError, plan_launch

    parser = _Parser(prog="ddpdoctor check", add_help=False)
    check.add_arguments(parser)
    try:
        cargs = parser.parse_args(argv)
    except _ArgumentError as e:
        return f"{e} (options passed on to `ddpdoctor check`)"
    try:
        check.check_outputs(cargs)
        check.check_run(cargs)
        plan_launch(nodes=cargs.nodes, nproc_per_node=cargs.nproc_per_node, node_rank=cargs.node_rank,
                    rdzv_endpoint=cargs.rdzv_endpoint, rdzv_id=cargs.rdzv_id, rdzv_timeout_s=cargs.rdzv_timeout,
                    env=os.environ, default_nproc_per_node=2)
    except (LaunchError, recommend_args.OptionError, OutputError) as e:
        return str(e)
    return None


def _hang_diagnosis(path: str):
    """The HangDiagnosis saved in ``path``, an error message when it is one but broken, or None when
    the file is something else (a check report: load_report judges it)."""

    from ddpdoctor.boundary.inputs import InputError, read_json
    from ddpdoctor.model.hang.analysis import DIAGNOSIS_FORMAT, HangDiagnosis

    try:
        doc = read_json(path, "report or hang diagnosis")
    except InputError as e:
        return str(e)
    if not isinstance(doc, dict) or doc.get("format") != DIAGNOSIS_FORMAT:
        return None
    if doc.get("version") != 1:
        return f"{path}: hang diagnosis version {doc.get('version')!r}; this ddpdoctor reads version 1"
    try:
        return HangDiagnosis.from_dict(doc)
    except (KeyError, TypeError, ValueError) as e:
        return f"{path}: not a readable hang diagnosis ({e})"


def _lint_callable(paths: list[str]):
    """A function that lints ``paths`` into a Report (the app runs it in a worker thread)."""

    def run_lint():
        from ddpdoctor.lint import lint_paths
        from ddpdoctor.tui.adapt import lint_result_to_report

        return lint_result_to_report(lint_paths(paths))

    return run_lint
