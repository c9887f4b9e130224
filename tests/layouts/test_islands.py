"""Islands from the measured matrix: gaps, noise, missing cells, stray links, the node map and NVLink."""

import json
import random
from pathlib import Path

import pytest

from ddpdoctor.core.world import WorldInfo
from ddpdoctor.model.bandwidth.p2p_links import LinkMatrixError, Links
from ddpdoctor.model.placement.islands import EXACT_GAP_LIMIT, GAP_MIN, find_gap, find_islands, nvlink_domains
from ddpdoctor.model.topology.analysis import nvlink_matrix
from ddpdoctor.model.topology.node import NodeTopology
from ddpdoctor.probes.smi_topo import parse_topo_matrix, topo_to_node
from tests.layouts.synth import fixture, from_topology, matrix, ranks_for, set_link

DATA = Path(__file__).resolve().parents[1] / "topo" / "data"


def islands_of(values, ranks, nvlink=None):
    return find_islands(Links(values), WorldInfo.from_dicts(ranks), nvlink)


def test_two_nodes_of_four_are_two_islands():
    ranks = ranks_for(2, 4)
    isl = islands_of(matrix(ranks), ranks)
    assert isl.groups == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert isl.source == "matrix" and isl.agrees_with_nodes and not isl.notes
    assert isl.gap.below_GBps < 0.03 and isl.gap.above_GBps > 1.8 and isl.gap.ratio > 50


def test_interleaved_ranks_are_grouped_by_node_not_by_number():
    ranks = ranks_for(2, 4, interleave=True)
    isl = islands_of(matrix(ranks), ranks)
    assert isl.groups == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert isl.island_of == [0, 1, 0, 1, 0, 1, 0, 1]
    assert isl.agrees_with_nodes


@pytest.mark.parametrize("seed", range(8))
def test_noise_and_missing_cells_do_not_move_islands(seed):
    ranks = ranks_for(4, 8)
    values = matrix(ranks, intra=370.0, inter=45.0, noise=0.25, missing=0.4, seed=seed)
    isl = islands_of(values, ranks)
    assert isl.groups == [list(range(k, k + 8)) for k in range(0, 32, 8)]


def test_a_slow_link_inside_a_node_does_not_split_it():
    ranks = ranks_for(2, 4)
    values = matrix(ranks)
    set_link(values, 1, 2, 0.1)  # a degraded link, still faster than the network
    set_link(values, 5, 6, 0.02)  # one as slow as the network
    isl = islands_of(values, ranks)
    assert isl.groups == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_a_stray_fast_link_between_nodes_does_not_merge_them():
    ranks = ranks_for(2, 4)
    values = matrix(ranks)
    set_link(values, 3, 4, 2.0)
    isl = islands_of(values, ranks)
    assert isl.groups == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert isl.dropped_links == [(3, 4)]


def test_uniform_links_make_one_island_and_say_so():
    ranks = ranks_for(2, 4)
    isl = islands_of(matrix(ranks, intra=2.0, inter=2.0, noise=0.1), ranks)
    assert isl.groups == [list(range(8))] and isl.source == "uniform" and isl.gap is None
    assert not isl.agrees_with_nodes and "no clear gap" in isl.notes[0]


def test_a_rank_without_any_measured_link_joins_its_node():
    ranks = ranks_for(2, 4)
    values = matrix(ranks)
    for j in range(8):
        set_link(values, 5, j, None)
    isl = islands_of(values, ranks)
    assert isl.groups == [[0, 1, 2, 3], [4, 5, 6, 7]] and isl.placed_by_node_map == [5]


def test_a_lost_rank_stands_alone_and_the_cross_check_still_reads_the_nodes():
    ranks = ranks_for(2, 4)
    ranks[5] = {"rank": 5, "hostname": "?", "node_rank": -1, "missing": True}  # as the worker records it
    values = matrix(ranks_for(2, 4))
    for j in range(8):
        set_link(values, 5, j, None)
    isl = islands_of(values, ranks)
    assert isl.groups == [[0, 1, 2, 3], [4, 6, 7], [5]] and isl.placed_by_node_map == [5]
    assert isl.agrees_with_nodes and not isl.notes


def test_nothing_measured_falls_back_to_the_node_map():
    ranks = ranks_for(3, 2, interleave=True)
    isl = find_islands(Links(None, n=6), WorldInfo.from_dicts(ranks))
    assert isl.source == "node map" and isl.groups == [[0, 3], [1, 4], [2, 5]]


def test_a_node_cut_in_two_is_reported():
    ranks = ranks_for(2, 4)
    values = matrix(ranks)
    for a in (4, 5):
        for b in (6, 7):
            set_link(values, a, b, 0.05)  # GPUs 0-1 and 2-3 of node1 joined no faster than the network
    isl = islands_of(values, ranks)
    assert isl.groups == [[0, 1, 2, 3], [4, 5], [6, 7]]
    assert not isl.agrees_with_nodes
    assert "node node1 holds 2 islands [4,5], [6,7]" in isl.notes[0] and "0.05 GB/s vs 1.9" in isl.notes[0]


