"""The nccl_algo recommendation on recorded ALG001 payloads (built through ALG001's own summarize)."""

import pytest
from alg_payloads import MiB, rank_payloads, world
from ddpdoctor.checks import alg001_nccl_algo as alg

from ddpdoctor.core.report import CheckResult, Report
from ddpdoctor.core.run_info import RunInfo
from ddpdoctor.model.tuning.nccl_cost import PREDICTION_LABEL, CostModel, Fabric
from ddpdoctor.recommend.nccl_algo import override_value, recommend


def report_from(payloads, w=None, backend="nccl", extra_checks=()) -> Report:
    w = w or world()
    s = alg.summarize(payloads, w)
    check = CheckResult(code="ALG001", title=alg.TITLE, status=s.final_status(), summary=s.summary,
                        findings=s.findings, data=s.data)  # fmt: skip
    return Report(run=RunInfo(backend=backend, world_size=w.world_size), checks=[check, *extra_checks])


def scaled(factors: dict):
    """default takes 100 µs + 1 µs/MiB; an arm takes that × factors[(arm, rep)] (1.0 when absent)."""

    def t(arm, rep, size, rank):
        return (100.0 + size / MiB) * factors.get((arm, rep), factors.get(arm, 1.0))

    return t


def only(recs):
    assert len(recs) == 1 and recs[0].id == "nccl_algo"
    return recs[0]


def test_a_clear_consistent_win_is_an_override():
    rec = only(recommend(report_from(rank_payloads(scaled({"Tree": 0.8, "Ring": 1.02})))))
    assert rec.value == "NCCL_ALGO=allreduce:tree"
    assert rec.confidence == "medium"  # two repetitions
    assert rec.evidence["winner"] == "Tree" and rec.evidence["min_gain_pct"] == pytest.approx(20.0)
    assert rec.evidence["nccl_version"] == "2.21.5" and rec.evidence["margin_pct"] == 10.0
    assert rec.evidence["job_sizes_B"] == [1 * MiB, 25 * MiB]
    per_size = rec.evidence["per_size"][0]
    assert per_size["default_time_us"] == [pytest.approx(101.0)] * 2
    assert per_size["candidate_time_us"] == [pytest.approx(80.8)] * 2 and per_size["gain_pct"] == [20.0, 20.0]
    assert "debugging knob" in rec.rationale and "NCCL 2.21.5" in rec.rationale
    assert rec.snippet.startswith("export NCCL_ALGO=allreduce:tree") and "2.21.5" in rec.snippet
    assert "re-check after NCCL upgrades" in rec.snippet


def test_three_repetitions_and_a_big_win_is_high_confidence():
    rec = only(recommend(report_from(rank_payloads(scaled({"Ring": 0.6}), reps=3))))
    assert rec.value == "NCCL_ALGO=allreduce:ring" and rec.confidence == "high"


def test_a_win_in_one_repetition_only_keeps_the_default():
    rec = only(recommend(report_from(rank_payloads(scaled({("Tree", 0): 0.8, ("Tree", 1): 0.98})))))
    assert rec.value == "keep the default" and rec.confidence == "medium"
    why = rec.data["comparison"]["arms"]["Tree"]["why_not"]
    assert why.startswith("won by 10 % only in some repetitions") and "+20.0 %/+2.0 %" in why
    assert "Tree: won by 10 % only in some repetitions" in rec.rationale


def test_a_win_at_one_job_size_only_keeps_the_default():
    def t(arm, rep, size, rank):
        base = 100.0 + size / MiB
        return base * 0.7 if arm == "Tree" and size == 1 * MiB else base * 1.05 if arm == "Tree" else base

    rec = only(recommend(report_from(rank_payloads(t))))
    assert rec.value == "keep the default"
    assert "slower than the default at 25 MiB" in rec.data["comparison"]["arms"]["Tree"]["why_not"]


def test_a_small_consistent_win_is_not_enough():
    rec = only(recommend(report_from(rank_payloads(scaled({"Tree": 0.95})))))
    assert rec.value == "keep the default"
    assert "within 10 % of the default at 1 MiB" in rec.data["comparison"]["arms"]["Tree"]["why_not"]
    # ... unless the margin asked for is smaller
    assert only(
        recommend(report_from(rank_payloads(scaled({"Tree": 0.95}))), {"nccl_algo_margin": 0.04})
    ).value == ("NCCL_ALGO=allreduce:tree")


def test_job_sizes_between_measured_points_are_interpolated():
    rec = only(
        recommend(report_from(rank_payloads(scaled({"Tree": 0.8}))), {"job_sizes_B": [8 * MiB, 1 << 40]})
    )
    assert rec.value == "NCCL_ALGO=allreduce:tree"
    assert rec.evidence["job_sizes_B"] == [8 * MiB] and rec.evidence["job_sizes_outside_measured_B"] == [
        1 << 40
    ]
    assert rec.evidence["per_size"][0]["default_time_us"][0] == pytest.approx(108.0)


def test_an_invalid_ab_never_overrides():
    payloads = rank_payloads(scaled({"Tree": 0.5}), env_override={("Tree", 3): None})
    rec = only(recommend(report_from(payloads)))
    assert rec.value == "keep the default" and rec.confidence == "low"
    assert "not valid" in rec.rationale and "did not see NCCL_ALGO=Tree" in rec.rationale


