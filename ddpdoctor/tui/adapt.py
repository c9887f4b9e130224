"""Where the TUI finds things in a report: the typed payloads it reads, turned into what the views draw.

A report may come from another version or a user's own check, so each reader is defensive: a missing
or malformed field gives ``None`` (the view then says "no data yet") rather than an exception (the
payloads' ``from_json`` never raise). The shapes are documented in docs/architecture.md ("Bandwidth
payloads"). Pure: no textual, no torch, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.core.payload import LabeledMatrix, PlotCurve
from ddpdoctor.core.report import Finding, Report, Severity
from ddpdoctor.core.run_info import RunInfo
from ddpdoctor.model.bandwidth.payloads import BwSweepPayload, P2PPayload
from ddpdoctor.model.topology.payloads import HostLists, host_lists

# -- where the views look (the payloads' typed readers are in model/bandwidth and model/topology) -------
P2P_CODES = ("P2P",)  # code prefixes whose data is a P2PPayload (the point-to-point matrix)
BW_CODES = ("BW", "RDMA")  # BwSweepPayload's busbw curves; RDMA001: perftest curves from `ddpdoctor import`
# topology: per host {nvlink, nics, gdr, gpus} (model.topology.payloads.HostLists); a NIC's fields:
NIC_FIELDS = ("name", "state", "rate_gbps", "link_layer", "numa", "gpu", "rail", "path")
SOURCE_KEYS = ("source", "snippet")  # a lint finding may carry its own source excerpt in evidence


# -- shared shapes --------------------------------------------------------------------------------------
@dataclass
class Matrix:
    """A square matrix with labels; cells may be numbers, words or None (no measurement)."""

    labels: list[str]
    values: list[list[Any]]
    unit: str = ""

    @property
    def size(self) -> int:
        return len(self.labels)

    def numbers(self) -> list[float]:
        return [v for row in self.values for v in row if _is_number(v)]


@dataclass
class Curve:
    name: str
    points: list[tuple[float, float]]
    unit_x: str = "B"
    unit_y: str = ""


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def as_matrix(d: LabeledMatrix | Any) -> Matrix | None:
    """The architecture's matrix shape (a payload's LabeledMatrix, or its JSON), or None if ``d`` is not
    one (ragged rows are padded, labels that do not fit replaced by r0, r1, ...)."""
    m = d if isinstance(d, LabeledMatrix) else LabeledMatrix.from_json(d)
    if m is None or not m.values:
        return None
    n = len(m.values)
    labels = m.labels if len(m.labels) == n else [f"r{i}" for i in range(n)]
    rows = [[(row[j] if j < len(row) else None) for j in range(n)] for row in m.values]
    return Matrix(labels=[str(x) for x in labels], values=rows, unit=m.unit)


def as_curve(name: str, d: PlotCurve | Any, unit_y: str = "") -> Curve | None:
    """A payload's PlotCurve (or its JSON) with its finite points, sorted; None when none is left."""
    c = d if isinstance(d, PlotCurve) else PlotCurve.from_json(d)
    if c is None:
        return None
    pts = sorted((float(x), float(y)) for x, y in c.points if _is_number(x) and _is_number(y))
    if not pts:
        return None
    return Curve(name, pts, unit_x=c.unit_x or "B", unit_y=c.unit_y or unit_y)


def _checks(report: Report | None, prefixes: tuple[str, ...]):
    if report is None:
        return []
    return [c for c in report.checks if c.code.startswith(prefixes)]


# -- p2p -------------------------------------------------------------------------------------------------
@dataclass
class P2PView:
    code: str
    matrix: Matrix
    outliers: set[tuple[int, int]] = field(default_factory=set)
    findings: list[Finding] = field(default_factory=list)


def p2p_view(report: Report | None) -> P2PView | None:
    for c in _checks(report, P2P_CODES):
        p2p = P2PPayload.from_json(c.data)
        m = as_matrix(p2p.matrix)
        if m is None:
            continue
        outl = {(i, j) for i, j in p2p.outliers if 0 <= i < m.size and 0 <= j < m.size}
        return P2PView(c.code, m, outl, list(c.findings))
    return None


