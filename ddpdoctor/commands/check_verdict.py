"""After a `check` run: the verdict on the terminal, the report files (--json, --junit, --bad-nodes), the
drain of confirmed bad nodes (--drain) and the fleet outputs (--metrics, --k8s-labels, --history)."""

from __future__ import annotations

import json
import socket
import sys

from rich.console import Console

from ddpdoctor.boundary.outputs import OutputError, write_output
from ddpdoctor.core.check_run import CheckRun
from ddpdoctor.core.report import Report
from ddpdoctor.model.fleet.exit_codes import outcome as fleet_outcome
from ddpdoctor.runtime.launcher import CheckOutcome


def _error(msg: str) -> None:
    """Plain text on stderr: no wrapping, no rich markup (messages contain brackets and paths)."""
    print(msg, file=sys.stderr, flush=True)


def conclude(run: CheckRun, done: CheckOutcome, out: Console) -> tuple[int, bool]:
    """Say and write what the run found. Returns the default-scheme exit code and whether the run only
    warned (for --exit-codes nagios)."""
    for line in done.warnings:
        _error(line)
    report = done.report
    if report is None:
        _error(f"ddpdoctor check: {done.failure}")
        if run.verbose:
            _error(done.log_tail)
        return 2, False
    code = report.exit_code()
    if not done.prints_report:
        out.print(follower_line(report, run, socket.gethostname()), soft_wrap=True, highlight=False, markup=False)
    else:
        from ddpdoctor.report.render_text import print_report

        print_report(report, out, verbose=run.verbose)
    warned = fleet_outcome(report.checks, extra_errors=report.failed) == "warning"
    if not done.prints_report:  # the other Slurm tasks would race task 0 for the same paths
        return code, warned
    code = write_reports(report, run, code)
    return finish_fleet(report, run, out, code, done.nproc_per_node), warned


def write_reports(report: Report, run: CheckRun, code: int) -> int:
    """The report files the user asked for, after the report is printed; a write that fails keeps
    the content in a temp file, says where, and makes the exit code 2 (ddpdoctor could not do all it
    was asked), never a traceback and never a lost report."""
    from ddpdoctor.report.render_junit import to_junit

    files = (("--json", run.json, lambda: json.dumps(report.to_dict(), indent=1, default=str) + "\n"),
             ("--junit", run.junit, lambda: to_junit(report)),
             ("--bad-nodes", run.bad_nodes, lambda: bad_nodes_text(report)))
    failed = False
    for flag, path, make in files:
        if not path:
            continue
        try:
            write_output(path, make(), flag)
        except OutputError as e:
            _error(f"ddpdoctor check: {e}")
            failed = True
            continue
        if flag == "--json":
            print(f"report: {path}", flush=True)
    return 2 if failed else code


def finish_fleet(report: Report, run: CheckRun, out: Console, code: int, nproc: int) -> int:
    """--drain (a confirmation pass, then scontrol), then --metrics, --k8s-labels, --history."""
    if run.drain:
        from ddpdoctor.runtime.confirm_pass import confirm_and_drain

        def say(line: str) -> None:
            out.print(line, soft_wrap=True, highlight=False, markup=False)

        confirmations = confirm_and_drain(report, run, nproc, say)
        report.run.drain = [{"node": c.node, "partner": c.partner, "condemned": c.condemned,
                                "reason": c.reason.text() if c.reason else None, "said": c.said}
                               for c in confirmations]
        if confirmations and run.json:
            try:  # again, with what the confirmation pass measured and did
                write_output(run.json, json.dumps(report.to_dict(), indent=1, default=str) + "\n", "--json")
            except OSError as e:
                print(f"ddpdoctor check: {e}", file=sys.stderr)
                code = 2
    from ddpdoctor.runtime.fleet_files import write_outputs

    try:
        write_outputs(report, metrics=run.metrics, k8s_labels=list(run.k8s_labels), valid_for_s=run.valid_for_s,
                      history=run.history)
    except OSError as e:
        print(f"ddpdoctor check: {e}", file=sys.stderr)
        return 2
    return code


def bad_nodes_text(report: Report) -> str:
    """The --bad-nodes file: one Slurm hostlist expression and a newline, or nothing at all."""
    from ddpdoctor.model.nodes.bad_nodes import bad_nodes_entry

    hostlist = (report.run.bad_nodes or bad_nodes_entry(report)).hostlist
    return f"{hostlist}\n" if hostlist else ""


def follower_line(report: Report, run: CheckRun, host: str) -> str:
    """What a Slurm task other than SLURM_PROCID=0 prints: the verdict and where the report is."""
    from ddpdoctor.report.render_text import ReportView

    verdict = " ".join(ReportView(report).verdict().plain.splitlines()[0].split())
    first = (report.run.nodes or ["node 0"])[0]
    files = "".join(f", --{k} {v}" for k, v in (("json", run.json), ("junit", run.junit)) if v)
    return f"{host}: {verdict}; report: task 0 (SLURM_PROCID=0) on {first}{files}"