def test_gap_rules():
    assert find_gap([]) is None and find_gap([2.0]) is None
    assert find_gap([2.0, 2.1, 1.9 * GAP_MIN * 0.99]) is None  # nothing 1.5x apart
    g = find_gap([0.02, 0.025, 2.0, 2.2, 0.5])  # the widest ratio wins: 0.025 -> 0.5
    assert (g.below_GBps, g.above_GBps) == (0.025, 0.5)
    dead = find_gap([0.0, 2.0, 2.1])
    assert dead.below_GBps == 0.0 and dead.above_GBps == 2.0 and dead.ratio == float("inf")


def test_gap_in_a_sample_of_many_links_has_the_exact_edges():
    """Beyond EXACT_GAP_LIMIT figures the gap is sought in a sample; its edges are exact all the same."""
    rnd = random.Random(5)
    slow = [rnd.uniform(40, 50) for _ in range(EXACT_GAP_LIMIT * 3)]
    fast = [rnd.uniform(300, 380) for _ in range(2000)]
    values = slow + fast
    rnd.shuffle(values)
    g = find_gap(values)
    assert (g.below_GBps, g.above_GBps) == (max(slow), min(fast))
    values.append(120.0)  # one odd link inside the gap: the edges move to it
    g = find_gap(values)
    assert (g.below_GBps, g.above_GBps) == (120.0, min(fast))
    assert find_gap([45.0 + k * 1e-6 for k in range(EXACT_GAP_LIMIT * 2)]) is None


def test_pcie_box_with_nvlink_bridge_pairs_gives_pair_islands_that_agree_with_nvlink():
    text = fixture("nvidia-smi-topo/pcie-8gpu-nvlink-bridge-pairs.nv12.tabs.no-legend.txt").read_text()
    nodes = []
    for host in ("box-a", "box-b"):
        node = topo_to_node(parse_topo_matrix(text), hostname=host)
        nodes.append(node)
    values, ranks = from_topology(nodes)
    nv = {n.hostname: nvlink_domains(nvlink_matrix(n)) for n in nodes}
    assert nv["box-a"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    isl = islands_of(values, ranks, nv)
    assert isl.groups == [[k, k + 1] for k in range(0, 16, 2)]
    assert isl.agrees_with_nvlink is True
    assert not isl.agrees_with_nodes and "node box-a holds 4 islands" in " ".join(isl.notes)


def test_hgx_pair_islands_are_the_nodes_and_a_slow_gpu_disagrees_with_nvlink():
    nodes = [NodeTopology.from_dict(json.loads((DATA / f"hgx-h100-{x}.json").read_text())) for x in "ab"]
    values, ranks = from_topology(nodes)
    nv = {n.hostname: nvlink_domains(nvlink_matrix(n)) for n in nodes}
    isl = islands_of(values, ranks, nv)
    assert isl.groups == [list(range(8)), list(range(8, 16))]
    assert isl.agrees_with_nodes and isl.agrees_with_nvlink
    for j in range(16):  # GPU 3 of hgx-b measures at network speed to everyone: NVLink says otherwise
        if j != 11:
            set_link(values, 11, j, 40.0)
    isl = islands_of(values, ranks, nv)
    assert [11] in isl.groups and isl.agrees_with_nvlink is False
    assert any("node hgx-b: NVLink joins ranks [8,9,10,11,12,13,14,15]" in n for n in isl.notes)


def test_nvlink_domains_reads_nvl001_matrices():
    m = {"labels": ["GPU0", "GPU1", "GPU2"], "values": [[None, 2, 0], [2, None, 0], [0, 0, None]]}
    assert nvlink_domains(m) == [[0, 1], [2]]
    with pytest.raises(ValueError, match="GPU0, GPU1"):
        nvlink_domains({"labels": ["A", "B"], "values": [[None, 1], [1, None]]})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([], "no rows"),
        ([[None, 1.0], [1.0]], r"row 1 has 1 entries; expected 2"),
        ([[None, "fast"], [1.0, None]], r"cell \[0\]\[1\] is 'fast'"),
        ([[None, -1.0], [1.0, None]], r"cell \[0\]\[1\] is -1.0"),
        ([[None, float("nan")], [1.0, None]], r"cell \[0\]\[1\] is nan"),
        ([[None, True], [1.0, None]], r"cell \[0\]\[1\] is True"),
        ([[None, 1.0], None], r"row 1 has NoneType entries"),
    ],
)
def test_bad_matrices_are_refused_with_the_cell(values, message):
    with pytest.raises(LinkMatrixError, match=message):
        Links(values)


def test_links_take_the_slower_direction_and_payload_units_are_checked():
    links = Links.from_payload(
        {"unit": "GB/s", "values": [[None, 2.0, None], [1.0, None, 3], [None, None, None]]}
    )
    assert links.get(0, 1) == links.get(1, 0) == 1.0
    assert links.get(1, 2) == 3 and links.get(0, 2) is None and links.get(1, 1) is None
    assert links.coverage() == pytest.approx(2 / 3)
    with pytest.raises(LinkMatrixError, match="unit is 'MB/s'"):
        Links.from_payload({"unit": "MB/s", "values": [[None]]})
    with pytest.raises(LinkMatrixError, match="no 'values'"):
        Links.from_payload({"unit": "GB/s"})
