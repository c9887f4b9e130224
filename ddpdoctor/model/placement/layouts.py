"""Topology-aware process-group layouts (pure): from the measured P2P matrix, the node map and, where
known, NVLink domains and rails, the DDP ring, the HSDP and TP×DP meshes, and the cost of a proposed
layout.

* Islands (model/placement/islands.py): ranks with high mutual bandwidth, found in the matrix.
* Rails: each rank's nearest NIC (IB001's rails, GPU = local rank); DP/replicate groups are
  rail-aligned when every island contributes ranks on the same rails.
* Rings (model/placement/rings.py): the best ring and its bottleneck, against the rank-order ring.
* Meshes (model/placement/meshes.py): HSDP shards inside an island and replicates across islands; TP×DP puts TP
  inside an island and DP across. The islands listed one after another, members by local rank, give
  the mesh row-major — ``init_device_mesh`` itself when that order is 0..n-1.

Unmeasured pairs are estimated by the median measured link between the same two islands, and every
figure that rests on an estimate says so.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ddpdoctor.core.world import WorldInfo
from ddpdoctor.model.bandwidth.p2p_analysis import Thresholds
from ddpdoctor.model.bandwidth.p2p_links import Links
from ddpdoctor.model.placement.islands import Islands, find_islands, nvlink_domains
from ddpdoctor.model.placement.meshes import DIMS, LayoutSpec, MeshLayout, parse_layout
from ddpdoctor.model.placement.rings import SIGNIFICANT, Ring, best_ring, better, ring_of
from ddpdoctor.model.topology.node import NodeTopology

# How each dimension's groups talk, hence how they are judged: TP all-reduces inside every layer
# (every pair matters), data-parallel groups reduce gradients along a ring, PP passes activations
# from one stage to the next.
MEASURE = {
    "tp": "slowest link",
    "dp": "ring bottleneck",
    "replicate": "ring bottleneck",
    "shard": "ring bottleneck",
    "pp": "slowest stage hop",
}
# Which dimension decides when a proposal is better in one and worse in another: the one that moves
# the most bytes per step (TP per layer, then DP per step, then PP activations).
PRIORITY = ("tp", "dp", "pp")
# The same bar as P2P001's "slow" verdict, so a layout never routes around a link the check calls fine.
HEALTHY_FRAC = Thresholds().slow_frac


class LinkModel:
    """Measured links, with an estimate where a pair was not measured: the median measured link between
    the same two islands (between island mates for a pair inside one island)."""

    def __init__(self, links: Links, islands: Islands):
        self._links = links
        self.island_of = islands.island_of
        self._groups = islands.groups
        self._estimates: dict[tuple[int, int], float | None] = {}

    def bw(self, i: int, j: int) -> float | None:
        v = self._links.get(i, j)
        if i == j:
            return v
        a, b = self.island_of[i], self.island_of[j]
        if v is None:
            return self.typical(a, b)
        if a == b:
            return v  # inside an island, links differ by their kind (NV2, NV1, PCIe, SYS): keep each
        # Between two islands, a link P2P001 would not call slow (at least slow_frac of the typical)
        # counts as the typical link: smaller differences are noise and NIC sharing (pairs measured at
        # the same time split one NIC unevenly), and a ring "faster" by them gains nothing. Only a link
        # the check would flag makes one ring better than another with as many crossings.
        typical = self.typical(a, b)
        return typical if typical is not None and v >= typical * HEALTHY_FRAC else v

    def typical(self, a: int, b: int) -> float | None:
        """Typical link between islands a and b (between mates of one island when a == b)."""
        key = (a, b) if a <= b else (b, a)
        if key not in self._estimates:
            self._estimates[key] = self._links.median_between(self._groups[key[0]], self._groups[key[1]])
        return self._estimates[key]

    def estimated(self, i: int, j: int) -> bool:
        return i != j and self._links.get(i, j) is None and self.bw(i, j) is not None


# -- rails -----------------------------------------------------------------------------------------


def rails_from_topology(node: NodeTopology) -> list[dict]:
    """A node's rails as IB001 reports them ([{"gpu", "nic", "path"}]), from a topology snapshot."""
    from ddpdoctor.model.topology.analysis import rails

    return [asdict(r) for r in rails(node)]


def nvlink_from_topology(node: NodeTopology) -> dict:
    """A node's NVLink matrix as NVL001 reports it, from a topology snapshot."""
    from ddpdoctor.model.topology.analysis import nvlink_matrix

    return nvlink_matrix(node)


