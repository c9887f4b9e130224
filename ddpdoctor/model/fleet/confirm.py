"""The confirmation pass of ``check --drain`` (pure): no node is drained on one measurement.

Each node the verdict blames (a suspect) is measured again, later, together with one node that passed,
running only the checks that blamed it. It is condemned when that second run fails again on it:
- any error of those checks that names the suspect, or names no node or both (the partner passed the
  first run, so what the pair shows is the suspect's);
- for P2P001, whose peer-relative verdict cannot tell which end of a single pair is slow, the pair's
  slower direction below ``Thresholds.bad_frac`` (the same line P2P001 draws for an error) of the
  median between nodes that both passed the first run.
A second run that produced no report condemns nobody: ddpdoctor failing is not the node failing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ddpdoctor.core.report import Report, Severity
from ddpdoctor.model.bandwidth.p2p_analysis import Thresholds
from ddpdoctor.model.bandwidth.payloads import P2PPayload
from ddpdoctor.model.fleet.drain_reason import DrainReason
from ddpdoctor.model.fleet.metrics import matrix_cells
from ddpdoctor.model.nodes.bad_nodes import blamed_nodes

BAD_FRAC = Thresholds().bad_frac


@dataclass(frozen=True)
class Confirmation:
    node: str
    partner: str | None
    condemned: bool
    reason: DrainReason | None  # set when condemned
    said: str  # one line for the log: what the second measurement showed


def _host(label: str) -> str:
    return label.partition("@")[2] or label


def _names(f) -> set[str]:
    w = f.where or {}
    out = {w["node"]} if w.get("node") else set()
    return out | {n for n in (w.get("nodes") or []) if isinstance(n, str)}


def suspect_codes(report: Report, node: str) -> list[str]:
    """The failing checks whose errors name ``node`` (or, for a lost node, every failing check)."""
    lost = node in report.run.lost_nodes
    out = []
    for c in report.checks:
        if c.status.failing and (lost or any(f.severity is Severity.ERROR and node in _names(f) for f in c.findings)):
            out.append(c.code)
    return out


def partners(report: Report) -> list[str]:
    """Nodes that passed: not blamed, not lost, in run order."""
    bad = set(blamed_nodes(report)) | set(report.run.lost_nodes)
    return [n for n in report.run.nodes if n not in bad]


def healthy_p2p_reference(report: Report, healthy: list[str]) -> float | None:
    """Median GB/s between two different healthy nodes in the first run (None when none measured)."""
    p2p = report.check("P2P001")
    if p2p is None:
        return None
    ok = set(healthy)
    vals = [v for a, b, v in matrix_cells(P2PPayload.from_json(p2p.data).matrix) if _host(a) != _host(b)
            and _host(a) in ok and _host(b) in ok]
    return statistics.median(vals) if vals else None


def decide(first: Report, second: Report | None, node: str, partner: str, codes: list[str]) -> Confirmation:
    if second is None:
        return Confirmation(node, partner, False, None, f"{node}: not re-measured (the second run gave no report); "
                            "not drained")
    for c in second.checks:
        if c.code not in codes or c.code == "P2P001" or not c.status.failing:
            continue
        for f in c.findings:
            names = _names(f)
            if f.severity is Severity.ERROR and (node in names or not names or partner in names):
                said = f"confirmed against {partner}: {f.message}"
                return Confirmation(node, partner, True, DrainReason(c.code, said), f"{node}: {said}")
    if "P2P001" in codes:
        p2p = second.check("P2P001")
        cells = [(a, b, v) for a, b, v in matrix_cells(P2PPayload.from_json(p2p.data).matrix if p2p else None)
                 if {_host(a), _host(b)} == {node, partner}]
        ref = healthy_p2p_reference(first, partners(first))
        if cells and ref:
            a, b, worst = min(cells, key=lambda c: c[2])
            frac = worst / ref
            said = (f"{_host(a)} -> {_host(b)} {worst:.3g} GB/s, {frac:.0%} of the {ref:.3g} GB/s between "
                    "healthy nodes")
            if frac < BAD_FRAC:
                return Confirmation(node, partner, True, DrainReason("P2P001", f"{node} confirmed slow: {said}"),
                                    f"{node}: confirmed slow against {partner}: {said}")
            return Confirmation(node, partner, False, None, f"{node}: spared, fine when measured again against "
                                f"{partner}: {said}")
        if p2p is not None and p2p.status.failing and any(f.severity is Severity.ERROR for f in p2p.findings):
            msg = next(f.message for f in p2p.findings if f.severity is Severity.ERROR)
            return Confirmation(node, partner, True, DrainReason("P2P001", f"confirmed against {partner}: {msg}"),
                                f"{node}: confirmed against {partner}: {msg}")
    return Confirmation(node, partner, False, None, f"{node}: spared, {', '.join(codes)} passed when measured "
                        f"again against {partner}")