def test_gloo_is_not_applicable():
    payloads = {0: {"applies": False, "backend": "gloo"}, 1: {"applies": False, "backend": "gloo"}}
    rec = only(recommend(report_from(payloads, world(2, 2, "gloo"), backend="gloo")))
    assert rec.value == "not applicable" and "gloo" in rec.rationale
    # a report without ALG001 on gloo too
    assert only(recommend(Report(run=RunInfo(backend="gloo")))).value == "not applicable"


def test_gloo_test_mode_measurements_never_recommend():
    payloads = rank_payloads(scaled({"Tree": 0.5}), n=2, per_node=2)
    for p in payloads.values():
        p.update(backend="gloo", test_mode=True)
    rec = only(recommend(report_from(payloads, world(2, 2, "gloo"), backend="gloo")))
    assert rec.value == "not applicable"


def test_nccl_without_alg001_keeps_the_default_with_low_confidence():
    rec = only(recommend(Report(run=RunInfo(backend="nccl"))))
    assert rec.value == "keep the default" and rec.confidence == "low"
    assert "--suite full" in rec.rationale


def test_old_nccl_gets_the_plain_syntax():
    assert override_value("Tree", "2.20.3") == "NCCL_ALGO=Tree"
    assert override_value("Tree", "2.18.1") == "NCCL_ALGO=Tree"
    assert override_value("Tree", "2.21.5") == "NCCL_ALGO=allreduce:tree"
    assert override_value("NVLS", None) == "NCCL_ALGO=allreduce:nvls"
    rec = only(recommend(report_from(rank_payloads(scaled({"Tree": 0.8}), nccl_version="2.20.3"))))
    assert rec.value == "NCCL_ALGO=Tree" and "every collective" in rec.rationale


def test_predictions_for_more_nodes_are_labelled_and_match_the_model():
    rec = only(recommend(report_from(rank_payloads(scaled({"Tree": 0.8})))))
    pred = rec.data["predictions"]
    assert pred["label"] == PREDICTION_LABEL and "Prediction (NCCL cost model, NCCL 2.20)" in rec.rationale
    assert sorted({r["nnodes"] for r in pred["rows"]}) == [4, 8, 16]  # 2, 4 and 8 × the 2 measured nodes
    # measured across nodes: the Ring busbw at the largest size stands for the network
    assert pred["source"]["inter_GBps"].startswith("ALG001 Ring busbw")
    f = Fabric(**pred["fabric"])
    row = next(r for r in pred["rows"] if r["nnodes"] == 16 and r["size_B"] == 1 * MiB)
    pick = CostModel(f.with_nodes(16)).pick(1 * MiB)
    assert (row["algo"], row["proto"]) == (pick.algo, pick.proto)
    assert row["time_us"] == pytest.approx(pick.time_us, abs=0.01)


def test_one_node_needs_the_network_figure_to_predict():
    payloads = rank_payloads(scaled({}), n=8, per_node=8)
    rep = report_from(payloads, world(8, 8))
    rec = only(recommend(rep))
    assert rec.value == "keep the default" and rec.data["predictions"]["rows"] == []
    assert "No predictions for other node counts" in rec.rationale
    rec = only(recommend(rep, {"nccl_fabric": {"inter_GBps": 400.0}}))
    assert sorted({r["nnodes"] for r in rec.data["predictions"]["rows"]}) == [2, 4, 8]
    assert rec.data["predictions"]["source"]["inter_GBps"] == "option nccl_fabric"


def test_p2p_figures_feed_the_model():
    p2p = CheckResult(code="P2P001", title="p2p", data={"classes": {"intra_node": {"median_GBps": 300.0},
                                                                    "inter_node": {"median_GBps": 45.0}}})  # fmt: skip
    rep = report_from(rank_payloads(scaled({}), n=8, per_node=8), world(8, 8), extra_checks=[p2p])
    pred = only(recommend(rep)).data["predictions"]
    assert pred["fabric"]["intra_GBps"] == 300.0 and pred["fabric"]["inter_GBps"] == 45.0 * 8
    assert pred["source"]["intra_GBps"] == "P2P001 intra-node median"


def test_an_inherited_nccl_algo_is_named():
    payloads = rank_payloads(scaled({"Tree": 1.0}))
    for p in payloads.values():
        p["inherited_nccl_algo"] = "Tree"
    rec = only(recommend(report_from(payloads)))
    assert rec.value == "keep the default" and "Your environment sets NCCL_ALGO=Tree" in rec.rationale
    assert rec.snippet.startswith("unset NCCL_ALGO")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"nccl_algo_margin": 2}, "nccl_algo_margin=2: expected a fraction between 0 and 1"),
        ({"job_sizes_B": "25MiB"}, "job_sizes_B='25MiB': expected a non-empty list"),
        ({"job_sizes_B": [0]}, r"job_sizes_B=\[0\]"),
        ({"nccl_fabric": "fast"}, "nccl_fabric='fast': expected a mapping"),
        ({"nccl_fabric": {"inter_GBps": -5}}, "inter_GBps must be a positive number"),
    ],
)
def test_bad_options_say_which_and_what(options, message):
    with pytest.raises((ValueError, TypeError), match=message):
        recommend(report_from(rank_payloads(scaled({}))), options)