def rank_rails(world: WorldInfo, rails: dict[str, list[dict]] | None) -> list[str | None]:
    """Each rank's rail: the NIC nearest its GPU (hostname -> IB001 rails; GPU = local rank)."""
    out: list[str | None] = []
    for r in world.ranks:
        host = (rails or {}).get(r.hostname) or []
        out.append(
            next((x.get("nic") for x in host if isinstance(x, dict) and x.get("gpu") == r.local_rank), None)
        )
    return out


# -- costs -----------------------------------------------------------------------------------------


@dataclass
class GroupCost:
    ranks: list[int]
    slowest_GBps: float | None  # the dimension's measure (see MEASURE); None: no figure
    slowest_link: tuple[int, int] | None
    islands: int  # how many islands the group spans
    nodes: int
    estimated: bool = False  # the slowest figure is an estimate
    unknown_links: int = 0
    ring: Ring | None = None

    def to_dict(self) -> dict:
        d = {
            "ranks": self.ranks,
            "slowest_GBps": None if self.slowest_GBps is None else round(self.slowest_GBps, 4),
            "slowest_link": list(self.slowest_link) if self.slowest_link else None,
            "islands": self.islands,
            "nodes": self.nodes,
            "estimated": self.estimated,
            "unknown_links": self.unknown_links,
        }
        if self.ring is not None:
            d["ring"] = self.ring.order
            d["crossings"] = self.ring.crossings
        return d


@dataclass
class DimCost:
    dim: str
    groups: list[GroupCost]

    @property
    def measure(self) -> str:
        return MEASURE[self.dim]

    @property
    def worst(self) -> GroupCost:
        known = [g for g in self.groups if g.slowest_GBps is not None]
        return min(known, key=lambda g: g.slowest_GBps) if known else self.groups[0]

    @property
    def spanning(self) -> list[GroupCost]:
        return [g for g in self.groups if g.islands > 1]

    def to_dict(self) -> dict:
        w = self.worst
        return {
            "measure": self.measure,
            "groups": len(self.groups),
            "size": len(self.groups[0].ranks),
            "worst": w.to_dict(),
            "spanning_islands": len(self.spanning),
            "per_group": [g.to_dict() for g in self.groups],
        }


def group_cost(dim: str, ranks: list[int], model: LinkModel, world: WorldInfo) -> GroupCost:
    """One group's cost by its dimension's measure."""
    islands = len({model.island_of[r] for r in ranks})
    nodes = len({world.node_of(r) for r in ranks})
    if MEASURE[dim] == "ring bottleneck":
        ring = best_ring(
            sorted(ranks, key=lambda r: (model.island_of[r], world.ranks[r].local_rank, r)), model
        )
        link = ring.bottleneck_link
        return GroupCost(
            ranks,
            ring.bottleneck_GBps,
            link,
            islands,
            nodes,
            bool(link and model.estimated(*link)),
            ring.unknown_links,
            ring,
        )
    if MEASURE[dim] == "slowest link":
        pairs = [(a, b) for k, a in enumerate(ranks) for b in ranks[k + 1 :]]
    else:  # stage to stage, in mesh order
        pairs = list(itertools.pairwise(ranks))
    figures = [(f, p) for p in pairs if (f := model.bw(*p)) is not None]
    if not figures:
        return GroupCost(ranks, None, None, islands, nodes, unknown_links=len(pairs))
    f, p = min(figures, key=lambda x: x[0])
    return GroupCost(ranks, f, p, islands, nodes, model.estimated(*p), len(pairs) - len(figures))


def mesh_costs(mesh: MeshLayout, model: LinkModel, world: WorldInfo) -> dict[str, DimCost]:
    return {d: DimCost(d, [group_cost(d, g, model, world) for g in mesh.groups(d)]) for d in mesh.dims}


def rail_aligned(
    groups: list[list[int]], model: LinkModel, world: WorldInfo, rails: list[str | None]
) -> bool:
    """Every island a group touches contributes ranks on the same rails (the NIC, or the local rank
    where the NIC is unknown), so its traffic between islands stays on one rail per NIC."""
    for g in groups:
        per_island: dict[int, Counter] = {}
        for r in g:
            key = rails[r] or f"local rank {world.ranks[r].local_rank}"
            per_island.setdefault(model.island_of[r], Counter())[key] += 1
        if len({frozenset(c.items()) for c in per_island.values()}) > 1:
            return False
    return True


# -- the analysis ----------------------------------------------------------------------------------


