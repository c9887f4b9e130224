"""What a cluster check's pure half works with: the world it ran in, and the Summary it returns.

A cluster check has two halves:

* ``run(ctx) -> dict`` runs on every rank (I/O: torch, NVML, sysfs). It returns JSON-able data.
  Findings a rank can judge alone go in ``data["findings"]`` as ``Finding.to_dict()``.
* ``summarize(results, world) -> Summary`` runs once on rank 0 over ``{rank: data or None}`` (None:
  that rank sent nothing — lost or stuck). It is pure, so tests feed it recorded per-rank data.

Checks without ``summarize`` get ``default_summarize``: the union of the ranks' findings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.core.report import Finding, Status, status_from_findings
from ddpdoctor.core.world import WorldInfo


@dataclass
class Summary:
    """Rank 0's verdict for one check. ``status`` None means: derive it from the findings."""

    findings: list[Finding] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    status: Status | None = None

    def final_status(self) -> Status:
        return self.status if self.status is not None else status_from_findings(self.findings)


def rank_findings(results: dict[int, dict | None]) -> list[Finding]:
    out: list[Finding] = []
    for rank in sorted(results):
        data = results[rank]
        for f in (data or {}).get("findings", []) if isinstance(data, dict) else []:
            out.append(f if isinstance(f, Finding) else Finding.from_dict(f))
    return out


def default_summarize(results: dict[int, dict | None], world: WorldInfo) -> Summary:
    findings = rank_findings(results)
    return Summary(findings=findings, summary=f"{len(findings)} finding(s)" if findings else "ok")
