"""The fleet outputs both `check` and `health` offer: --metrics, --k8s-labels, --history, --valid-for,
--exit-codes; their paths are checked before any work and the files written after it."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``24h``, ``7d`` -> seconds."""
    m = _DURATION_RE.match(text)
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive duration such as 90s, 30m, 24h or 7d, got {text!r}")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def add_output_arguments(p: argparse.ArgumentParser, history: bool = True) -> None:
    g = p.add_argument_group("fleet outputs")
    if not history:  # `check` has its own --json
        g.add_argument("--json", default=None, metavar="PATH", help="write the JSON report here")
    g.add_argument("--metrics", default=None, metavar="FILE.prom",
                   help="write Prometheus text for node_exporter's textfile collector (FILE.prom.tmp, then renamed)")
    g.add_argument("--k8s-labels", action="append", default=[], metavar="FILE",
                   help="write Kubernetes node labels and taint: kubectl lines, or JSON when FILE ends in .json "
                   "(repeatable)")
    g.add_argument("--valid-for", type=duration, default=24 * 3600.0, metavar="DURATION",
                   help="how long a result stays valid (labels' valid-until; diff calls older ones stale); default 24h")
    if history:
        g.add_argument("--history", default=None, metavar="DIR",
                       help="keep this report in DIR with its node set, versions and topology (for ddpdoctor diff)")
    g.add_argument("--exit-codes", choices=("default", "nagios"), default="default",
                   help="default: 0 ok, 1 failed, 2 could not run; nagios: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN")


def check_output_paths(args: argparse.Namespace) -> None:
    """Every output path is usable before any work (boundary/outputs.py: an existing folder, a regular
    file or nothing); --history is a folder, created when missing, never a file."""
    from ddpdoctor.boundary.outputs import OutputError, check_output

    for flag, path in (("--json", getattr(args, "json", None) if not hasattr(args, "junit") else None),
                       ("--metrics", args.metrics), *(("--k8s-labels", k) for k in args.k8s_labels)):
        check_output(path, flag)
    hist = getattr(args, "history", None)
    if hist and Path(hist).exists() and not Path(hist).is_dir():
        raise OutputError(f"--history {hist}: exists and is not a folder; give a folder for the kept reports")


def write_outputs(args: argparse.Namespace, report) -> list[str]:
    from ddpdoctor.runtime.fleet_files import write_outputs as write

    return write(report, **output_options(args))


def output_options(args: argparse.Namespace) -> dict:
    """The fleet output options as plain values, for the runtime (`health`: its --json too; `check`
    writes its --json itself)."""
    return {"json_path": getattr(args, "json", None), "metrics": args.metrics, "k8s_labels": list(args.k8s_labels),
            "valid_for_s": args.valid_for, "history": getattr(args, "history", None)}