@dataclass
class DdpPlan:
    default: Ring  # ranks 0..n-1
    best: Ring  # the best ring the search found
    reorder: bool  # it is clearly better than the default (rings.better)
    nodes: list[str]  # node order along the recommended ring: what NCCL follows between nodes

    @property
    def recommended(self) -> Ring:
        return self.best if self.reorder else self.default

    def to_dict(self) -> dict:
        return {
            "default": self.default.to_dict(),
            "best": self.best.to_dict(),
            "reorder": self.reorder,
            "nodes": self.nodes,
        }


@dataclass
class MeshPlan:
    kind: str  # "hsdp" or "tp_dp"
    mesh: MeshLayout | None  # None: keep the default (see reason)
    reason: str
    costs: dict[str, DimCost] = field(default_factory=dict)
    rail_aligned: bool | None = None

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "mesh": self.mesh.to_dict() if self.mesh else None,
            "reason": self.reason,
            "costs": {d: c.to_dict() for d, c in self.costs.items()},
            "rail_aligned": self.rail_aligned,
        }


@dataclass
class ClusterLayouts:
    world: WorldInfo
    links: Links
    islands: Islands
    model: LinkModel
    rails: list[str | None]  # per rank
    order: list[int]  # islands one after another, members by local rank
    ddp: DdpPlan
    hsdp: MeshPlan
    tp_dp: MeshPlan

    @property
    def island_word(self) -> str:
        """What to call an island in messages: "node" when islands are the nodes."""
        same = self.islands.agrees_with_nodes and self.islands.source in ("matrix", "node map")
        return "node" if same else "island"

    def to_dict(self) -> dict:
        return {
            "world_size": self.world.world_size,
            "coverage": round(self.links.coverage(), 4),
            "islands": self.islands.to_dict(),
            "rails": self.rails,
            "ddp": self.ddp.to_dict(),
            "hsdp": self.hsdp.to_dict(),
            "tp_dp": self.tp_dp.to_dict(),
        }


def analyze(
    values: Sequence[Sequence[Any]] | None,
    ranks: list[dict] | WorldInfo,
    *,
    nvlink: dict[str, dict] | None = None,
    rails: dict[str, list[dict]] | None = None,
) -> ClusterLayouts:
    """Layouts for one cluster.

    values: P2P001's ``matrix["values"]`` (GB/s, row = sender, null = not measured), or None when no
    matrix was measured (islands then come from the node map and no figure is known).
    ranks: [{"rank", "node_rank", "local_rank", "hostname"}] (P2P001's ``ranks`` or the report's).
    nvlink: hostname -> NVL001 matrix; rails: hostname -> IB001 rails.
    """
    world = ranks if isinstance(ranks, WorldInfo) else WorldInfo.from_dicts(ranks)
    numbers = [r.rank for r in world.ranks]
    if numbers != list(range(len(numbers))) or not numbers:
        raise ValueError(f"ranks {numbers[:8]}... are not 0..n-1; expected one entry per rank")
    links = Links(values, n=world.world_size) if values is not None else Links(None, n=world.world_size)
    domains = {host: nvlink_domains(m) for host, m in (nvlink or {}).items()}
    islands = find_islands(links, world, domains)
    model = LinkModel(links, islands)
    order = [r for g in islands.groups for r in g]
    rails_by_rank = rank_rails(world, rails)
    default = ring_of(range(world.world_size), model)
    best = best_ring(order, model)
    reorder = better(best, default)
    ddp = DdpPlan(default, best, reorder, _node_order((best if reorder else default).order, world))
    return ClusterLayouts(
        world,
        links,
        islands,
        model,
        rails_by_rank,
        order,
        ddp,
        _mesh_plan("hsdp", islands, order, model, world, rails_by_rank),
        _mesh_plan("tp_dp", islands, order, model, world, rails_by_rank),
    )


def _node_order(order: list[int], world: WorldInfo) -> list[str]:
    out: list[str] = []
    for r in order:
        h = world.host_of(r)
        if not out or out[-1] != h:
            out.append(h)
    if len(out) > 1 and out[0] == out[-1]:
        out.pop()
    return out


