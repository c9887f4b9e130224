"""Kubernetes node labels and taint from a report (pure), written as ``kubectl`` lines or JSON.

Per node: ``ddpdoctor.io/result`` (pass, warn, fail), ``ddpdoctor.io/failed-check`` (the first failing
check's code; absent on a pass), ``ddpdoctor.io/busbw-gbps`` (all_reduce bus bandwidth at the largest
size measured), ``ddpdoctor.io/runtime-sec`` and ``ddpdoctor.io/valid-until`` (UTC, ``20261125T1600Z``:
a label value may not hold ``:``), after Google's Cluster Health Scanner (``…-result``, ``-bandwidth``,
``-runtime-sec``, results valid 24 h). A failed node also gets the taint
``ddpdoctor.io/unhealthy=CODE:NoSchedule``; a node that passes has it removed.

Label syntax (Kubernetes): an optional prefix (a DNS subdomain, at most 253 characters) and ``/``, then
a name of at most 63 characters of ``[A-Za-z0-9_.-]`` that starts and ends alphanumeric; a value is
empty or follows the name's rules. ``label_key_problem`` / ``label_value_problem`` say what breaks them.
"""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass, field

from ddpdoctor.core.report import Report, Status
from ddpdoctor.model.bandwidth.payloads import BwSweepPayload
from ddpdoctor.model.fleet.metrics import node_status, report_nodes

PREFIX = "ddpdoctor.io"
TAINT_KEY = f"{PREFIX}/unhealthy"
TAINT_EFFECT = "NoSchedule"
RESULT_WORDS = {0: "pass", 1: "warn", 2: "fail"}
_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def label_key_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix or len(prefix) > 253 or not all(_DNS_LABEL_RE.match(p) for p in prefix.split(".")):
            return f"prefix {prefix!r} is not a DNS subdomain (lower-case, dot-separated, at most 253 characters)"
    if not _NAME_RE.match(name):
        return (f"name {name!r} must be 1-63 characters of A-Z a-z 0-9 _ . - and start and end with a letter or "
                "digit")
    return None


def label_value_problem(value: str) -> str | None:
    if value == "" or _NAME_RE.match(value):
        return None
    return f"value {value!r} must be empty or 1-63 characters of A-Z a-z 0-9 _ . - starting and ending alphanumeric"


@dataclass
class NodeLabels:
    node: str
    labels: dict[str, str] = field(default_factory=dict)
    taint: str | None = None  # "KEY=VALUE:EFFECT" when the node failed

    def to_dict(self) -> dict:
        return {"node": self.node, "labels": self.labels, "taint": self.taint}


def valid_until_text(t: float) -> str:
    return time.strftime("%Y%m%dT%H%MZ", time.gmtime(t))


def _busbw(report: Report) -> float | None:
    bw = report.check("BW001")
    rows = BwSweepPayload.from_json(bw.data).ops.get("all_reduce", ()) if bw is not None else ()
    rows = [r for r in rows if r.busbw_GBps is not None]
    return max(rows, key=lambda r: r.size_B).busbw_GBps if rows else None


def node_labels(report: Report, valid_for_s: float) -> list[NodeLabels]:
    rank_host = {r["rank"]: r["hostname"] for r in report.ranks
                 if isinstance(r, dict) and isinstance(r.get("rank"), int) and r.get("hostname")}
    busbw = _busbw(report)
    runtime = report.run.duration_s
    out = []
    for node in report_nodes(report):
        per_check = [(c, node_status(c, node, rank_host)) for c in report.checks if c.kind == "cluster"]
        lost = node in report.run.lost_nodes
        worst = 2 if lost else max((v for _, v in per_check), default=0)
        labels = {f"{PREFIX}/result": RESULT_WORDS[worst]}
        failed = next((c.code for c, v in per_check if v == 2 and c.status is not Status.NOT_RUN), None)
        if failed and worst == 2:
            labels[f"{PREFIX}/failed-check"] = failed
        if busbw is not None:
            labels[f"{PREFIX}/busbw-gbps"] = f"{busbw:.3g}" if busbw < 1 else f"{busbw:.1f}"
        if isinstance(runtime, (int, float)):
            labels[f"{PREFIX}/runtime-sec"] = str(int(round(runtime)))
        labels[f"{PREFIX}/valid-until"] = valid_until_text(report.created + valid_for_s)
        taint = f"{TAINT_KEY}={failed or 'lost'}:{TAINT_EFFECT}" if worst == 2 else None
        out.append(NodeLabels(node, labels, taint))
    return out


def kubectl_lines(items: list[NodeLabels]) -> str:
    """A shell script: label every node, taint the failed ones, untaint the others."""
    lines = ["#!/bin/sh", "# written by ddpdoctor --k8s-labels: apply with a kubeconfig allowed to patch nodes"]
    for it in items:
        pairs = " ".join(shlex.quote(f"{k}={v}") for k, v in it.labels.items())
        lines.append(f"kubectl label node {shlex.quote(it.node)} --overwrite {pairs}")
        if not any(k.endswith("/failed-check") for k in it.labels):
            lines.append(f"kubectl label node {shlex.quote(it.node)} {PREFIX}/failed-check-")
        if it.taint:
            lines.append(f"kubectl taint node {shlex.quote(it.node)} --overwrite {shlex.quote(it.taint)}")
        else:
            lines.append(f"kubectl taint node {shlex.quote(it.node)} {TAINT_KEY}:{TAINT_EFFECT}- 2>/dev/null || true")
    return "\n".join(lines) + "\n"


def labels_json(items: list[NodeLabels]) -> dict:
    return {"prefix": PREFIX, "nodes": [it.to_dict() for it in items]}
