"""The pure half of the bandwidth checks: busbw factors, the α–β fit, sizes, pair schedules, localization."""

from __future__ import annotations

import itertools

import pytest

from ddpdoctor.model.bandwidth.busbw import busbw_factor, busbw_GBps
from ddpdoctor.model.bandwidth.curve import TimeCurve, fit_bands, fit_line
from ddpdoctor.model.bandwidth.p2p_analysis import analyze
from ddpdoctor.model.bandwidth.pair_schedule import circle_rounds, make_schedule, rail_rounds
from ddpdoctor.model.bandwidth.sizes import format_size, parse_size, size_ladder


# -- busbw ---------------------------------------------------------------------------------------------
def test_busbw_factors_follow_nccl_tests():
    assert busbw_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert busbw_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert busbw_factor("reduce_scatter", 4) == pytest.approx(3 / 4)
    assert busbw_factor("broadcast", 64) == 1.0
    assert busbw_factor("all_reduce", 1) == 0.0
    # 1 GB in 10 ms on 8 ranks: algbw 100 GB/s, busbw 175 GB/s
    assert busbw_GBps("all_reduce", 8, 1e9, 0.01) == pytest.approx(175.0)
    with pytest.raises(ValueError, match="unknown collective"):
        busbw_factor("allreduce", 2)


# -- curve -------------------------------------------------------------------------------------------
def test_line_fit_recovers_alpha_and_beta():
    alpha, beta = 50e-6, 2e9  # 50 µs, 2 GB/s
    pts = [(s, alpha + s / beta) for s in (4 << 20, 8 << 20, 16 << 20)]
    (fit,) = fit_bands(pts)
    assert fit.alpha_us == pytest.approx(50, rel=1e-3)
    assert fit.beta_GBps == pytest.approx(2.0, rel=1e-3)
    assert fit.r2 == pytest.approx(1.0)
    with pytest.raises(ValueError):
        fit_line([(1, 1.0), (1, 2.0)])


def test_bands_split_latency_and_bandwidth_regimes():
    def t(s):  # latency-bound below 64 KiB, bandwidth-bound above
        return 100e-6 + s / 1e9 if s < 65536 else 20e-6 + s / 2e9

    sizes = size_ladder(1024, 64 << 20)
    fits = fit_bands([(s, t(s)) for s in sizes])
    assert len(fits) == 3 and fits[0].hi_B < 65536 <= fits[1].lo_B
    assert fits[0].alpha_us == pytest.approx(100, rel=0.01)
    assert fits[-1].beta_GBps == pytest.approx(2.0, rel=0.01)


def test_time_curve_interpolates_and_extrapolates():
    pts = [(1 << 20, 1e-3), (4 << 20, 3e-3), (16 << 20, 9e-3)]
    c = TimeCurve(pts)
    assert c.time_s(1 << 20) == 1e-3
    assert c.time_s(2.5 * (1 << 20)) == pytest.approx(2e-3)
    # beyond the largest size: the last band's bandwidth continues the curve
    beta = c.fits[-1].beta_GBps * 1e9
    assert c.time_s(32 << 20) == pytest.approx(9e-3 + (16 << 20) / beta)
    assert c.time_s(1024) <= 1e-3 and c.time_s(0) == 0.0
    assert TimeCurve.from_curve({"unit_y": "s", "points": [[1024, 1e-4], [2048, 2e-4]]}).time_s(
        1536
    ) == pytest.approx(1.5e-4)
    with pytest.raises(ValueError):
        TimeCurve([])
    with pytest.raises(ValueError):
        TimeCurve.from_curve({"unit_y": "GB/s", "points": [[1, 1]]})


def test_sizes_parse_and_print():
    assert parse_size("64M") == 64 << 20 == parse_size("64MiB") == parse_size("64 mb")
    assert parse_size("1.5K") == 1536 and parse_size("4096") == 4096 and parse_size(7) == 7
    for bad in ("", "64X", "-1M", "0", "M"):
        with pytest.raises(ValueError, match="size"):
            parse_size(bad)
    assert (
        format_size(64 << 20) == "64 MiB" and format_size(1536) == "1.5 KiB" and format_size(100) == "100 B"
    )
    assert size_ladder(1024, 16 << 20) == [1024 * 4**k for k in range(8)]
    assert size_ladder(1024, 5000) == [1024, 4096, 5000]