def _mesh_plan(
    kind: str, islands: Islands, order: list[int], model: LinkModel, world: WorldInfo, rails: list[str | None]
) -> MeshPlan:
    n = world.world_size
    what = "HSDP" if kind == "hsdp" else "TP×DP"
    if len(islands.groups) == 1:
        why = {"node map": "no measured link", "uniform": "links are uniform"}.get(
            islands.source, "one island"
        )
        default = (
            "FSDP over all ranks: there is no slower level to replicate across"
            if kind == "hsdp"
            else "any TP group sits inside the one island"
        )
        return MeshPlan(kind, None, f"{why} ({n} rank(s)): {default}")
    size = math.gcd(*islands.sizes)
    if size == 1:
        return MeshPlan(kind, None, f"islands of sizes {islands.sizes} share no group size > 1 for {what}")
    dims = ("replicate", "shard") if kind == "hsdp" else ("dp", "tp")
    mesh = MeshLayout(dims, (n // size, size), order)
    costs = mesh_costs(mesh, model, world)
    reason = f"{dims[1]} groups of {size} inside islands, {dims[0]} across {len(islands.groups)} islands" + (
        " (islands of unequal sizes: groups of their common divisor)" if len(set(islands.sizes)) > 1 else ""
    )
    return MeshPlan(kind, mesh, reason, costs, rail_aligned(mesh.groups(dims[0]), model, world, rails))


# -- a proposed layout -----------------------------------------------------------------------------


@dataclass
class LayoutCheck:
    spec: LayoutSpec
    proposed: MeshLayout
    recommended: MeshLayout  # the same sizes, TP innermost, ranks island by island
    proposed_costs: dict[str, DimCost]
    recommended_costs: dict[str, DimCost]
    messages: list[str]
    worse: bool  # the proposal is clearly slower in the dimension that matters most

    def to_dict(self) -> dict:
        return {
            "layout": str(self.spec),
            "proposed": self.proposed.to_dict(),
            "recommended": self.recommended.to_dict(),
            "recommended_layout": str(self.recommended.spec),
            "proposed_costs": {d: c.to_dict() for d, c in self.proposed_costs.items()},
            "recommended_costs": {d: c.to_dict() for d, c in self.recommended_costs.items()},
            "messages": self.messages,
            "worse": self.worse,
        }


def check_layout(cl: ClusterLayouts, layout: str | LayoutSpec) -> LayoutCheck:
    """Cost of a proposed layout (see meshes.parse_layout for the syntax) against the recommended
    layout of the same sizes. Raises LayoutError for a bad layout string."""
    spec = layout if isinstance(layout, LayoutSpec) else parse_layout(layout, cl.world.world_size)
    if spec.world_size != cl.world.world_size:
        parse_layout(str(spec), cl.world.world_size)  # raises with the message
    proposed = MeshLayout.default(spec)
    dims = tuple(d for d in DIMS if d in spec.dims)
    recommended = MeshLayout(dims, tuple(spec.size(d) for d in dims), cl.order)
    pc = mesh_costs(proposed, cl.model, cl.world)
    rc = mesh_costs(recommended, cl.model, cl.world)
    messages = [_compare(d, pc[d], rc[d], cl, recommended) for d in PRIORITY if spec.size(d) > 1]
    worse = False
    for d in PRIORITY:
        if d not in pc or spec.size(d) == 1:
            continue
        p, r = pc[d].worst.slowest_GBps, rc[d].worst.slowest_GBps
        if p is None or r is None:
            continue
        if r > p * SIGNIFICANT:
            worse = True
            break
        if p > r * SIGNIFICANT:
            break
    return LayoutCheck(spec, proposed, recommended, pc, rc, messages, worse)


def _gbps(v: float | None, estimated: bool = False) -> str:
    if v is None:
        return "unmeasured"
    return f"{v:.3g} GB/s" + (" (estimated)" if estimated else "")


def _compare(dim: str, p: DimCost, r: DimCost, cl: ClusterLayouts, rec: MeshLayout) -> str:
    word = cl.island_word
    w, rw = p.worst, r.worst
    name = dim.upper()
    count = len(p.groups)
    head = f"{name} ({count} group{'s' if count > 1 else ''} of {len(p.groups[0].ranks)})"
    link = f" {w.slowest_link[0]}↔{w.slowest_link[1]}" if w.slowest_link else ""
    span = p.spanning
    if span:
        more = "…" if len(span[0].ranks) > 8 else ""
        where = f"{len(span)} of {count} span {word}s, e.g. {span[0].ranks[:8]}{more}"
    else:
        where = "inside one " + word if count == 1 else f"each inside one {word}"
    text = f"{head}: {where}; {p.measure}{link} {_gbps(w.slowest_GBps, w.estimated)}"
    ref = f"{_gbps(rw.slowest_GBps, rw.estimated)} with {rec.spec}" + (
        "" if rec.is_default else " (ranks reordered)"
    )
    if w.slowest_GBps is not None and rw.slowest_GBps is not None:
        if rw.slowest_GBps > w.slowest_GBps * SIGNIFICANT:
            text += f" vs {ref}"
        elif w.slowest_GBps > rw.slowest_GBps * SIGNIFICANT:
            text += f" (better than {ref})"
        else:
            text += f" (as with {rec.spec})"
    return text
