"""After a `check` report is printed: the fleet outputs (--metrics, --k8s-labels, --history), the
drain of confirmed bad nodes (--drain), and whether the run only warned (for --exit-codes nagios)."""

from __future__ import annotations

import argparse
import sys

from ddpdoctor.core.report import Report
from ddpdoctor.model.fleet.exit_codes import outcome
from ddpdoctor.runtime.fleet_files import write_outputs


def finish(args: argparse.Namespace, report: Report, out, code: int, writes: bool, nproc: int) -> int:
    """The default-scheme exit code (``code`` so far); ``writes``: this task writes files and drains
    (task 0 under srun)."""
    args._warned = outcome(report.checks, extra_errors=report.failed) == "warning"
    if not writes:
        return code
    if getattr(args, "drain", False):
        from ddpdoctor.runtime.confirm_pass import confirm_and_drain

        def say(line: str) -> None:
            out.print(line, soft_wrap=True, highlight=False, markup=False)

        confirmations = confirm_and_drain(report, args, nproc, say)
        report.run["drain"] = [{"node": c.node, "partner": c.partner, "condemned": c.condemned,
                                "reason": c.reason.text() if c.reason else None, "said": c.said}
                               for c in confirmations]
        if confirmations and getattr(args, "json", None):
            import json

            from ddpdoctor.boundary.outputs import write_output

            try:  # again, with what the confirmation pass measured and did
                write_output(args.json, json.dumps(report.to_dict(), indent=1, default=str) + "\n", "--json")
            except OSError as e:
                print(f"ddpdoctor check: {e}", file=sys.stderr)
                code = 2
    try:
        write_outputs(report, metrics=args.metrics, k8s_labels=list(args.k8s_labels), valid_for_s=args.valid_for,
                      history=args.history)
    except OSError as e:
        print(f"ddpdoctor check: {e}", file=sys.stderr)
        return 2
    return code

