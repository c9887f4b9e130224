"""The topology checks' payload as typed data (GPU001, NVL001, PCI001, NUMA001, IB001, GDR001, NCCL001
share one shape, written by checks/_topology.py), and the per-host topology lists a report may hold.

``{"nodes": {host: {"facts": {...}, "data": {...}}}, "skipped": {host: reason}}``: ``facts`` are what
model/topology/compare.py compares across nodes; ``data`` is the check's own per-node payload
(GPU001: ``{"topology": NodeTopology.to_dict()}``, NVL001: ``{"matrix"}``, IB001: ``{"rails", "nics"}``,
NUMA001: ``{"gpus"}``, GDR001: ``{"verdicts", "peermem"}``). When every node skipped there is no
``nodes``, only ``skipped``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.core.payload import LabeledMatrix, as_dict, is_number, obj


@dataclass(frozen=True)
class NodeEntry:
    """One probed node: the facts compared across nodes and the check's own data (None: it has none)."""

    facts: Mapping[str, Any] = field(default_factory=dict)
    data: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"facts": dict(self.facts)}
        if self.data is not None:
            out["data"] = dict(self.data)
        return out

    @classmethod
    def from_json(cls, d: Any) -> NodeEntry:
        d = as_dict(d)
        return cls(as_dict(d.get("facts")), obj(d, "data"))

    @property
    def snapshot(self) -> dict[str, Any] | None:
        """GPU001's ``NodeTopology.to_dict()`` of this node, if the entry holds one."""
        return obj(self.data, "topology") if self.data is not None else None

    @property
    def nvlink(self) -> dict[str, Any] | None:
        """NVL001's NVLink matrix of this node (``{"unit": "links", "labels": ["GPU0", ...], "values"}``)."""
        return obj(self.data, "matrix") if self.data is not None else None

    @property
    def rails(self) -> list[dict[str, Any]] | None:
        """IB001's rails of this node (``[{"gpu", "nic", "path"}]``, each GPU's nearest NIC)."""
        v = self.data.get("rails") if self.data is not None else None
        return v if isinstance(v, list) else None


@dataclass(frozen=True)
class TopologyPayload:
    nodes: Mapping[str, NodeEntry] | None = None  # None: every node skipped
    skipped: Mapping[str, str] | None = None  # {host: "skipped: why"}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.nodes is not None:
            out["nodes"] = {h: n.to_json() for h, n in self.nodes.items()}
        if self.skipped:
            out["skipped"] = dict(self.skipped)
        return out

    @classmethod
    def from_json(cls, d: Any) -> TopologyPayload:
        d = as_dict(d)
        nodes = obj(d, "nodes")
        skipped = obj(d, "skipped")
        return cls(
            None if nodes is None else {str(h): NodeEntry.from_json(n) for h, n in nodes.items() if isinstance(n, dict)},
            None if skipped is None else {str(h): str(why) for h, why in skipped.items()},
        )

    def snapshots(self) -> dict[str, dict[str, Any]]:
        """GPU001's topology snapshot per host (hosts without one left out)."""
        return {h: s for h, n in (self.nodes or {}).items() if (s := n.snapshot) is not None}


@dataclass(frozen=True)
class ListedNic:
    """A NIC as a per-host ``nics`` list states it: IB001 writes ``{name, kind, rate_Gbps, ports_up,
    ports}``; the TUI's flat shape ``{name, state, rate_gbps, link_layer, ...}`` (an RDMA port's link
    layer: Ethernet on an RDMA device is RoCE)."""

    name: str
    kind: str  # InfiniBand, RoCE, EFA, RDMA (kind unknown), Ethernet, ...
    rate_Gbps: float | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ListedNic:
        kind = d.get("kind")
        if not kind:
            layer = str(d.get("link_layer") or "")
            kind = {"infiniband": "InfiniBand", "ethernet": "RoCE"}.get(layer.lower(), layer or "RDMA")
        rate = d.get("rate_Gbps", d.get("rate_gbps"))
        return cls(str(d.get("name") or ""), str(kind), float(rate) if is_number(rate) else None)


@dataclass(frozen=True)
class HostLists:
    """What one check says about one host in the shapes the TUI and profile detection read: the topology
    checks' per-node ``data``, or the flat ``{gpus, nvlink, nics, gdr}`` of a one-node report (the TUI's
    samples, user checks). Items are kept as the JSON objects they are (their keys differ by source:
    IB001 writes ``kind``/``rate_Gbps``, the TUI's shape ``link_layer``/``rate_gbps``)."""

    gpus: tuple[dict, ...] | None = None  # None: not a list here
    nvlink: Any = None  # a matrix (counts or nvidia-smi words), as written
    nics: tuple[Any, ...] | None = None
    gdr: Any = None  # {verdict, reason, evidence} or a verdict word

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> HostLists:
        def seq(key: str) -> tuple | None:
            v = d.get(key)
            return tuple(v) if isinstance(v, list) else None

        return cls(seq("gpus"), d.get("nvlink"), seq("nics"), d.get("gdr"))

    @property
    def nvlink_matrix(self) -> LabeledMatrix | None:
        return LabeledMatrix.from_json(self.nvlink)

    @property
    def listed_nics(self) -> list[ListedNic] | None:
        """The NICs, when ``nics`` is a list of objects (None otherwise: the list says nothing)."""
        if self.nics is None or not all(isinstance(n, dict) for n in self.nics):
            return None
        return [ListedNic.from_json(n) for n in self.nics]


def host_lists(code: str, data: Mapping[str, Any], default_host: str, *, inside_data: bool) -> dict[str, HostLists]:
    """Per host, the lists one check's ``data`` holds: per node when ``data["nodes"]`` maps hosts to
    objects, else flat for ``default_host``. ``inside_data``: also read a node's own ``data`` (the
    topology checks' per-node payload; NVL001 calls its matrix ``matrix``), the outer keys winning."""
    per_node = data.get("nodes")
    if not (isinstance(per_node, dict) and (inside_data or all(isinstance(v, dict) for v in per_node.values()))):
        per_node = {default_host: data}
    out = {}
    for host, outer in per_node.items():
        if not isinstance(outer, dict):
            continue
        d = dict(outer)
        if inside_data:
            inner = outer.get("data") if isinstance(outer.get("data"), dict) else {}
            d = {**inner, **outer}
            if code == "NVL001" and "nvlink" not in d:
                d["nvlink"] = d.get("matrix")
        out[str(host)] = HostLists.from_json(d)
    return out