# -- schedules -----------------------------------------------------------------------------------------
def _check_rounds(rounds, ranks):
    seen = set()
    for r in rounds:
        flat = [x for p in r for x in p]
        assert len(flat) == len(set(flat)), "a rank twice in one round"
        for p in r:
            assert p not in seen, f"pair {p} twice"
            seen.add(p)
    return seen


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 17, 64, 1000])
def test_circle_method_covers_every_pair_once(n):
    rounds = circle_rounds(list(range(n)))
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    assert _check_rounds(rounds, range(n)) == set(itertools.combinations(range(n), 2))
    assert all(len(r) == n // 2 for r in rounds)


def test_circle_method_at_thousands_of_ranks():
    n = 2048
    rounds = circle_rounds(list(range(n)))
    assert len(rounds) == n - 1 and sum(len(r) for r in rounds) == n * (n - 1) // 2
    assert len({p for r in rounds for p in r}) == n * (n - 1) // 2


def test_rail_plan_for_a_large_cluster():
    nodes, gpus = 512, 8
    layout = [[node * gpus + g for g in range(gpus)] for node in range(nodes)]
    rounds = rail_rounds(layout)
    assert len(rounds) == (gpus - 1) + (nodes - 1)
    pairs = _check_rounds(rounds, range(nodes * gpus))
    within = {p for p in pairs if p[0] // gpus == p[1] // gpus}
    across = pairs - within
    assert len(within) == nodes * gpus * (gpus - 1) // 2  # the full matrix inside every node
    assert all(a % gpus == b % gpus for a, b in across)  # rails: same local rank
    assert len(across) == gpus * nodes * (nodes - 1) // 2  # every node pair, every rail


def test_make_schedule_modes_and_errors():
    layout = [[0, 1], [2, 3]]
    s = make_schedule(layout)
    assert s.plan == "full" and len(s.rounds) == 3 and s.pairs == 6
    assert s.partner(0, 0) is not None and s.partner(0, s.partner(0, 0)) == 0
    seq = make_schedule(layout, mode="sequential")
    assert len(seq.rounds) == 6 and all(len(r) == 1 for r in seq.rounds)
    assert make_schedule([[i] for i in range(100)]).plan == "rails"
    with pytest.raises(ValueError, match="p2p plan"):
        make_schedule(layout, plan="ring")
    with pytest.raises(ValueError, match="p2p mode"):
        make_schedule(layout, mode="parallel")


# -- localization ----------------------------------------------------------------------------------------
def _matrix(node_of, bw):
    n = len(node_of)
    return [[None if i == j else bw(i, j) for j in range(n)] for i in range(n)]


def test_uniform_matrix_has_no_verdict():
    node_of = [0, 0, 1, 1, 2, 2]
    a = analyze(
        _matrix(node_of, lambda i, j: 2.0 if node_of[i] == node_of[j] else 1.0), node_of, ["a", "b", "c"]
    )
    assert a.verdicts == [] and a.outliers == [] and a.asymmetric == []
    assert a.classes["intra_node"]["median_GBps"] == 2.0 and a.classes["inter_node"]["median_GBps"] == 1.0


def test_slow_node_both_directions_is_named_and_nothing_else():
    node_of = [0, 0, 1, 1, 2, 2]

    def bw(i, j):
        if node_of[i] == node_of[j]:
            return 2.0
        return 0.02 if 2 in (node_of[i], node_of[j]) else 1.0

    a = analyze(_matrix(node_of, bw), node_of, ["n0", "n1", "n2"])
    assert [v.kind for v in a.verdicts] == ["slow_node"]
    v = a.verdicts[0]
    assert (
        v.where["node"] == "n2"
        and v.severity == "error"
        and "sending" in v.message
        and "receiving" in v.message
    )
    assert all(4 in p or 5 in p for p in a.outliers) and len(a.outliers) == 16


def test_slow_sender_node_only():
    node_of = [0, 1, 2, 3]
    a = analyze(_matrix(node_of, lambda i, j: 0.3 if i == 1 else 1.0), node_of, ["n0", "n1", "n2", "n3"])
    kinds = [(v.kind, v.where.get("node")) for v in a.verdicts]
    assert kinds == [("slow_node", "n1")]
    assert a.verdicts[0].evidence["directions"] == ["sending"] and a.verdicts[0].severity == "warning"


def test_one_bad_link_between_healthy_nodes():
    node_of = [0, 1, 2, 3]
    a = analyze(_matrix(node_of, lambda i, j: 0.1 if (i, j) == (0, 3) else 1.0), node_of, list("abcd"))
    assert [(v.kind, v.pairs) for v in a.verdicts if v.kind != "asymmetric"] == [("bad_link", [(0, 3)])]
    assert a.outliers == [(0, 3)]


def test_slow_path_between_two_nodes_of_several():
    node_of = [0, 0, 1, 1, 2, 2]
    a = analyze(
        _matrix(node_of, lambda i, j: 0.1 if node_of[i] == 0 and node_of[j] == 1 else 1.0),
        node_of,
        ["n0", "n1", "n2"],
    )
    paths = [v for v in a.verdicts if v.kind == "slow_path"]
    assert len(paths) == 1 and paths[0].where == {"from_node": "n0", "to_node": "n1", "class": "inter_node"}
    assert len(paths[0].pairs) == 4


def test_slow_rank_on_a_healthy_node():
    node_of = [0, 0, 0, 0]
    a = analyze(_matrix(node_of, lambda i, j: 0.2 if 2 in (i, j) else 2.0), node_of, ["n0"])
    assert [(v.kind, v.where.get("rank")) for v in a.verdicts] == [("slow_rank", 2)]


def test_two_nodes_one_slow_direction_is_a_path_and_asymmetric():
    node_of = [0, 0, 1, 1]
    a = analyze(
        _matrix(
            node_of, lambda i, j: 2.0 if node_of[i] == node_of[j] else (0.02 if node_of[i] == 1 else 1.0)
        ),
        node_of,
        ["n0", "n1"],
    )
    (v,) = a.verdicts
    assert v.kind == "slow_path" and v.evidence["asymmetric"] and "n1 → n0" in v.message
    assert a.outliers == [(2, 0), (2, 1), (3, 0), (3, 1)]


def test_asymmetric_pair_without_other_explanation():
    node_of = [0, 1, 2]

    def bw(i, j):
        return 0.55 if (i, j) == (1, 2) else 1.0  # above "slow", below "asymmetric"

    a = analyze(_matrix(node_of, bw), node_of, ["a", "b", "c"])
    assert any(v.kind == "asymmetric" for v in a.verdicts)
    assert a.asymmetric[0]["ratio"] == pytest.approx(0.55)
    assert [v.kind for v in a.verdicts] == ["asymmetric"]
    assert (1, 2) in a.suspects


def test_missing_cells_and_bad_shapes():
    node_of = [0, 1, 2]
    m = _matrix(node_of, lambda i, j: 1.0)
    m[0][1] = None
    assert analyze(m, node_of, ["a", "b", "c"]).verdicts == []
    with pytest.raises(ValueError):
        analyze([[None, 1.0]], [0, 1], ["a", "b"])
