"""ENV001's payload as typed data: what each rank saw (versions, its GPU, interfaces, the NCCL_/GLOO_
variables) and the versions per node. Written by checks/env001_environment.py; read by profile detection
(each rank's GPU) and the fleet history (versions, NCCL variables)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ddpdoctor.core.payload import as_dict, number, obj, text, whole

VERSION_KEYS = ("python", "torch", "cuda", "nccl", "driver")


@dataclass(frozen=True)
class RankGpu:
    """The CUDA device a rank used (NCCL runs only)."""

    index: int | None = None
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "uuid": self.uuid, "pci_bus_id": self.pci_bus_id}

    @classmethod
    def from_json(cls, d: Any) -> RankGpu | None:
        if not isinstance(d, dict):
            return None
        return cls(whole(d, "index"), text(d, "name"), text(d, "uuid"), whole(d, "pci_bus_id"))


@dataclass(frozen=True)
class RankEnv:
    """One rank's environment, in the order ENV001's run() writes it."""

    hostname: str | None = None
    node_rank: int | None = None
    local_rank: int | None = None
    python: str | None = None
    torch: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    driver: str | None = None
    gpu: RankGpu | None = None
    cpu_count: int | None = None
    cpu_affinity: int | None = None
    mem_total_GiB: float | None = None
    mem_available_GiB: float | None = None
    interfaces: Mapping[str, Any] = field(default_factory=dict)  # {name: {"addrs": [...], "up": bool}}
    socket_ifname_var: str | None = None  # NCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME
    socket_ifname: str | None = None
    route_interface: str | None = None
    route_address: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["gpu"] = self.gpu.to_json() if self.gpu is not None else None
        out["interfaces"], out["env"] = dict(self.interfaces), dict(self.env)
        return out

    @classmethod
    def from_json(cls, d: Any) -> RankEnv:
        d = as_dict(d)
        return cls(
            hostname=text(d, "hostname"), node_rank=whole(d, "node_rank"), local_rank=whole(d, "local_rank"),
            **{k: text(d, k) for k in VERSION_KEYS},
            gpu=RankGpu.from_json(d.get("gpu")),
            cpu_count=whole(d, "cpu_count"), cpu_affinity=whole(d, "cpu_affinity"),
            mem_total_GiB=number(d, "mem_total_GiB"), mem_available_GiB=number(d, "mem_available_GiB"),
            interfaces=as_dict(d.get("interfaces")),
            socket_ifname_var=text(d, "socket_ifname_var"), socket_ifname=text(d, "socket_ifname"),
            route_interface=text(d, "route_interface"), route_address=text(d, "route_address"),
            env={k: v for k, v in as_dict(d.get("env")).items() if isinstance(v, str)},
        )  # fmt: skip


@dataclass(frozen=True)
class NodeEnv:
    """One node's versions and machine, from its lowest rank, and the ranks on it."""

    python: str | None = None
    torch: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    driver: str | None = None
    cpu_count: int | None = None
    mem_total_GiB: float | None = None
    route_interface: str | None = None
    route_address: str | None = None
    socket_ifname: str | None = None
    ranks: tuple[int, ...] = ()

    @classmethod
    def of(cls, rank: RankEnv, ranks: tuple[int, ...]) -> NodeEnv:
        return cls(**{f.name: getattr(rank, f.name) for f in fields(cls) if f.name != "ranks"}, ranks=ranks)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["ranks"] = list(self.ranks)
        return out

    @classmethod
    def from_json(cls, d: Any) -> NodeEnv:
        d = as_dict(d)
        return cls(
            **{k: text(d, k) for k in VERSION_KEYS},
            cpu_count=whole(d, "cpu_count"), mem_total_GiB=number(d, "mem_total_GiB"),
            route_interface=text(d, "route_interface"), route_address=text(d, "route_address"),
            socket_ifname=text(d, "socket_ifname"),
            ranks=tuple(r for r in d.get("ranks") or [] if isinstance(r, int)) if isinstance(d.get("ranks"), list) else (),
        )  # fmt: skip


@dataclass(frozen=True)
class EnvPayload:
    """ENV001's ``data``: ``{"nodes": {host: NodeEnv}, "per_rank": {"rank": RankEnv}}``."""

    nodes: Mapping[str, NodeEnv] = field(default_factory=dict)
    per_rank: Mapping[str, RankEnv] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": {h: n.to_json() for h, n in self.nodes.items()},
            "per_rank": {r: e.to_json() for r, e in self.per_rank.items()},
        }

    @classmethod
    def from_json(cls, d: Any) -> EnvPayload:
        d = as_dict(d)
        return cls(
            {str(h): NodeEnv.from_json(n) for h, n in (obj(d, "nodes") or {}).items() if isinstance(n, dict)},
            {str(r): RankEnv.from_json(e) for r, e in (obj(d, "per_rank") or {}).items() if isinstance(e, dict)},
        )
