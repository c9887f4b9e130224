"""The NCCL cost model against cases worked by hand from tuning.cc's constants (NCCL 2.20.3)."""

import math

import pytest

from ddpdoctor.model.tuning.nccl_cost import PREDICTION_LABEL, CostModel, Fabric, log2i, search_graph

MiB = 1 << 20


def a100_node(**kw) -> Fabric:
    return Fabric(**{"nnodes": 1, "gpus_per_node": 8, "sm": 80, "intra_GBps": 240.0, **kw})


def table(model: CostModel, algo: str, proto: str) -> tuple[float, float]:
    lat, bw = model.table[(algo, proto)]
    return round(lat, 4), round(bw, 4)


def test_log2i_is_nccls():
    assert [log2i(n) for n in (0, 1, 2, 3, 4, 1023, 1024)] == [0, 0, 1, 1, 2, 9, 10]


def test_one_a100_node_by_hand():
    # Ring search on 240 GB/s with the pre-sm90 intra speeds: 6 × 40 fits exactly, then
    # ncclTopoDupChannels splits them: 12 channels × 20 GB/s. Tree: 12 channels, 240×8/7/12 -> 20.
    m = CostModel(a100_node())
    assert (m.graphs["Ring"].n_channels, m.graphs["Ring"].bw_intra) == (12, 20.0)
    assert (m.graphs["Tree"].n_channels, m.graphs["Tree"].bw_intra) == (12, 20.0)
    # Ring/Simple: 8.4 + 14 steps × 3.4 µs; busBw 240 × nRanks/nsteps = 240 × 8/14
    assert table(m, "Ring", "Simple") == (56.0, round(240 * 8 / 14, 4))
    # Ring/LL: 6.6 + 14 × 0.6; min(llMaxBw 87.7, 240/4) × 8/14
    assert table(m, "Ring", "LL") == (15.0, round(60 * 8 / 14, 4))
    # Ring/LL128: 14 + 14 × 1.9; min(240 × 0.92, 12 × 20) × 8/14
    assert table(m, "Ring", "LL128") == (40.6, round(220.8 * 8 / 14, 4))
    # Tree: busBw min(240 × .92, 12 × 24.0) = 220.8, then ×.5; Simple latency 2 × 7 × 28 µs over NVLink
    assert table(m, "Tree", "Simple") == (392.0, 110.4)
    assert table(m, "Tree", "LL") == (15.2, round(220.8 / 3.8 * 0.5, 4))
    assert table(m, "Tree", "LL128") == (31.5, round(220.8 * 7 / 9 * 0.5, 4))
    assert m.table[("NVLS", "Simple")] == (0.0, 0.0)  # no NVSwitch multicast on A100
    # times: lat + bytes / (1000 × bw); the tree correction at 1 KiB (log2(1024/64) = 4) is .9 for LL
    assert m.time_us("Ring", "Simple", 256 * MiB) == pytest.approx(56 + 256 * MiB / (1000 * 240 * 8 / 14))
    assert m.time_us("Tree", "LL", 1024) == pytest.approx(15.2 + 1024 / (1000 * 220.8 / 3.8 * 0.5 * 0.9))
    pick = m.pick(1024)
    assert (pick.algo, pick.proto) == ("Ring", "LL")
    assert pick.time_us == pytest.approx(15.0 + 1024 / (1000 * 60 * 8 / 14))
    assert pick.busbw_GBps == pytest.approx(pick.algbw_GBps * 2 * 7 / 8)
    assert m.pick(256 * MiB).algo == "Ring"


def test_four_a100_nodes_by_hand():
    # Across nodes the search uses the inter-node speeds on min(240, 100): 5 × 20 fits exactly (no dup
    # below 25 GB/s); with 4 nodes Ring and Tree take bwInter.
    m = CostModel(a100_node(nnodes=4, inter_GBps=100.0))
    assert (m.graphs["Ring"].n_channels, m.graphs["Ring"].bw_inter) == (5, 20.0)
    # Ring/Simple: 8.4 + (62 - 8) × max(3.4, 3 × 1.0 net overhead) + 8 × 14.0
    assert table(m, "Ring", "Simple") == (304.0, round(100 * 32 / 62, 4))
    # Ring/LL: min(llMaxBw Intel-N4 20.4, 100/4) × 32/62; 6.6 + 54 × max(0.6, 1.0) + 8 × 2.7
    assert table(m, "Ring", "LL") == (82.2, round(20.4 * 32 / 62, 4))
    assert table(m, "Ring", "LL128") == (148.6, round(92 * 32 / 62, 4))
    # Tree/Simple: min(100 × .92, 5 × 17.8) × .5; 2 × (7 × 28 + log2(4) × 28)
    assert table(m, "Tree", "Simple") == (504.0, 44.5)
    assert table(m, "Tree", "LL") == (35.2, 10.2)
    assert table(m, "Tree", "LL128") == (65.5, round(89 * 120 / 128 * 0.5, 4))
    # The ring plateau: Simple latency × 1.4 (sm >= 80) once size / (channels × ranks) >= 64 B
    assert m.time_us("Ring", "Simple", 10240) == pytest.approx(304.0 * 1.4 + 10240 / (1000 * 100 * 32 / 62))
    assert m.time_us("Ring", "Simple", 10236) == pytest.approx(304.0 + 10236 / (1000 * 100 * 32 / 62))


