"""Where the TUI finds things in a report: every field name the views read lives here.

A report may come from another version or a user's own check, so each reader is defensive: a missing
or malformed field gives ``None`` (the view then says "no data yet") rather than an exception. The
shapes are documented in docs/architecture.md ("Bandwidth payloads"). Pure: no textual, no torch, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.core.report import Finding, Report, Severity

# -- field names (BW001, P2P001 and the topology checks write them) -----------------------------------
P2P_CODES = ("P2P",)  # code prefixes whose data holds the point-to-point matrix
P2P_MATRIX = "matrix"
P2P_OUTLIERS = "outliers"
BW_CODES = ("BW", "RDMA")  # RDMA001: perftest curves brought in by `ddpdoctor import`
BW_BUSBW = "busbw"  # a curve, or {collective: curve}
BW_TIMES = "all_reduce"  # a curve of [bytes, seconds]
BW_EXPECTED = "expected_busbw_GBps"  # optional reference line
TOPO_NODES = "nodes"  # {hostname: {nvlink, nics, gdr}} when a check reports every node
TOPO_NVLINK = "nvlink"  # a matrix; values are link counts or `nvidia-smi topo -m` words (NV18, SYS, ...)
TOPO_NICS = "nics"  # [{name, state, rate_gbps, link_layer, numa, gpu, rail, path}]
TOPO_GDR = "gdr"  # {verdict, reason, evidence}
TOPO_GPUS = "gpus"  # [{index, name, bus_id, numa}]
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


def as_matrix(d: Any) -> Matrix | None:
    """The architecture's matrix shape, or None if ``d`` is not one (ragged rows are padded)."""
    if not isinstance(d, dict):
        return None
    values = d.get("values")
    if not isinstance(values, list) or not values or not all(isinstance(r, list) for r in values):
        return None
    n = len(values)
    labels = d.get("labels")
    if not isinstance(labels, list) or len(labels) != n:
        labels = [f"r{i}" for i in range(n)]
    rows = [[(row[j] if j < len(row) else None) for j in range(n)] for row in values]
    return Matrix(labels=[str(x) for x in labels], values=rows, unit=str(d.get("unit") or ""))


def as_curve(name: str, d: Any, unit_y: str = "") -> Curve | None:
    if not isinstance(d, dict) or not isinstance(d.get("points"), list):
        return None
    pts = []
    for p in d["points"]:
        if isinstance(p, (list, tuple)) and len(p) >= 2 and _is_number(p[0]) and _is_number(p[1]):
            pts.append((float(p[0]), float(p[1])))
    if not pts:
        return None
    pts.sort()
    return Curve(name, pts, unit_x=str(d.get("unit_x") or "B"), unit_y=str(d.get("unit_y") or unit_y))


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
        m = as_matrix(c.data.get(P2P_MATRIX))
        if m is None:
            continue
        outl = set()
        for o in c.data.get(P2P_OUTLIERS) or []:
            ok = (
                isinstance(o, (list, tuple))
                and len(o) == 2
                and all(isinstance(i, int) and not isinstance(i, bool) for i in o)
            )
            if ok and 0 <= o[0] < m.size and 0 <= o[1] < m.size:
                outl.add((o[0], o[1]))
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
        raw = c.data.get(BW_BUSBW)
        curves: list[Curve] = []
        one = as_curve("all_reduce", raw)
        if one is not None:
            curves.append(one)
        elif isinstance(raw, dict):  # {collective: curve}
            unit_y = str(raw.get("unit_y") or "")
            curves.extend(cv for k, v in raw.items() if (cv := as_curve(str(k), v, unit_y)) is not None)
        if not curves:
            continue
        exp = c.data.get(BW_EXPECTED)
        return BandwidthView(
            c.code, curves, as_curve("time", c.data.get(BW_TIMES)), float(exp) if _is_number(exp) else None
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


def _merge_topology(into: NodeTopology, d: dict[str, Any]) -> None:
    into.nvlink = into.nvlink or as_matrix(d.get(TOPO_NVLINK))
    nics = d.get(TOPO_NICS)
    if isinstance(nics, list) and not into.nics:
        into.nics = [n for n in nics if isinstance(n, dict)]
    gdr = d.get(TOPO_GDR)
    if isinstance(gdr, dict) and into.gdr is None:
        into.gdr = gdr
    elif isinstance(gdr, str) and into.gdr is None:
        into.gdr = {"verdict": gdr}
    gpus = d.get(TOPO_GPUS)
    if isinstance(gpus, list) and not into.gpus:
        into.gpus = [g for g in gpus if isinstance(g, dict)]


def topology_by_node(report: Report | None) -> list[NodeTopology]:
    """Topology per host, merged over every check that reports any of nvlink/nics/gdr/gpus."""
    if report is None:
        return []
    default_host = next((str(r.get("hostname")) for r in report.ranks if r.get("hostname")), "this node")
    nodes: dict[str, NodeTopology] = {}
    for c in report.checks:
        per_node = c.data.get(TOPO_NODES)
        if isinstance(per_node, dict) and all(isinstance(v, dict) for v in per_node.values()):
            for host, d in per_node.items():
                _merge_topology(nodes.setdefault(str(host), NodeTopology(str(host))), d)
        else:
            _merge_topology(nodes.setdefault(default_host, NodeTopology(default_host)), c.data)
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
    return Report(run={"mode": "lint"}, lint=findings)
