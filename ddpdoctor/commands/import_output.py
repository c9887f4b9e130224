"""`ddpdoctor import FILE...`: judge what users already measured (nccl-tests, nvbandwidth,
p2pBandwidthLatencyTest, perftest) against a hardware profile, as a ddpdoctor report.

Never imports torch: parsing and judging are pure (ddpdoctor/readers/tool_output, model/imported/report.py).
"""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = """Import benchmark output you already have and get a verdict: is this bandwidth normal for
this hardware? Reads nccl-tests *_perf logs (text, several collectives per log, or -J JSON),
nvbandwidth (text or -j JSON), cuda-samples p2pBandwidthLatencyTest and perftest (ib_write_bw,
ib_read_bw). The GPU model and hostnames in the logs pick the hardware profile (or --profile). The
report opens with `ddpdoctor report show`, `ddpdoctor tui` and `ddpdoctor recommend` like any other.
Exit 0: nothing failed; 1: wrong data or bandwidth below the profile's fail threshold; 2: a file
could not be read or parsed."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="benchmark output: text logs or JSON files")
    p.add_argument(
        "--profile",
        default="auto",
        metavar="NAME|FILE|auto|none",
        help="hardware profile to judge against (default auto: detected from the GPU model in the logs; "
        "none: no judging; see `ddpdoctor profiles list`)",
    )
    p.add_argument(
        "--json", default=None, metavar="PATH", help="save the report here (for report show, tui, recommend)"
    )
    p.add_argument("--verbose", "-v", action="store_true", help="include info findings")


def run(args: argparse.Namespace) -> int:
    from ddpdoctor.baselines import ProfileError, list_profiles, load_profile
    from ddpdoctor.boundary.outputs import OutputError, check_output
    from ddpdoctor.model.imported.report import build_report
    from ddpdoctor.readers.tool_output import ToolOutputError, parse_file
    from ddpdoctor.report.console import make_console
    from ddpdoctor.report.io import save_report
    from ddpdoctor.report.render_text import print_report

    try:
        check_output(args.json, "--json")
        parsed = [parse_file(f) for f in args.files]
    except (ToolOutputError, OutputError) as e:
        print(f"ddpdoctor import: {e}", file=sys.stderr)
        return 2
    wanted = args.profile or "auto"
    try:
        profiles = list_profiles()
        chosen = None if wanted in ("auto", "none") else load_profile(wanted)
    except ProfileError as e:
        print(f"ddpdoctor import: --profile: {e}", file=sys.stderr)
        return 2
    report = build_report(parsed, profiles, chosen, off=wanted == "none")
    print_report(report, make_console(), verbose=args.verbose)
    prof = report.run.profile or {}
    if prof.get("how") == "none":
        facts = report.run.facts or {}
        if not any(n.get("gpu_models") for n in facts.values()):
            why = "the files name no GPU model"
        else:
            why = "no profile fits: " + ", ".join(
                f"{c['profile']} ({c['violated'][0] if c['violated'] else 'too little known'})"
                for c in prof.get("closest") or []
            )
        print(f"bandwidth not judged: {why}; name a profile with --profile NAME (ddpdoctor profiles list)")
    if args.json:
        try:
            save_report(report, args.json)
        except OutputError as e:
            print(f"ddpdoctor import: {e}", file=sys.stderr)
            return 2
        print(f"report: {args.json}")
    return report.exit_code()
