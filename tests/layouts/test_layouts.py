"""The whole analysis: DDP ring, HSDP and TP×DP meshes, rails, and the cost of a proposed layout."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.model.placement.layouts import analyze, check_layout, rails_from_topology
from ddpdoctor.model.placement.meshes import LayoutError
from ddpdoctor.model.topology.analysis import nvlink_matrix
from ddpdoctor.model.topology.node import NodeTopology
from tests.layouts.synth import from_topology, matrix, ranks_for, set_link

DATA = Path(__file__).resolve().parents[1] / "topo" / "data"


def hgx_pair():
    return [NodeTopology.from_dict(json.loads((DATA / f"hgx-h100-{x}.json").read_text())) for x in "ab"]


def test_contiguous_nodes_keep_the_defaults_and_get_init_device_mesh():
    ranks = ranks_for(2, 4)
    cl = analyze(matrix(ranks), ranks)
    assert not cl.ddp.reorder and cl.ddp.recommended.order == list(range(8))
    assert cl.hsdp.mesh.dims == ("replicate", "shard") and cl.hsdp.mesh.sizes == (2, 4)
    assert cl.hsdp.mesh.is_default and cl.tp_dp.mesh.is_default
    assert cl.tp_dp.mesh.groups("tp") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert cl.tp_dp.costs["tp"].worst.slowest_GBps > 1.8
    assert cl.tp_dp.costs["dp"].worst.slowest_GBps < 0.03
    assert cl.tp_dp.rail_aligned is True
    json.dumps(cl.to_dict())  # the payload is JSON-able


def test_interleaved_ranks_get_a_reordered_mesh_and_ring():
    ranks = ranks_for(2, 4, interleave=True)
    cl = analyze(matrix(ranks), ranks)
    assert cl.ddp.reorder and cl.ddp.best.crossings == 2 and cl.ddp.default.crossings == 8
    assert cl.ddp.nodes == ["node0", "node1"] and cl.ddp.recommended is cl.ddp.best
    mesh = cl.tp_dp.mesh
    assert not mesh.is_default and mesh.nested() == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert mesh.groups("dp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert all(g.islands == 1 for g in cl.tp_dp.costs["tp"].groups)


def test_cross_node_links_uneven_by_nic_sharing_keep_the_default_ring():
    # pairs mode measures (0,2) and (1,3) at once through one NIC: each gets an uneven share. The ring
    # that avoids the smaller share is "1.3x faster" on paper, but P2P001 calls no link slow: no gain.
    ranks = ranks_for(2, 2)
    values = matrix(ranks, noise=0.0)
    set_link(values, 1, 2, 0.019)
    set_link(values, 0, 3, 0.019)
    set_link(values, 1, 3, 0.025)
    set_link(values, 0, 2, 0.025)
    cl = analyze(values, ranks)
    assert not cl.ddp.reorder, cl.ddp.best


def test_a_cross_node_link_the_check_calls_slow_is_routed_around():
    ranks = ranks_for(2, 2)
    values = matrix(ranks, noise=0.0)
    set_link(values, 1, 2, 0.010)  # under half the typical 0.025: P2P001's slow_frac
    cl = analyze(values, ranks)
    assert cl.ddp.reorder and cl.ddp.best.order == [0, 1, 3, 2]
    assert cl.ddp.default.bottleneck_GBps == 0.01 and cl.ddp.best.bottleneck_GBps == 0.025


def test_one_island_keeps_the_defaults_with_the_reason():
    ranks = ranks_for(1, 4)
    cl = analyze(matrix(ranks), ranks)
    assert cl.hsdp.mesh is None and "FSDP over all ranks" in cl.hsdp.reason
    assert cl.tp_dp.mesh is None and "one island" in cl.tp_dp.reason
    uniform = analyze(matrix(ranks_for(2, 2), inter=2.0), ranks_for(2, 2))
    assert uniform.hsdp.mesh is None and uniform.hsdp.reason.startswith("links are uniform")


def test_unequal_islands_use_their_common_size():
    ranks = ranks_for(3, 4)
    values = matrix(ranks)
    for a in (8, 9):
        for b in (10, 11):
            set_link(values, a, b, 0.02)  # node2 splits in two pairs
    cl = analyze(values, ranks)
    assert cl.islands.sizes == [4, 4, 2, 2]
    assert cl.tp_dp.mesh.sizes == (6, 2) and "unequal sizes" in cl.tp_dp.reason
    assert all(g.islands == 1 for g in cl.tp_dp.costs["tp"].groups)


def test_hgx_pair_from_real_topology():
    nodes = hgx_pair()
    values, ranks = from_topology(nodes)
    nv = {n.hostname: nvlink_matrix(n) for n in nodes}
    rails = {n.hostname: rails_from_topology(n) for n in nodes}
    cl = analyze(values, ranks, nvlink=nv, rails=rails)
    assert cl.islands.groups == [list(range(8)), list(range(8, 16))] and cl.islands.agrees_with_nvlink
    assert cl.rails[:8] == cl.rails[8:] == [f"NIC{k}" for k in range(8)]
    assert not cl.ddp.reorder
    assert cl.tp_dp.mesh.is_default and cl.tp_dp.mesh.sizes == (2, 8) and cl.tp_dp.rail_aligned
    assert cl.tp_dp.costs["tp"].worst.slowest_GBps > 340  # NV18 at 25 GB/s per link, 80%
    assert 40 < cl.tp_dp.costs["dp"].worst.slowest_GBps < 46  # 400 Gb/s NDR at 90%
    chk = check_layout(cl, "tp=8,dp=2")
    assert chk.worse and chk.recommended.spec.dims == ("dp", "tp")
    assert chk.messages[0].startswith("TP (2 groups of 8): 2 of 2 span nodes")
    assert "vs 3" in chk.messages[0] and "with dp=2,tp=8" in chk.messages[0]
    assert not check_layout(cl, "dp=2,tp=8").worse


def test_rails_not_aligned_when_one_node_is_wired_differently():
    nodes = hgx_pair()
    values, ranks = from_topology(nodes)
    rails = {n.hostname: rails_from_topology(n) for n in nodes}
    for r in rails["hgx-b"]:
        r["nic"] = f"NIC{7 - r['gpu']}"
    cl = analyze(values, ranks, rails=rails)
    assert cl.tp_dp.rail_aligned is False and cl.hsdp.rail_aligned is False


def test_check_layout_costs_each_dimension():
    ranks = ranks_for(2, 4)
    cl = analyze(matrix(ranks), ranks)
    bad = check_layout(cl, "tp=4,dp=2")
    assert bad.worse and bad.proposed.groups("tp") == [[0, 2, 4, 6], [1, 3, 5, 7]]
    tp = bad.proposed_costs["tp"]
    assert len(tp.spanning) == 2 and tp.worst.slowest_GBps < 0.03 and tp.worst.islands == 2
    assert bad.recommended_costs["tp"].worst.slowest_GBps > 1.8
    assert "span nodes" in bad.messages[0] and "vs 1.9" in bad.messages[0]
    dp = bad.proposed_costs["dp"]
    assert all(g.ring is not None and g.islands == 1 for g in dp.groups)
    assert "better than" in bad.messages[1]  # DP inside nodes is faster; TP decides
    pp = check_layout(cl, "pp=2,tp=4")
    assert not pp.worse and pp.proposed.groups("pp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert pp.proposed_costs["pp"].worst.slowest_GBps < 0.03
    assert check_layout(cl, "dp=8").proposed_costs["dp"].worst.ring.crossings == 2


def test_check_layout_refuses_a_wrong_size():
    ranks = ranks_for(2, 4)
    cl = analyze(matrix(ranks), ranks)
    with pytest.raises(LayoutError, match="16 ranks, but the world has 8"):
        check_layout(cl, "dp=4,tp=4")


def test_no_matrix_still_says_which_groups_span_nodes():
    ranks = ranks_for(2, 4)
    cl = analyze(None, ranks)
    assert cl.islands.source == "node map" and cl.ddp.default.bottleneck_GBps is None
    chk = check_layout(cl, "tp=4,dp=2")
    assert len(chk.proposed_costs["tp"].spanning) == 2 and not chk.worse
    assert "2 of 2 span nodes" in chk.messages[0] and "unmeasured" in chk.messages[0]


def test_bad_rank_lists_are_refused():
    with pytest.raises(ValueError, match="not 0..n-1"):
        analyze([[None, 1.0], [1.0, None]], [{"rank": 0, "hostname": "a"}, {"rank": 2, "hostname": "a"}])
    with pytest.raises(ValueError, match="3 rows but the run has 2 ranks"):
        analyze([[None, 1, 1], [1, None, 1], [1, 1, None]], ranks_for(1, 2))


def test_layout_modules_never_import_torch():
    code = (
        "import sys, json\n"
        "import ddpdoctor.model.placement.layouts, ddpdoctor.model.placement.layout_code, ddpdoctor.recommend.layouts\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'textual'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
