"""Process-group layout recommendations: ``layout_ddp``, ``layout_hsdp``, ``layout_tp_dp`` and, for a
layout the user proposes, ``layout_check`` (pure: reads a Report, returns Recommendations).

Evidence comes from the report: P2P001's matrix (required for any figure), NVL001's NVLink matrices
and IB001's rails (or, without them, GPU001's topology snapshots). The analysis is
ddpdoctor/model/placement/layouts.py, the code ddpdoctor/model/placement/layout_code.py.
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.core.payload import LabeledMatrix
from ddpdoctor.core.report import Recommendation, Report
from ddpdoctor.model.bandwidth.payloads import P2PPayload
from ddpdoctor.model.placement.layout_code import compact_ranks, ddp_ring_code, device_mesh_code, mesh_snippet
from ddpdoctor.model.placement.layouts import (
    ClusterLayouts,
    MeshPlan,
    analyze,
    check_layout,
    nvlink_from_topology,
    rails_from_topology,
)
from ddpdoctor.model.placement.meshes import LayoutError, MeshLayout, parse_layout
from ddpdoctor.model.placement.rings import SIGNIFICANT, Ring
from ddpdoctor.model.topology.node import NodeTopology
from ddpdoctor.model.topology.payloads import NodeEntry, TopologyPayload

TITLES = {
    "layout_ddp": "DDP ring order",
    "layout_hsdp": "HSDP mesh (shard inside islands, replicate across)",
    "layout_tp_dp": "TP×DP mesh (TP inside islands, DP across)",
    "layout_check": "Proposed layout",
}
KEEP = "keep the default"
_GLOO = "gloo runs its all-reduce ring in rank order (each rank sends to rank-1: gloo/allreduce.cc)"
_NCCL = (
    "NCCL builds its own ring inside each node and joins the nodes in rank order "
    "(NVIDIA/nccl#1340, #471), so under NCCL the order decides which node follows which"
)


def recommend(report: Report, layout: str | None = None) -> list[Recommendation]:
    """The layout recommendations for ``report``; with ``layout`` ("dp=4,tp=8", see
    model/placement/meshes.py) also its cost. Never raises for what the report lacks: that is said instead."""
    p2p = report.check("P2P001")
    payload = P2PPayload.from_json(p2p.data) if p2p else P2PPayload()
    ranks = list(payload.ranks) or report.ranks
    nvlink, rails = _topology(report)
    matrix = payload.matrix
    backend = str(report.run.backend or "nccl")
    device = "cpu" if backend == "gloo" else "cuda"  # the snippets run where this run ran
    missing = _missing(p2p, matrix)
    if missing:
        recs = [_unsupported(i, missing) for i in ("layout_ddp", "layout_hsdp", "layout_tp_dp")]
        if layout is not None:
            recs.append(_check_node_map(ranks, layout, missing, device))
        return recs
    try:
        cl = analyze([list(row) for row in matrix.values], ranks, nvlink=nvlink, rails=rails)
    except ValueError as e:
        why = f"the report's P2P001/topology data could not be used: {e}"
        ids = ("layout_ddp", "layout_hsdp", "layout_tp_dp") + (
            ("layout_check",) if layout is not None else ()
        )
        return [_unsupported(i, why) for i in ids]
    recs = [_ddp(cl, backend), _mesh(cl, cl.hsdp, device), _mesh(cl, cl.tp_dp, device)]
    if layout is not None:
        recs.append(_check(cl, layout, device))
    return recs


# -- inputs ----------------------------------------------------------------------------------------


def _missing(p2p, matrix: LabeledMatrix | None) -> str | None:
    if p2p is None:
        return (
            "no P2P001 (point-to-point matrix) in this report, so no link was measured; run "
            "`ddpdoctor check` with P2P001 (it is in the full suite)"
        )
    if matrix is None or not matrix.values:
        return f"P2P001 produced no matrix (status {p2p.status.value}: {p2p.summary or 'no summary'})"
    return None


def _nodes(report: Report, code: str) -> dict[str, NodeEntry]:
    c = report.check(code)
    return dict(TopologyPayload.from_json(c.data).nodes or {}) if c else {}


def _topology(report: Report) -> tuple[dict[str, dict], dict[str, list[dict]]]:
    """hostname -> NVLink matrix, hostname -> rails: NVL001 and IB001 first, GPU001's snapshots else."""
    nvlink = {h: n.nvlink for h, n in _nodes(report, "NVL001").items() if n.nvlink is not None}
    rails = {h: n.rails for h, n in _nodes(report, "IB001").items() if n.rails is not None}
    for host, n in _nodes(report, "GPU001").items():
        if n.snapshot is None or (host in nvlink and host in rails):
            continue
        try:
            node = NodeTopology.from_dict(n.snapshot)
        except ValueError:
            continue  # GPU001 reports its own trouble
        if node.gpus:
            nvlink.setdefault(host, nvlink_from_topology(node))
            if node.nics:
                rails.setdefault(host, rails_from_topology(node))
    return nvlink, rails


