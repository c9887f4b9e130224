"""A report as Prometheus text (node_exporter's textfile collector format), pure.

Names and labels follow NCCL Inspector where the quantity is the same, so one dashboard shows both:
``nccl_bus_bandwidth_gbs`` and ``nccl_collective_exec_time_microseconds`` with ``collective`` (NCCL's
names: AllReduce, AllGather, ReduceScatter, Broadcast), ``message_size`` (bytes; Inspector writes a
range such as "134-135MB" for what it aggregates, ddpdoctor measures exact sizes), ``n_nodes``,
``nranks`` and ``node``. A collective is measured across all nodes at once: every node that took part
gets the run's figure (the slowest rank's median). ddpdoctor's own:

- ``ddpdoctor_check_status{check,node}``: 0 ok (passed or skipped), 1 warning (or not run: the run
  ended first), 2 failed (failed, timed out, crashed), per node: a finding that names nodes counts on
  those nodes, one that names none on every node;
- ``ddpdoctor_p2p_bandwidth_gbs{src,dst,src_node,dst_node}`` and ``ddpdoctor_p2p_latency_microseconds``
  for every measured ordered rank pair (src sends);
- ``ddpdoctor_run_status`` (the same 0/1/2 over the whole run), ``ddpdoctor_run_duration_seconds``,
  ``ddpdoctor_run_timestamp_seconds`` (when the report was made; the textfile collector refuses
  sample timestamps, so time is a value).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from ddpdoctor.core.payload import LabeledMatrix
from ddpdoctor.core.report import CheckResult, Finding, Report, Severity, Status
from ddpdoctor.model.bandwidth.payloads import BwSweepPayload, P2PPayload

NCCL_NAMES = {"all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
              "broadcast": "Broadcast", "reduce": "Reduce", "all_to_all": "AllToAll"}
STATUS_VALUE = {Status.PASSED: 0, Status.SKIPPED: 0, Status.WARNING: 1, Status.NOT_RUN: 1,
                Status.FAILED: 2, Status.TIMED_OUT: 2, Status.ERROR: 2}
_SEVERITY_VALUE = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}

_HELP = {
    "nccl_bus_bandwidth_gbs": "Collective bus bandwidth in GB/s (nccl-tests factors; 1 GB = 1e9 B).",
    "nccl_collective_exec_time_microseconds": "Collective time in microseconds (slowest rank's median).",
    "ddpdoctor_check_status": "Check outcome on the node: 0 ok, 1 warning, 2 failed.",
    "ddpdoctor_p2p_bandwidth_gbs": "Point-to-point bandwidth from src to dst in GB/s.",
    "ddpdoctor_p2p_latency_microseconds": "Point-to-point one-way small-message latency in microseconds.",
    "ddpdoctor_run_status": "Whole run: 0 ok, 1 warning, 2 failed.",
    "ddpdoctor_run_duration_seconds": "Wall time of the run in seconds.",
    "ddpdoctor_run_timestamp_seconds": "When the report was made, seconds since the Unix epoch.",
}


def _escape(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x)) if not float(x).is_integer() else str(int(x))


class _Family:
    def __init__(self, name: str) -> None:
        self.name = name
        self.samples: list[str] = []

    def add(self, value: float | None, **labels: object) -> None:
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return
        text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        self.samples.append(f"{self.name}{{{text}}} {_number(value)}" if text else f"{self.name} {_number(value)}")

    def text(self) -> str:
        if not self.samples:
            return ""
        return f"# HELP {self.name} {_HELP[self.name]}\n# TYPE {self.name} gauge\n" + "\n".join(self.samples) + "\n"


def _nodes_of(f: Finding, rank_host: dict[int, str]) -> set[str]:
    w = f.where or {}
    names = {w["node"]} if isinstance(w.get("node"), str) and w.get("node") else set()
    names |= {n for n in (w.get("nodes") or []) if isinstance(n, str)}
    ranks = w.get("ranks") if isinstance(w.get("ranks"), list) else ([w["rank"]] if isinstance(w.get("rank"), int) else [])
    names |= {rank_host[r] for r in ranks if isinstance(r, int) and r in rank_host}
    return names


def node_status(check: CheckResult, node: str, rank_host: dict[int, str]) -> int:
    """The check's 0/1/2 on one node (see the module docstring)."""
    if check.status in (Status.TIMED_OUT, Status.ERROR, Status.NOT_RUN, Status.SKIPPED):
        return STATUS_VALUE[check.status]
    worst = 0
    for f in check.findings:
        where = _nodes_of(f, rank_host)
        if not where or node in where:
            worst = max(worst, _SEVERITY_VALUE[f.severity])
    return worst


def report_nodes(report: Report) -> list[str]:
    if report.run.nodes:
        return [str(n) for n in report.run.nodes]
    hosts = [r.get("hostname") for r in report.ranks if isinstance(r, dict) and r.get("hostname")]
    return list(dict.fromkeys(hosts)) or ["localhost"]


def render(report: Report) -> str:
    nodes = report_nodes(report)
    rank_host = {r["rank"]: r["hostname"] for r in report.ranks
                 if isinstance(r, dict) and isinstance(r.get("rank"), int) and r.get("hostname")}
    fam = {name: _Family(name) for name in _HELP}
    n_nodes = len(nodes)
    nranks = report.run.world_size or len(rank_host) or n_nodes
    bw = report.check("BW001")
    if bw is not None:
        for op, rows in BwSweepPayload.from_json(bw.data).ops.items():
            for row in rows:
                labels = {"collective": NCCL_NAMES.get(op, op), "message_size": row.size_B,
                          "n_nodes": n_nodes, "nranks": nranks}
                for node in nodes:
                    fam["nccl_bus_bandwidth_gbs"].add(row.busbw_GBps, **labels, node=node)
                    fam["nccl_collective_exec_time_microseconds"].add(row.time_us, **labels, node=node)
    p2p = report.check("P2P001")
    if p2p is not None:
        pay = P2PPayload.from_json(p2p.data)
        for matrix, name in ((pay.matrix, "ddpdoctor_p2p_bandwidth_gbs"), (pay.latency, "ddpdoctor_p2p_latency_microseconds")):
            for src, dst, value in matrix_cells(matrix):
                fam[name].add(value, src=src, dst=dst, src_node=src.partition("@")[2] or src,
                              dst_node=dst.partition("@")[2] or dst)
    for check in report.checks:
        if check.kind != "cluster":
            continue
        for node in nodes:
            fam["ddpdoctor_check_status"].add(node_status(check, node, rank_host), check=check.code, node=node)
    worst = max((STATUS_VALUE[c.status] for c in report.checks), default=0)
    fam["ddpdoctor_run_status"].add(2 if report.failed else worst)
    fam["ddpdoctor_run_duration_seconds"].add(report.run.duration_s)
    fam["ddpdoctor_run_timestamp_seconds"].add(report.created)
    return "".join(f.text() for f in fam.values())


def matrix_cells(matrix: LabeledMatrix | None) -> Iterable[tuple[str, str, float]]:
    """(row label, column label, value) for every measured cell of a report matrix (row = sender)."""
    if matrix is None:
        return
    labels, values = matrix.labels, matrix.values
    for i, row in enumerate(values[: len(labels)]):
        for j, v in enumerate((row or [])[: len(labels)]):
            if i != j and isinstance(v, (int, float)) and not isinstance(v, bool):
                yield str(labels[i]), str(labels[j]), float(v)
