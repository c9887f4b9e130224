"""recommend(report, layout): ids, values, evidence with units, snippets, and what a report lacks."""

import ast
import json
from pathlib import Path

import pytest

from ddpdoctor.core.report import CheckResult, Recommendation, Report, Status
from ddpdoctor.core.run_info import RunInfo
from ddpdoctor.model.topology.node import NodeTopology
from ddpdoctor.recommend.layouts import recommend
from tests.layouts.synth import from_topology, matrix, ranks_for

DATA = Path(__file__).resolve().parents[1] / "topo" / "data"
IDS = ["layout_ddp", "layout_hsdp", "layout_tp_dp"]


def report_with(values, ranks, extra=()) -> Report:
    p2p = CheckResult(
        code="P2P001",
        title="Point-to-point matrix",
        data={"matrix": {"unit": "GB/s", "labels": [f"r{r['rank']}@{r['hostname']}" for r in ranks],
                         "values": values}, "ranks": ranks},
    )  # fmt: skip
    return Report(ranks=ranks, checks=[p2p, *extra])


def by_id(recs: list[Recommendation]) -> dict[str, Recommendation]:
    return {r.id: r for r in recs}


def units_in_keys(evidence: dict) -> None:
    for key, value in evidence.items():
        if isinstance(value, float):
            assert key.endswith(("_GBps", "_pct")), key


def test_interleaved_cluster_gets_a_new_ring_and_reordered_meshes():
    ranks = ranks_for(2, 4, interleave=True)
    recs = by_id(recommend(report_with(matrix(ranks), ranks), layout="dp=2,tp=4"))
    assert list(recs) == [*IDS, "layout_check"]
    ddp = recs["layout_ddp"]
    assert ddp.value == "ring 0,2,4,6,7,5,3,1" and ddp.confidence == "high"
    assert ddp.evidence["rank_order_ring_crossings"] == 8 and ddp.evidence["best_ring_crossings"] == 2
    assert "gloo" in ddp.rationale and "NCCL" in ddp.rationale
    ast.parse(ddp.snippet)
    tp = recs["layout_tp_dp"]
    assert tp.value == "dp=2,tp=4" and "DeviceMesh(" in tp.snippet and "reordered" in tp.rationale
    assert tp.evidence["tp_groups"] == ["0,2,4,6", "1,3,5,7"] and tp.evidence["dp_groups_rail_aligned"]
    assert recs["layout_hsdp"].value == "replicate=2,shard=4"
    check = recs["layout_check"]
    assert check.value == "use dp=2,tp=4 (ranks reordered)"  # as written, TP groups 0-3 cross nodes
    assert check.evidence["tp_groups_spanning_islands"] == 2
    assert check.evidence["tp_slowest_link_GBps"] < 0.03
    assert check.evidence["recommended_tp_slowest_link_GBps"] > 1.8
    for r in recs.values():
        units_in_keys(r.evidence)
        ast.parse(r.snippet)
        assert r.rationale
    json.dumps([r.to_dict() for r in recs.values()])


def test_contiguous_cluster_keeps_the_ring_and_uses_init_device_mesh():
    ranks = ranks_for(2, 4)
    recs = by_id(recommend(report_with(matrix(ranks), ranks), layout="dp=2,tp=4"))
    assert recs["layout_ddp"].value == "keep the default" and recs["layout_ddp"].snippet is None
    assert "Keep the rank order" in recs["layout_ddp"].rationale
    assert 'init_device_mesh("cuda", (2, 4)' in recs["layout_tp_dp"].snippet
    assert recs["layout_check"].value == "as good as the recommended layout"


def test_one_uniform_node_keeps_every_default_and_says_why():
    ranks = ranks_for(1, 4)
    recs = by_id(recommend(report_with(matrix(ranks, noise=0.1), ranks)))
    assert [r.value for r in recs.values()] == ["keep the default"] * 3
    assert "uniform" in recs["layout_hsdp"].rationale or "one island" in recs["layout_hsdp"].rationale
    assert "fully_shard" in recs["layout_hsdp"].snippet
    ast.parse(recs["layout_tp_dp"].snippet)


def test_no_p2p_check_says_what_is_missing():
    ranks = ranks_for(2, 4)
    recs = by_id(recommend(Report(ranks=ranks), layout="tp=4,dp=2"))
    for i in IDS:
        assert recs[i].value == "keep the default" and recs[i].confidence == "low"
        assert "no P2P001" in recs[i].evidence["missing"]
    check = recs["layout_check"]
    assert check.value == "no measured cost" and check.evidence["tp_groups_spanning_nodes"] == 2


def test_p2p_without_matrix_gives_its_status():
    ranks = ranks_for(1, 2)
    skipped = CheckResult(code="P2P001", title="p2p", status=Status.TIMED_OUT, summary="budget spent")
    recs = recommend(Report(ranks=ranks, checks=[skipped]))
    assert "status timed_out: budget spent" in recs[0].evidence["missing"]