# -- shared pieces ---------------------------------------------------------------------------------


def _gbps(v: float | None) -> float | None:
    return None if v is None else float(f"{v:.4g}")  # 4 significant digits: gloo links are 0.01 GB/s


def _fmt(v: float | None) -> str:
    return "unmeasured" if v is None else f"{v:.3g} GB/s"


def _confidence(cl: ClusterLayouts, estimated: bool = False) -> str:
    cov = cl.links.coverage()
    if cl.islands.source == "node map" or cov < 0.5:
        return "low"
    if cov < 0.9 or estimated or not cl.islands.agrees_with_nodes or cl.islands.agrees_with_nvlink is False:
        return "medium"
    return "high"


def _island_evidence(cl: ClusterLayouts) -> dict[str, Any]:
    isl = cl.islands
    ev: dict[str, Any] = {
        "world_size": cl.world.world_size,
        "islands": [compact_ranks(g) for g in isl.groups],
        "island_source": isl.source,
        "matrix_coverage_pct": round(100 * cl.links.coverage(), 1),
    }
    if isl.gap:
        ev["gap_below_GBps"] = _gbps(isl.gap.below_GBps)
        ev["gap_above_GBps"] = _gbps(isl.gap.above_GBps)
    if isl.notes:
        ev["island_notes"] = isl.notes
    return ev


def _unsupported(rec_id: str, why: str) -> Recommendation:
    return Recommendation(
        id=rec_id,
        title=TITLES[rec_id],
        value=KEEP,
        evidence={"missing": why},
        confidence="low",
        rationale=f"No measured evidence for a layout: {why}.",
    )


def _ring_evidence(prefix: str, ring: Ring) -> dict[str, Any]:
    return {
        f"{prefix}_bottleneck_GBps": _gbps(ring.bottleneck_GBps),
        f"{prefix}_slowest_link": list(ring.bottleneck_link) if ring.bottleneck_link else None,
        f"{prefix}_crossings": ring.crossings,
        f"{prefix}_estimated_links": ring.estimated_links,
    }


# -- DDP -------------------------------------------------------------------------------------------


def _ddp(cl: ClusterLayouts, backend: str = "nccl") -> Recommendation:
    plan = cl.ddp
    d, b = plan.default, plan.best
    word = cl.island_word
    ev = _island_evidence(cl)
    ev.update(_ring_evidence("rank_order_ring", d))
    ev.update(_ring_evidence("best_ring", b))
    ev["best_ring_exact"] = b.exact
    if b.bound_GBps is not None:
        ev["fastest_possible_bottleneck_GBps"] = _gbps(b.bound_GBps)
    ev["node_order"] = plan.nodes
    data = {"rank_order_ring": d.to_dict(), "best_ring": b.to_dict(), "islands": cl.islands.to_dict()}
    data["rank_order_ring"]["links_GBps"] = d.links_GBps
    data["best_ring"]["links_GBps"] = b.links_GBps
    said = (
        f"the rank-order ring runs at {_fmt(d.bottleneck_GBps)} (slowest link "
        f"{_link(d)}) and crosses between {word}s {d.crossings} time(s)"
    )
    if not plan.reorder:
        if cl.world.world_size < 3:
            why = f"with {cl.world.world_size} rank(s) every ring is the same"
        else:
            if b.exact:
                why = (
                    f"{said}; an exhaustive search finds no clear gain: the fastest bottleneck any ring "
                    f"reaches is {_fmt(b.bound_GBps)} (a gain needs more than {SIGNIFICANT:.1f}×), and no "
                    f"ring within {SIGNIFICANT:.1f}× of it crosses fewer than {b.crossings} time(s)"
                )
            else:
                why = (
                    f"{said}; the search (islands kept together, crossings on equal local ranks) found "
                    f"a ring at {_fmt(b.bottleneck_GBps)} with {b.crossings} crossing(s): no clear gain "
                    f"(that takes a bottleneck faster by more than {SIGNIFICANT:.1f}×, or fewer crossings)"
                )
        return Recommendation(
            id="layout_ddp",
            title=TITLES["layout_ddp"],
            value=KEEP,
            evidence=ev,
            confidence=_confidence(cl),
            rationale=f"Keep the rank order: {why}.",
            data=data,
        )
    rationale = (
        f"{said[0].upper()}{said[1:]}; ring {compact_ranks(b.order)} runs at {_fmt(b.bottleneck_GBps)} "
        f"(slowest link {_link(b)}) with {b.crossings} crossing(s). A ring runs at the speed of its slowest "
        f"link, and each crossing is a network hop that shares its NIC with the others (the matrix "
        f"measured links one pair at a time). {_GLOO}; {_NCCL} ({' → '.join(plan.nodes)}). "
        "The snippet renumbers the ranks at init_process_group."
    )
    return Recommendation(
        id="layout_ddp",
        title=TITLES["layout_ddp"],
        value=f"ring {compact_ranks(b.order)}",
        evidence=ev,
        confidence=_confidence(cl, estimated=b.estimated_links > 0),
        rationale=rationale,
        snippet=ddp_ring_code(b.order, cl.world, backend=backend),
        data=data,
    )


