"""Who took part in a run: one RankInfo per rank, the backend and the run's options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
