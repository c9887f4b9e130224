"""After a `check` report is printed: the fleet outputs (--metrics, --k8s-labels, --history), the
drain of confirmed bad nodes (--drain), and whether the run only warned (for --exit-codes nagios)."""

from __future__ import annotations

import argparse
import sys

from ddpdoctor.core.report import Report
from ddpdoctor.model.fleet.exit_codes import outcome
from ddpdoctor.runtime.fleet_files import write_outputs
from ddpdoctor.runtime.launch_plan import LaunchPlan


def finish(args: argparse.Namespace, report: Report, plan: LaunchPlan, out, writes: bool) -> int:
    """The default-scheme exit code; ``writes``: this task writes files and drains (task 0 under srun)."""
    args._warned = outcome(report.checks, extra_errors=report.failed) == "warning"
    if not writes:
        return report.exit_code()
    if getattr(args, "drain", False):
        from ddpdoctor.runtime.confirm_pass import confirm_and_drain

        def say(line: str) -> None:
            out.print(line, soft_wrap=True, highlight=False, markup=False)

        confirmations = confirm_and_drain(report, args, plan.nproc_per_node, say)
        report.run["drain"] = [{"node": c.node, "partner": c.partner, "condemned": c.condemned,
                                "reason": c.reason.text() if c.reason else None, "said": c.said}
                               for c in confirmations]
        if confirmations and getattr(args, "json", None):
            from ddpdoctor.report.io import save_report

            save_report(report, args.json)  # with what the confirmation pass measured and did
    try:
        write_outputs(report, metrics=args.metrics, k8s_labels=list(args.k8s_labels), valid_for_s=args.valid_for,
                      history=args.history)
    except OSError as e:
        print(f"ddpdoctor check: {e}", file=sys.stderr)
        return 2
    return report.exit_code()