def _link(r: Ring) -> str:
    return f"{r.bottleneck_link[0]}↔{r.bottleneck_link[1]}" if r.bottleneck_link else "unmeasured"


# -- HSDP and TP×DP --------------------------------------------------------------------------------

_USAGE = {
    "hsdp": [
        "",
        "from torch.distributed.fsdp import fully_shard",
        "",
        "fully_shard(model, mesh=mesh)  # 2-D mesh: replicate across dim 0, shard across dim 1 (HSDP)",
    ],
    "tp_dp": ["", 'tp_mesh, dp_mesh = mesh["tp"], mesh["dp"]  # TP inside an island, DP across islands'],
}


def _mesh(cl: ClusterLayouts, plan: MeshPlan, device: str = "cuda") -> Recommendation:
    rec_id = f"layout_{plan.kind}"
    ev = _island_evidence(cl)
    n = cl.world.world_size
    if plan.mesh is None:
        if plan.kind == "hsdp":
            code = device_mesh_code(MeshLayout(("shard",), (n,), list(range(n))), device)
            usage = [
                "",
                "from torch.distributed.fsdp import fully_shard",
                "",
                "fully_shard(model, mesh=mesh)",
            ]
        else:
            code = "from torch.distributed.device_mesh import init_device_mesh"
            usage = [
                "",
                f"tp = 1  # the model's TP degree: any divisor of {n} keeps TP inside the one island",
                f'mesh = init_device_mesh("{device}", ({n} // tp, tp), mesh_dim_names=("dp", "tp"))',
            ]
        return Recommendation(
            id=rec_id,
            title=TITLES[rec_id],
            value=KEEP,
            evidence=ev,
            confidence=_confidence(cl),
            rationale=f"Keep the default: {plan.reason}.",
            snippet="\n".join([code, *usage]),
            data={"plan": plan.to_dict()},
        )
    outer, inner = plan.mesh.dims
    oc, ic = plan.costs[outer].worst, plan.costs[inner].worst
    ev[f"{inner}_groups"] = [compact_ranks(g) for g in plan.mesh.groups(inner)][:16]
    ev[f"{inner}_{plan.costs[inner].measure.replace(' ', '_')}_GBps"] = _gbps(ic.slowest_GBps)
    ev[f"{outer}_{plan.costs[outer].measure.replace(' ', '_')}_GBps"] = _gbps(oc.slowest_GBps)
    ev[f"{outer}_groups_rail_aligned"] = plan.rail_aligned
    value = f"{outer}={plan.mesh.sizes[0]},{inner}={plan.mesh.sizes[1]}"
    if plan.kind == "hsdp":
        why = (
            "FSDP all-gathers parameters and reduce-scatters gradients in every layer: keep that inside an "
            f"island (shard ring bottleneck {_fmt(ic.slowest_GBps)}); across islands HSDP only all-reduces "
            f"the sharded gradients once per step (replicate ring bottleneck {_fmt(oc.slowest_GBps)})"
        )
    else:
        why = (
            "tensor parallelism communicates inside every layer: keep TP groups inside an island (slowest "
            f"link {_fmt(ic.slowest_GBps)}); DP all-reduces gradients once per step across islands (ring "
            f"bottleneck {_fmt(oc.slowest_GBps)}). tp up to the island size; a smaller tp that divides it "
            "stays inside too"
        )
    rails = (
        f"; {outer} groups are rail-aligned (every island contributes ranks on the same NICs)"
        if plan.rail_aligned
        else f"; {outer} groups are NOT rail-aligned: islands differ in which NICs their ranks use"
    )
    order = (
        "" if plan.mesh.is_default else " The ranks are reordered, so the snippet builds the mesh explicitly."
    )
    return Recommendation(
        id=rec_id,
        title=TITLES[rec_id],
        value=value,
        evidence=ev,
        confidence=_confidence(cl, estimated=ic.estimated or oc.estimated),
        rationale=f"{plan.reason}: {why}{rails}.{order}",
        snippet=mesh_snippet(plan.mesh, _USAGE[plan.kind], device),
        data={"plan": plan.to_dict()},
    )