def median(xs: list[float]) -> float | None:
    s = sorted(xs)
    if not s:
        return None
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def cell_details(view: P2PView, i: int, j: int) -> str:
    """One line on a selected cell: sender → receiver, value, how it compares with the median."""
    m = view.matrix
    src, dst = m.labels[i], m.labels[j]
    v = m.values[i][j]
    if i == j:
        return f"{src}: diagonal (a rank does not send to itself)"
    if not _is_number(v):
        return f"{src} → {dst}: not measured"
    med = median(m.numbers())
    rel = f", {v / med:.2f}× the median {med:.3g} {m.unit}" if med else ""
    flag = "  OUTLIER" if (i, j) in view.outliers else ""
    back = m.values[j][i]
    rev = f"; reverse {back:.3g} {m.unit}" if _is_number(back) else ""
    return f"{src} → {dst}: {v:.3g} {m.unit}{rel}{rev}{flag}"


# -- bandwidth curve --------------------------------------------------------------------------------------
@dataclass
class BandwidthView:
    code: str
    curves: list[Curve]
    times: Curve | None = None
    expected: float | None = None


def bandwidth_view(report: Report | None) -> BandwidthView | None:
    for c in _checks(report, BW_CODES):
        bw = BwSweepPayload.from_json(c.data)  # BW001's and RDMA001's {collective: curve}, or one curve
        curves = [cv for k, v in bw.busbw.items() if (cv := as_curve(k, v)) is not None]
        if not curves:
            continue
        exp = bw.expected_busbw_GBps
        return BandwidthView(
            c.code, curves, as_curve("time", bw.all_reduce), float(exp) if _is_number(exp) else None
        )
    return None


# -- topology ------------------------------------------------------------------------------------------------
@dataclass
class NodeTopology:
    host: str
    nvlink: Matrix | None = None
    nics: list[dict[str, Any]] = field(default_factory=list)
    gdr: dict[str, Any] | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.nvlink is None and not self.nics and self.gdr is None and not self.gpus


def _merge_topology(into: NodeTopology, d: HostLists) -> None:
    into.nvlink = into.nvlink or as_matrix(d.nvlink)
    if d.nics is not None and not into.nics:
        into.nics = [n for n in d.nics if isinstance(n, dict)]
    if isinstance(d.gdr, dict) and into.gdr is None:
        into.gdr = d.gdr
    elif isinstance(d.gdr, str) and into.gdr is None:
        into.gdr = {"verdict": d.gdr}
    if d.gpus is not None and not into.gpus:
        into.gpus = [g for g in d.gpus if isinstance(g, dict)]


def topology_by_node(report: Report | None) -> list[NodeTopology]:
    """Topology per host, merged over every check that reports any of nvlink/nics/gdr/gpus."""
    if report is None:
        return []
    default_host = next((str(r.get("hostname")) for r in report.ranks if r.get("hostname")), "this node")
    nodes: dict[str, NodeTopology] = {}
    for c in report.checks:
        for host, d in host_lists(c.code, c.data, default_host, inside_data=False).items():
            _merge_topology(nodes.setdefault(host, NodeTopology(host)), d)
    return [n for n in nodes.values() if not n.empty]


def nic_row(nic: dict[str, Any]) -> list[str]:
    return ["" if nic.get(k) is None else str(nic.get(k)) for k in NIC_FIELDS]


# -- lint -----------------------------------------------------------------------------------------------------
def lint_findings(report: Report | None) -> list[Finding]:
    if report is None:
        return []
    out = list(report.lint)
    # `ddpdoctor check --script` may put script findings under their checks as well.
    out += [f for c in report.checks if c.kind == "script" for f in c.findings]
    return sorted(
        out,
        key=lambda f: (
            f.location.path if f.location else "",
            f.location.line if f.location else 0,
            -f.severity.rank,
        ),
    )


def embedded_source(f: Finding) -> str | None:
    for k in SOURCE_KEYS:
        v = f.evidence.get(k)
        if isinstance(v, str) and v.strip():
            return v
    return None


def severity_style(sev: Severity) -> str:
    return {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}[sev]


def lint_result_to_report(result: Any) -> Report:
    """Whatever `ddpdoctor.lint.lint_paths` returns (a Report, Findings, dicts, or an object with
    ``findings``) as a Report whose ``lint`` holds the findings."""
    if isinstance(result, Report):
        return result
    items = getattr(result, "findings", result)
    if callable(items):
        items = items()
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"lint_paths returned {type(result).__name__}, not findings")
    findings = [f if isinstance(f, Finding) else Finding.from_dict(f) for f in items]
    return Report(run=RunInfo(mode="lint"), lint=findings)
