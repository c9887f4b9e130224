"""`ddpdoctor report show|json|junit FILE`: re-render a saved report."""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = "Re-render a saved JSON report (from any cluster) as text, JSON or JUnit XML."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("show", "junit", "json"), help="show: rich text; junit: JUnit XML; json: normalized JSON")
    p.add_argument("file", help="a report written by `ddpdoctor check --json`")
    p.add_argument("--verbose", "-v", action="store_true", help="include info findings")


def run(args: argparse.Namespace) -> int:
    import json

    from ddpdoctor.report.io import ReportError, load_report

    try:
        report = load_report(args.file)
    except ReportError as e:
        print(f"ddpdoctor report: {e}", file=sys.stderr)
        return 2
    if args.action == "show":
        from ddpdoctor.report.console import make_console
        from ddpdoctor.report.render_text import print_report

        print_report(report, make_console(), verbose=args.verbose)
    elif args.action == "junit":
        from ddpdoctor.report.render_junit import to_junit

        print(to_junit(report))
    else:
        print(json.dumps(report.to_dict(), indent=1))
    return report.exit_code()
