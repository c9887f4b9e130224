"""Best rings: exact search against brute force, the heuristic, crossings, slow and missing links."""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from ddpdoctor.core.world import WorldInfo
from ddpdoctor.model.bandwidth.p2p_links import Links
from ddpdoctor.model.placement.islands import find_islands
from ddpdoctor.model.placement.layouts import LinkModel
from ddpdoctor.model.placement.rings import SIGNIFICANT, best_ring, better, ring_of
from ddpdoctor.probes.smi_topo import parse_topo_matrix, topo_to_node
from tests.layouts.synth import fixture, from_topology, matrix, ranks_for, set_link


def model_of(values, ranks):
    links = Links(values)
    return LinkModel(links, find_islands(links, WorldInfo.from_dicts(ranks)))


def all_rings(n):
    for perm in itertools.permutations(range(1, n)):
        yield [0, *perm]


def test_interleaved_default_ring_crosses_every_link_and_the_best_ring_twice():
    ranks = ranks_for(2, 4, interleave=True)
    m = model_of(matrix(ranks), ranks)
    default = ring_of(range(8), m)
    best = best_ring([0, 2, 4, 6, 1, 3, 5, 7], m)
    assert default.crossings == 8 and best.crossings == 2 and best.exact
    assert best.order == [0, 2, 4, 6, 7, 5, 3, 1]  # the snake: crossings 6↔7 and 1↔0 join equal local ranks
    assert better(best, default) and not better(default, best)


def test_the_best_ring_avoids_one_slow_link():
    ranks = ranks_for(1, 8)
    values = matrix(ranks)
    set_link(values, 2, 3, 0.5)
    m = model_of(values, ranks)
    default = ring_of(range(8), m)
    best = best_ring(list(range(8)), m)
    assert default.bottleneck_GBps == 0.5 and default.bottleneck_link == (2, 3)
    assert best.bottleneck_GBps > 1.8 and best.exact
    assert {tuple(sorted(p)) for p in itertools.pairwise([*best.order, best.order[0]])}.isdisjoint({(2, 3)})


def test_the_heuristic_avoids_slow_links_in_a_large_island():
    ranks = ranks_for(1, 40)
    values = matrix(ranks, seed=3)
    for a, b in ((4, 5), (17, 18), (30, 31)):
        set_link(values, a, b, 0.2)
    m = model_of(values, ranks)
    best = best_ring(list(range(40)), m)
    assert not best.exact and best.bottleneck_GBps > 1.8
    assert sorted(best.order) == list(range(40))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(4, 7),
    classes=st.lists(st.sampled_from([0.5, 1.0, 2.0, 5.0, 12.0]), min_size=21, max_size=21),
)
def test_exact_search_matches_brute_force(n, classes):
    """Best bottleneck within the noise of the brute-force optimum, and no more crossings than any ring
    that good. Link figures come from well-separated classes, as real link types do."""
    ranks = ranks_for(1, n)
    values = [[None] * n for _ in range(n)]
    for k, (a, b) in enumerate(itertools.combinations(range(n), 2)):
        set_link(values, a, b, classes[k])
    m = model_of(values, ranks)
    ours = best_ring(list(range(n)), m)
    rings = [ring_of(r, m) for r in all_rings(n)]
    top = max(r.bottleneck_GBps for r in rings)
    assert ours.exact and sorted(ours.order) == list(range(n))
    assert ours.bottleneck_GBps == top  # classes are 2x apart or more: "within the noise" is exact
    fewest = min(r.crossings for r in rings if r.bottleneck_GBps * SIGNIFICANT >= top)
    assert ours.crossings == fewest


def test_crossings_are_minimised_at_the_best_bottleneck():
    """Two islands whose cross links are all alike: any ring has that bottleneck, the best crosses twice."""
    ranks = ranks_for(2, 3, interleave=True)
    m = model_of(matrix(ranks, noise=0.0), ranks)
    best = best_ring([0, 2, 4, 1, 3, 5], m)
    assert best.crossings == 2 and ring_of(range(6), m).crossings == 6


def test_dgx1_exact_search_finds_the_nv2_cycle():
    text = fixture("nvidia-smi-topo/dgx1-v100.8gpu.4nic-mlx5cols.spaces.txt").read_text()
    node = topo_to_node(parse_topo_matrix(text), hostname="dgx1")
    values, ranks = from_topology([node], noise=0.0)
    m = model_of(values, ranks)
    default = ring_of(range(8), m)
    best = best_ring(list(range(8)), m)
    assert default.bottleneck_GBps == 12.0  # 3↔4 crosses the sockets (SYS)
    assert best.bottleneck_GBps == 40.0 and best.exact  # every hop two bonded NVLinks
    assert best.order == [0, 3, 2, 1, 5, 6, 7, 4]


def test_two_dgx1_nodes_heuristic_keeps_nvlink_hops_inside_nodes():
    text = fixture("nvidia-smi-topo/dgx1-v100.8gpu.4nic-mlx5cols.spaces.txt").read_text()
    nodes = [topo_to_node(parse_topo_matrix(text), hostname=h) for h in ("dgx-a", "dgx-b")]
    values, ranks = from_topology(nodes, noise=0.0)
    m = model_of(values, ranks)
    best = best_ring(list(range(16)), m)
    assert not best.exact and best.crossings == 2
    inside = [f for (a, b), f in zip(itertools.pairwise([*best.order, best.order[0]]), best.links_GBps)
              if ranks[a]["node_rank"] == ranks[b]["node_rank"]]  # fmt: skip
    assert min(inside) >= 20.0  # NVLink only: no PCIe/SYS hop left inside a node
    assert ring_of(range(16), m).bottleneck_GBps == 11.25  # 100 Gb/s NIC at 90%


def test_unmeasured_links_are_estimated_and_counted():
    ranks = ranks_for(2, 4)
    values = matrix(ranks)
    for a in range(4):  # P2P001's "rails" plan: across nodes only equal local ranks were measured
        for b in range(4, 8):
            if b - a != 4:
                set_link(values, a, b, None)
    m = model_of(values, ranks)
    default = ring_of(range(8), m)
    assert default.estimated_links == 2  # 3→4 and 7→0 join local ranks 3 and 0: not measured
    assert m.estimated(3, 4) and not m.estimated(0, 4)
    assert abs(m.bw(3, 4) - 0.025) < 0.003
    best = best_ring(list(range(8)), m)
    assert best.estimated_links == 0 and best.crossings == 2  # the snake uses measured rail pairs


def test_tiny_rings():
    ranks = ranks_for(1, 2)
    m = model_of(matrix(ranks), ranks)
    assert best_ring([1, 0], m).order == [0, 1]
    assert ring_of([0], m).bottleneck_GBps is None
