"""The --history folder: one JSON report per run, with ``run.history`` (node set, versions, NCCL
variables, topology, valid-until; model/fleet/history.py), named so they sort by time."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.core.report import Report
from ddpdoctor.model.fleet.history import entry_name, meta, nodes_key
from ddpdoctor.report.io import ReportError, load_report
from ddpdoctor.report.io import write_json_atomic as write_json


def keep(folder: Path, report: Report, valid_for_s: float) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    info = meta(report, valid_for_s)
    report.run.history = info
    path = folder / entry_name(report, nodes_key(info["nodes"]))
    write_json(path, report.to_dict())
    return path


def last_two(folder: Path) -> tuple[Path, Path]:
    """The two newest reports in ``folder`` for the same node set as the newest."""
    files = sorted(p for p in folder.glob("*.json") if p.is_file())
    if not files:
        raise ReportError(f"{folder}: no reports kept here (ddpdoctor check --history {folder})")
    newest = files[-1]
    key = newest.stem.rpartition("-")[2]
    same = [p for p in files if p.stem.rpartition("-")[2] == key]
    if len(same) < 2:
        raise ReportError(f"{folder}: only one report for the node set of {newest.name}; run again to compare")
    return same[-2], same[-1]


def load(path: Path) -> Report:
    return load_report(path)
