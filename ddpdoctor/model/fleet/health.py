"""`ddpdoctor health`'s judgement (pure): the node-local environment rule the topology checks do not
cover, and which failure becomes the node's drain reason.

NCCL001 already judges NCCL_SOCKET_IFNAME (NCCL's prefix / ``=`` / ``^`` syntax). Gloo reads
GLOO_SOCKET_IFNAME as exact interface names, comma-separated; one this node lacks (or has down) makes
every gloo process group on the node fail to start, which is a fault of the node's configuration.
"""

from __future__ import annotations

from collections.abc import Mapping

from ddpdoctor.core.report import CheckResult, Finding, Severity, Status, status_from_findings
from ddpdoctor.model.fleet.drain_reason import DrainReason

ENV_CODE = "ENV001"
# The order failures are named in a drain reason: the cause before its effects (a wrong interface
# name also breaks the collective run; a missing GPU also fails NVLink).
ORDER = ("ENV001", "NCCL001", "GPU001", "NVL001", "PCI001", "NUMA001", "IB001", "GDR001", "COL001")


def gloo_ifname_findings(value: str | None, interfaces: Mapping[str, bool], node: str) -> list[Finding]:
    """``interfaces``: name -> up. Nothing to say when GLOO_SOCKET_IFNAME is unset."""
    if value is None:
        return []
    names = [n.strip() for n in value.split(",") if n.strip()]
    have = ", ".join(f"{n} ({'up' if up else 'down'})" for n, up in sorted(interfaces.items())) or "none"
    where = {"node": node, "env": "GLOO_SOCKET_IFNAME"}
    evidence = {"value": value, "available": sorted(interfaces)}
    if not names:
        return [Finding(ENV_CODE, Severity.ERROR, "GLOO_SOCKET_IFNAME is set but empty", where=where,
                        evidence=evidence, hint="unset it or name this node's interface")]
    out = []
    for n in names:
        if n not in interfaces:
            out.append(Finding(ENV_CODE, Severity.ERROR,
                               f"GLOO_SOCKET_IFNAME={value} names {n}, which {node} does not have (have: {have})",
                               where=where, evidence=evidence,
                               hint="gloo cannot start on this node; fix GLOO_SOCKET_IFNAME in the node's "
                               "environment (slurmd's, the job's, or the wrapper script's)"))
        elif not interfaces[n]:
            out.append(Finding(ENV_CODE, Severity.ERROR, f"GLOO_SOCKET_IFNAME={value} names {n}, which is down",
                               where=where, evidence=evidence, hint=f"bring {n} up or name another interface"))
    return out


def env_result(findings: list[Finding]) -> CheckResult:
    status = status_from_findings(findings)
    summary = "; ".join(f.message for f in findings) if findings else "the socket-interface variables name real, up interfaces"
    return CheckResult(code=ENV_CODE, title="Node environment", status=status, summary=summary,
                       findings=findings, data={})


def drain_reason(checks: list[CheckResult]) -> DrainReason | None:
    """The first failed check in ORDER (then any other), with its first error finding, or None: a
    warning never drains a node, and neither does a check that timed out or crashed — that is
    ddpdoctor not finishing (a loaded node, a broken install), not a fault it found."""
    failing = [c for c in checks if c.status is Status.FAILED]
    if not failing:
        return None
    rank = {code: i for i, code in enumerate(ORDER)}
    first = min(failing, key=lambda c: rank.get(c.code, len(ORDER)))
    err = next((f for f in first.findings if f.severity is Severity.ERROR), None)
    if err is not None:
        return DrainReason(first.code, err.message)
    return DrainReason(first.code, first.summary or f"{first.title} failed")


def unfinished(checks: list[CheckResult]) -> list[CheckResult]:
    """Checks that timed out or crashed: the node's health is unknown, not bad."""
    return [c for c in checks if c.status in (Status.TIMED_OUT, Status.ERROR)]