def test_nvls_on_one_h100_node():
    # sm90 intra speeds on 360: 6 × 60 exact, duplicated to 12 × 30. NVLS: 8 channels, 360×8/7/8 -> 50.
    m = CostModel(Fabric(nnodes=1, gpus_per_node=8, sm=90, intra_GBps=360.0, nvls=True))
    assert (m.graphs["Ring"].n_channels, m.graphs["Ring"].bw_intra) == (12, 30.0)
    assert (m.graphs["NVLS"].n_channels, m.graphs["NVLS"].bw_intra) == (8, 50.0)
    assert table(m, "NVLS", "Simple") == (23.0, round(400 * 5 / 6, 4))
    assert m.table[("NVLS", "LL")] == (0.0, 0.0)  # NVLS is Simple only
    assert m.pick(256 * MiB).algo == "NVLS"
    assert m.pick(256 * MiB, algos=("Ring", "Tree")).algo == "Ring"
    # NCCL 2.20 runs NVLS within one node only, and not on 2 GPUs
    assert "NVLS" not in CostModel(Fabric(2, 8, 90, 360.0, inter_GBps=400.0, nvls=True)).graphs
    assert "NVLS" not in CostModel(Fabric(1, 2, 90, 360.0, nvls=True)).graphs


def test_ll128_is_off_on_pcie_and_with_a_far_nic():
    pcie = CostModel(a100_node(intra_GBps=24.0, intra_link="pci"))
    assert pcie.table[("Ring", "LL128")][1] == 0 and pcie.table[("Tree", "LL128")][1] == 0
    assert pcie.table[("Ring", "Simple")][0] == pytest.approx(8.4 + 14 * 5.7)  # PCI hardware latency
    far = CostModel(a100_node(nnodes=2, inter_GBps=50.0, gpu_nic_close=False))
    assert far.table[("Ring", "LL128")][1] == 0
    assert CostModel(a100_node(nnodes=2, inter_GBps=50.0)).table[("Ring", "LL128")][1] > 0


def test_two_node_tree_may_exceed_the_network():
    # Pass 2 of the search raises a 2-node tree's bwIntra up to twice bwInter (the "tree effect").
    f = Fabric(nnodes=2, gpus_per_node=8, sm=90, intra_GBps=370.8, inter_GBps=100.0)
    ring = search_graph(f, "Ring")
    tree = search_graph(f, "Tree", ring)
    assert tree.bw_inter == ring.bw_inter and tree.bw_intra > tree.bw_inter
    assert tree.bw_intra <= 2 * tree.bw_inter


H100 = {"gpus_per_node": 8, "sm": 90, "intra_GBps": 370.8, "inter_GBps": 400.0}


@pytest.mark.parametrize("nnodes", [4, 8, 16, 64])
def test_tree_wins_small_messages_on_many_nodes(nnodes):
    m = CostModel(Fabric(nnodes=nnodes, **H100))
    assert m.pick(64 * 1024).algo == "Tree"
    assert m.pick(1 * MiB).algo == "Tree"


@pytest.mark.parametrize("nnodes", [2, 4, 8, 16])
def test_ring_wins_large_messages(nnodes):
    m = CostModel(Fabric(nnodes=nnodes, **H100))
    assert m.pick(1024 * MiB).algo == "Ring"


def test_trees_lead_grows_with_the_node_count_and_shrinks_with_size():
    def ring_over_tree(nnodes, size):
        best = CostModel(Fabric(nnodes=nnodes, **H100)).best_per_algo(size)
        return best["Ring"].time_us / best["Tree"].time_us

    by_nodes = [ring_over_tree(n, 64 * 1024) for n in (2, 4, 8, 16, 32, 64)]
    assert by_nodes == sorted(by_nodes) and by_nodes[-1] > 10
    by_size = [ring_over_tree(8, s) for s in (64 * 1024, 1 * MiB, 16 * MiB, 256 * MiB, 1024 * MiB)]
    assert by_size == sorted(by_size, reverse=True) and by_size[-1] < 1


def test_times_grow_with_size_for_every_pair():
    m = CostModel(Fabric(nnodes=4, **H100))
    sizes = [2**k for k in range(6, 32)]
    for (algo, proto), (_, bw) in m.table.items():
        if bw:
            times = [m.time_us(algo, proto, s) for s in sizes]
            assert all(t > 0 and math.isfinite(t) for t in times)
            assert times[-1] > times[0]


def test_label_names_the_version():
    assert PREDICTION_LABEL == "prediction (NCCL cost model, NCCL 2.20)"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nnodes": 0}, "nnodes must be a positive integer"),
        ({"gpus_per_node": 1}, "at least 2 ranks"),
        ({"sm": 8.0}, "sm must be a positive integer"),
        ({"intra_GBps": -1.0}, "intra_GBps must be a positive number"),
        ({"intra_GBps": float("nan")}, "intra_GBps must be a positive number"),
        ({"nnodes": 2}, "inter_GBps is needed for 2 nodes"),
        ({"nnodes": 2, "inter_GBps": "fast"}, "inter_GBps must be a positive number"),
        ({"intra_link": "nvswitch"}, "intra_link must be one of nvlink, pci"),
        ({"cpu_vendor": "arm"}, "cpu_vendor must be one of intel, amd"),
    ],
)
def test_bad_fabrics_say_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message):
        a100_node(**kwargs)


def test_bad_queries_say_what_is_wrong():
    m = CostModel(a100_node())
    with pytest.raises(ValueError, match="message size must be a number of bytes"):
        m.time_us("Ring", "Simple", -1)
    with pytest.raises(ValueError, match="unknown algorithm/protocol"):
        m.time_us("Ring", "Fast", 1024)
    with pytest.raises(ValueError, match="unknown algorithm"):
        m.pick(1024, algos=("Butterfly",))
    with pytest.raises(ValueError, match="none of NVLS is available"):
        m.pick(1024, algos=("NVLS",))
