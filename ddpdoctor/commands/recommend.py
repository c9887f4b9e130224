"""`ddpdoctor recommend REPORT.json`: recommendations again, from a saved report, with other inputs.

The measurements stay as they were; the profile they are judged against, the model whose buckets are
simulated and a proposed layout can change. `--json OUT` saves the updated report.
"""

from __future__ import annotations

import argparse
import sys

from ddpdoctor.commands import recommend_args

DESCRIPTION = """Recompute the recommendations (bucket_cap_mb, NCCL_ALGO, process-group layouts) and the
profile verdicts from a saved `ddpdoctor check --json` report, e.g. for another model or layout."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", metavar="REPORT.json", help="a report written by `ddpdoctor check --json`")
    recommend_args.add_arguments(p)
    p.add_argument("--json", default=None, metavar="OUT", help="write the updated report here")


def run(args: argparse.Namespace) -> int:
    from ddpdoctor.boundary.inputs import plain
    from ddpdoctor.boundary.outputs import OutputError, check_output
    from ddpdoctor.report.console import make_console
    from ddpdoctor.report.io import ReportError, load_report, save_report
    from ddpdoctor.report.render_text import recommendation_panel
    from ddpdoctor.runtime.finalize import attach_profile, attach_recommendations

    try:
        check_output(args.json, "--json")
        report = load_report(args.report)
        profile = recommend_args.profile_option(args)
        options = recommend_args.recommend_options(args)
    except (ReportError, recommend_args.OptionError, OutputError) as e:
        print(f"ddpdoctor recommend: {e}", file=sys.stderr)
        return 2
    attach_profile(report, profile)
    attach_recommendations(report, options)
    out = make_console()
    prof = report.run.profile or {}
    if prof:
        out.print(plain(f"profile: {prof.get('name') or 'none'} ({prof.get('how')})"), style="dim")
    for warning in report.run.warnings:
        out.print(plain(f"warning: {warning}"), style="yellow")
    for rec in report.recommendations:
        out.print(recommendation_panel(rec, evidence=True))
    if not report.recommendations:
        out.print("no recommendations: the report holds no bandwidth measurements")
    if args.json:
        try:
            save_report(report, args.json)
        except OutputError as e:
            print(f"ddpdoctor recommend: {e}", file=sys.stderr)
            return 2
        out.print(plain(f"report: {args.json}"), style="dim")
    return 0