def test_bad_inputs_become_clear_recommendations_not_exceptions():
    ranks = ranks_for(2, 2)
    bad = report_with([[None, "x", 1, 1], [1, None, 1, 1], [1, 1, None, 1], [1, 1, 1, None]], ranks)
    recs = recommend(bad, layout="dp=2,tp=2")
    assert all("cell [0][1] is 'x'" in r.evidence["missing"] for r in recs) and len(recs) == 4
    junk = [CheckResult(code="IB001", title="ib", data={"nodes": {"node0": {"data": {"rails": [1, None]}}}}),
            CheckResult(code="NVL001", title="nvl", data={"nodes": {"node0": {"data": {"matrix": "?"}}}})]  # fmt: skip
    assert by_id(recommend(report_with(matrix(ranks), ranks, junk)))["layout_tp_dp"].value == "dp=2,tp=2"
    invalid = by_id(recommend(report_with(matrix(ranks), ranks), layout="dp=3,tp=2"))["layout_check"]
    assert invalid.value == "invalid layout" and "6 ranks, but the world has 4" in invalid.rationale
    typo = by_id(recommend(Report(ranks=ranks), layout="tpp=4"))["layout_check"]
    assert typo.value == "invalid layout" and "unknown mesh dimension 'tpp'" in typo.evidence["error"]


@pytest.mark.parametrize("source", ["GPU001", "NVL001+IB001"])
def test_topology_from_the_report_feeds_rails_and_nvlink(source):
    nodes = [NodeTopology.from_dict(json.loads((DATA / f"hgx-h100-{x}.json").read_text())) for x in "ab"]
    values, ranks = from_topology(nodes)
    for n in nodes:  # the rails check needs a difference: hgx-b wires GPU k to NIC 7-k
        if n.hostname == "hgx-b":
            for g, nic in zip(n.gpus, reversed(n.nics)):
                for other in n.nics:
                    n.set_path(g.label, other.name, "PIX" if other is nic else "SYS")
    if source == "GPU001":
        extra = [CheckResult(code="GPU001", title="gpus",
                             data={"nodes": {n.hostname: {"data": {"topology": n.to_dict()}} for n in nodes}})]  # fmt: skip
    else:
        from ddpdoctor.model.placement.layouts import nvlink_from_topology, rails_from_topology

        nvl = {n.hostname: {"data": {"matrix": nvlink_from_topology(n)}} for n in nodes}
        ib = {n.hostname: {"data": {"rails": rails_from_topology(n)}} for n in nodes}
        extra = [CheckResult(code="NVL001", title="nvl", data={"nodes": nvl}),
                 CheckResult(code="IB001", title="ib", data={"nodes": ib})]  # fmt: skip
    recs = by_id(recommend(report_with(values, ranks, extra)))
    tp = recs["layout_tp_dp"]
    assert tp.value == "dp=2,tp=8" and tp.evidence["dp_groups_rail_aligned"] is False
    assert "NOT rail-aligned" in tp.rationale
    assert tp.data["plan"]["mesh"]["init_device_mesh"] is True
    assert recs["layout_ddp"].value == "keep the default"


@pytest.mark.parametrize("n", [1, 2])
def test_tiny_worlds_keep_the_defaults(n):
    ranks = ranks_for(1, n)
    recs = by_id(recommend(report_with(matrix(ranks), ranks), layout=f"dp={n}"))
    assert [recs[i].value for i in IDS] == ["keep the default"] * 3
    assert recs["layout_check"].value == "as good as the recommended layout"
    for r in recs.values():
        if r.snippet:
            ast.parse(r.snippet)


def test_snippets_use_the_device_and_backend_of_the_run():
    """A gloo run's snippets build CPU meshes and a gloo group, not "cuda"/"nccl" (nothing to paste on CPU)."""
    ranks = ranks_for(2, 4, interleave=True)
    gloo = report_with(matrix(ranks), ranks)
    gloo.run = RunInfo(backend="gloo")
    recs = by_id(recommend(gloo, layout="dp=2,tp=4"))
    snippets = "\n".join(r.snippet for r in recs.values() if r.snippet)
    assert '"cuda"' not in snippets and 'backend="nccl"' not in snippets
    assert '"cpu"' in recs["layout_tp_dp"].snippet and 'backend="gloo"' in recs["layout_ddp"].snippet
    one = report_with(matrix(ranks_for(1, 4), noise=0.1), ranks_for(1, 4))
    one.run = RunInfo(backend="gloo")
    kept = by_id(recommend(one))
    assert 'init_device_mesh("cpu"' in kept["layout_hsdp"].snippet and '"cuda"' not in kept["layout_tp_dp"].snippet
    nccl = report_with(matrix(ranks), ranks)
    nccl.run = RunInfo(backend="nccl")
    assert '"cuda"' in by_id(recommend(nccl))["layout_tp_dp"].snippet
