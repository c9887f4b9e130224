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

from ddpdoctor.report.model import Finding, Status, status_from_findings


@dataclass
class RankInfo:
    rank: int
    local_rank: int
    node_rank: int
    hostname: str
    local_world_size: int = 1


@dataclass
class WorldInfo:
    """Who took part: one RankInfo per rank, the backend and the run's options."""

    ranks: list[RankInfo]
    backend: str = "gloo"
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    @property
    def nodes(self) -> list[str]:
        """Hostnames in node-rank order (one per node)."""
        seen: dict[int, str] = {}
        for r in self.ranks:
            seen.setdefault(r.node_rank, r.hostname)
        return [seen[k] for k in sorted(seen)]

    def node_of(self, rank: int) -> int:
        return self.ranks[rank].node_rank

    def host_of(self, rank: int) -> str:
        return self.ranks[rank].hostname

    def ranks_on_node(self, node_rank: int) -> list[int]:
        return [r.rank for r in self.ranks if r.node_rank == node_rank]

    @classmethod
    def from_dicts(cls, ranks: list[dict[str, Any]], backend: str = "gloo", options: dict | None = None):
        return cls(
            ranks=[
                RankInfo(
                    rank=int(r["rank"]),
                    local_rank=int(r.get("local_rank", 0)),
                    node_rank=int(r.get("node_rank", 0)),
                    hostname=str(r.get("hostname", "?")),
                    local_world_size=int(r.get("local_world_size", 1)),
                )
                for r in sorted(ranks, key=lambda r: int(r["rank"]))
            ],
            backend=backend,
            options=dict(options or {}),
        )


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