# -- a proposed layout -----------------------------------------------------------------------------


def _invalid(layout: str, err: Exception) -> Recommendation:
    return Recommendation(
        id="layout_check",
        title=TITLES["layout_check"],
        value="invalid layout",
        evidence={"layout": layout, "error": str(err)},
        confidence="high",
        rationale=str(err),
    )


def _check(cl: ClusterLayouts, layout: str, device: str = "cuda") -> Recommendation:
    try:
        chk = check_layout(cl, layout)
    except LayoutError as e:
        return _invalid(layout, e)
    ev: dict[str, Any] = {"layout": str(chk.spec), "recommended_layout": str(chk.recommended.spec)}
    for d, cost in chk.proposed_costs.items():
        key = cost.measure.replace(" ", "_")
        ev[f"{d}_{key}_GBps"] = _gbps(cost.worst.slowest_GBps)
        ev[f"{d}_groups_spanning_islands"] = len(cost.spanning)
        ev[f"recommended_{d}_{key}_GBps"] = _gbps(chk.recommended_costs[d].worst.slowest_GBps)
    mesh = chk.recommended if chk.worse else chk.proposed
    if chk.worse:
        value = f"use {chk.recommended.spec}" + ("" if chk.recommended.is_default else " (ranks reordered)")
        head = f"{chk.spec} is slower than {chk.recommended.spec} in the dimension that moves the most data"
    else:
        value = "as good as the recommended layout"
        head = f"{chk.spec} is as good as any layout of these sizes found on the measured links"
    est = any(c.worst.estimated for c in chk.proposed_costs.values())
    return Recommendation(
        id="layout_check",
        title=TITLES["layout_check"],
        value=value,
        evidence=ev,
        confidence=_confidence(cl, estimated=est),
        rationale=". ".join([head, *(["; ".join(chk.messages)] if chk.messages else [])]) + ".",
        snippet=mesh_snippet(mesh, [], device),
        data={"check": chk.to_dict()},
    )


def _check_node_map(ranks: list[dict], layout: str, missing: str, device: str = "cuda") -> Recommendation:
    """Without a matrix only the node map speaks: which groups span nodes."""
    try:
        parse_layout(layout)
        cl = analyze(None, ranks)
        chk = check_layout(cl, layout)
    except LayoutError as e:
        return _invalid(layout, e)
    except ValueError as e:
        return _unsupported("layout_check", f"{missing}; the report's ranks could not be read either: {e}")
    spanning = {d: len(c.spanning) for d, c in chk.proposed_costs.items()}
    ev: dict[str, Any] = {"layout": str(chk.spec), "missing": missing}
    ev.update({f"{d}_groups_spanning_nodes": k for d, k in spanning.items()})
    return Recommendation(
        id="layout_check",
        title=TITLES["layout_check"],
        value="no measured cost",
        evidence=ev,
        confidence="low",
        rationale=f"{missing}. From the node map alone: " + "; ".join(chk.messages) + ".",
        snippet=mesh_snippet(chk.proposed, [], device),
        data={"check": chk.to_dict()},
    )
