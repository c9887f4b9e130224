"""`ddpdoctor diff`: what changed between two reports, beyond noise."""

from __future__ import annotations

import argparse
import json
import sys

DESCRIPTION = """Say what changed between two ddpdoctor reports beyond run-to-run noise: bus bandwidth per
size band, each p2p link and its latency, versions (torch, NCCL, CUDA, driver) and NCCL variables,
topology, findings that appeared or went away. Give OLD and NEW reports, or one --history folder (its last
two reports for the same nodes). Exit 0 nothing changed, 1 something changed, 2 unreadable input."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("reports", nargs="+", metavar="REPORT_OR_DIR",
                   help="OLD.json NEW.json, or a --history folder")
    p.add_argument("--json", action="store_true", help="print the changes as JSON")
    p.add_argument("--bw-threshold", type=float, default=None, metavar="FACTOR",
                   help="noise line for bus bandwidth at >= 1 MiB as a factor (1.1: a 9 %% fall or 10 %% rise; "
                   "default 1.1 on NCCL, 3 on gloo)")
    p.add_argument("--p2p-threshold", type=float, default=None, metavar="FACTOR",
                   help="noise line for a p2p link's bandwidth as a factor (default 1.2 on NCCL, 3 on gloo)")


def run(args: argparse.Namespace) -> int:
    import dataclasses
    import time
    from pathlib import Path

    from ddpdoctor.model.fleet.diff import Thresholds, diff_reports
    from ddpdoctor.report.io import ReportError, load_report
    from ddpdoctor.runtime.history_store import last_two

    try:
        if len(args.reports) == 1 and Path(args.reports[0]).is_dir():
            old_path, new_path = last_two(Path(args.reports[0]))
        elif len(args.reports) == 2:
            old_path, new_path = (Path(p) for p in args.reports)
        else:
            raise ReportError("give two reports (OLD NEW) or one --history folder")
        old, new = load_report(old_path), load_report(new_path)
    except ReportError as e:
        print(f"ddpdoctor diff: {e}", file=sys.stderr)
        return 2
    backends = {old.run.backend, new.run.backend}
    th = Thresholds.for_backend(backends.pop() if len(backends) == 1 else "gloo")
    for flag, field_name in (("bw_threshold", "busbw_large"), ("p2p_threshold", "p2p")):
        value = getattr(args, flag)
        if value is not None:
            if not 1 < value < 1000:
                print(f"ddpdoctor diff: --{flag.replace('_', '-')} must be a factor above 1 (1.1: 10 %), got {value}",
                      file=sys.stderr)
                return 2
            th = dataclasses.replace(th, **{field_name: value})
    d = diff_reports(old, new, th, now=time.time())
    if args.json:
        print(json.dumps({"old": str(old_path), "new": str(new_path), **d.to_dict()}, indent=1, default=str))
    else:
        print(f"{old_path} → {new_path}: {d.summary()}")
    return 1 if d.changes else 0
