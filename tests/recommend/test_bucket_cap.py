"""The bucket_cap_mb recommendation on synthetic BW001 curves: choices, evidence, edge cases, bad inputs."""

from __future__ import annotations

import json

import pytest

from ddpdoctor.core.report import CheckResult, Report
from ddpdoctor.core.run_info import RunInfo
from ddpdoctor.recommend.bucket_cap import CAPS_MB, MARGIN, recommend
from ddpdoctor.recommend.model_spec import ModelSpec

SIZES_B = [2**k for k in range(10, 29, 2)]  # 1 KiB .. 256 MiB


def bw_curve(alpha_us: float, GBps: float) -> dict:
    return {
        "unit_x": "B",
        "unit_y": "s",
        "points": [[s, alpha_us * 1e-6 + s / (GBps * 1e9)] for s in SIZES_B],
    }


def report(alpha_us=20.0, GBps=20.0, backend="nccl", world=8, torch="2.13.0", data=None) -> Report:
    payload = (
        data
        if data is not None
        else {
            "all_reduce": bw_curve(alpha_us, GBps),
            "world_size": world,
            "backend": backend,
        }
    )
    return Report(
        run=RunInfo(backend=backend, world_size=world),
        versions={"torch": torch},
        checks=[CheckResult("BW001", "Collective bandwidth sweep", data=payload)],
    )


def one(rep, spec, **kw):
    recs = recommend(rep, spec, **kw)
    assert len(recs) == 1 and recs[0].id == "bucket_cap_mb"
    return recs[0]


def exact_spec(n_tensors=256, numel=2**18, **kw):
    return ModelSpec.from_dict({"tensors": [[f"p{i}", numel, "fp32"] for i in range(n_tensors)], **kw})


def test_no_bw001_says_what_to_run():
    r = one(Report(), ModelSpec.from_params("124M"))
    assert r.value == "keep the default" and r.confidence == "low"
    assert "BW001" in r.rationale and "ddpdoctor check --select BW001" in r.rationale
    assert r.snippet is None and r.data == {}


def test_no_model_says_how_to_give_one():
    r = one(report(), None)
    assert r.value == "keep the default" and r.confidence == "low"
    # in a CLI user's words: the flags to pass, not a Python call
    assert "no model was given" in r.rationale and "--model-params 124M --backward-ms 180" in r.rationale
    assert "--model-spec FILE" in r.rationale and "options['model']" not in r.rationale


def test_both_missing_names_both():
    r = one(Report(), None)
    assert len(r.evidence["missing"]) == 2


def test_invalid_model_dict_is_named_not_raised():
    r = one(report(), {"count": "lots"})
    assert "model spec is invalid" in r.rationale and "'lots'" in r.rationale


@pytest.mark.parametrize(
    "data, says",
    [
        ({"world_size": 2}, "measured no all_reduce times"),
        ({"all_reduce": {"unit_x": "B", "unit_y": "GB/s", "points": [[1024, 1.0]]}}, "unusable"),
        ({"all_reduce": {"unit_y": "s", "points": [[1024, -1.0]]}}, "unusable"),
        ({"all_reduce": {"unit_y": "s", "points": "nonsense"}}, "unusable"),
    ],
)
def test_bad_curves_are_explained(data, says):
    r = one(report(data=data), ModelSpec.from_params("124M", backward_ms=10))
    assert says in r.rationale and r.value == "keep the default"


def test_times_all_reduce_is_read_when_the_short_key_is_absent():
    rep = report(data={"times": {"all_reduce": bw_curve(20, 20)}, "world_size": 8})
    assert one(rep, exact_spec(backward_ms=100)).evidence["backward_ms"] == 100


def test_compute_bound_recommends_small_caps():
    # 256 MiB in 268 ms at 1 GB/s hides behind 600 ms of backward, except the last bucket's all-reduce:
    # 26 ms for the default's 25 MiB (4 % of the step), 1 ms for a 1 MiB one
    r = one(report(alpha_us=20, GBps=1), exact_spec(backward_ms=600, forward_ms=0))
    assert r.value == 1
    pts = dict(r.data["points"])
    assert pts[1] < pts[25] < pts[100] < pts[500]
    assert r.evidence["recommended_exposed_comm_ms"] == pytest.approx(1.07, abs=0.05)
    assert r.evidence["default_regret_pct"] > MARGIN * 100
    assert "compute-bound" in r.rationale


def test_communication_bound_with_large_alpha_recommends_large_caps():
    # 5 ms per call (a slow, far network): 25 MiB buckets pay that 11 times, larger ones fewer
    r = one(report(alpha_us=5000, GBps=1), exact_spec(backward_ms=20))
    assert isinstance(r.value, int) and r.value >= 50
    ev = r.evidence
    assert ev["recommended_step_ms"] < ev["default_step_ms"]
    assert ev["recommended_buckets"] < ev["default_buckets"]
    assert "communication-bound" in r.rationale
    assert r.snippet.endswith(f"model = DDP(model, device_ids=[local_rank], bucket_cap_mb={r.value})")
    # the smallest cap within the margin: the next smaller swept cap is outside it
    pts = dict(r.data["points"])
    smaller = max(c for c in CAPS_MB if c < r.value)
    assert pts[smaller] > ev["best_step_ms"] * (1 + MARGIN)
    assert pts[r.value] <= ev["best_step_ms"] * (1 + MARGIN)


def test_keep_the_default_when_it_is_within_the_margin():
    # everything hides behind a long backward: every cap is within a hair of the best
    r = one(report(alpha_us=10, GBps=100), exact_spec(backward_ms=2000))
    assert r.value == "keep the default"
    assert "bucket_cap_mb left at its default" in r.snippet and "bucket_cap_mb=" not in r.snippet
    assert r.evidence["default_regret_pct"] <= MARGIN * 100


def test_evidence_and_data_shapes():
    r = one(report(alpha_us=300, GBps=2), exact_spec(backward_ms=50))
    ev = r.evidence
    for key in (
        "default_step_ms",
        "recommended_step_ms",
        "default_exposed_comm_ms",
        "recommended_exposed_comm_ms",
        "alpha_us",
        "beta_GBps",
        "world_size",
        "backward_time",
        "margin_pct",
    ):
        assert key in ev
    assert ev["alpha_us"] == pytest.approx(300, rel=0.01) and ev["beta_GBps"] == pytest.approx(2, rel=0.01)
    assert ev["backward_time"] == "given" and ev["world_size"] == 8
    assert r.data["unit_x"] == "MiB" and r.data["unit_y"] == "ms"
    assert [p[0] for p in r.data["points"]] == list(CAPS_MB)
    assert all(p[1] > 0 for p in r.data["points"])
    json.dumps(r.to_dict())  # goes into the JSON report as is


def test_unknown_backward_is_assumed_said_and_lowers_confidence():
    rep = report(alpha_us=300, GBps=2)
    known = one(rep, exact_spec(backward_ms=120))
    guessed = one(rep, exact_spec())
    order = ["low", "medium", "high"]
    assert order.index(guessed.confidence) < order.index(known.confidence)
    assert (
        guessed.evidence["backward_time"] == "assumed" and len(guessed.evidence["assumed_backward_ms"]) == 3
    )
    assert "No backward time was given" in guessed.rationale
    assert len(guessed.data["scenarios"]) == 3


def test_bare_count_lowers_confidence_against_exact_tensors():
    rep = report(alpha_us=300, GBps=2)
    exact = one(rep, exact_spec(backward_ms=120))
    count = one(rep, ModelSpec.from_params(256 * 2**18, backward_ms=120))
    order = ["low", "medium", "high"]
    assert order.index(count.confidence) < order.index(exact.confidence)
    assert "bare parameter count" in count.rationale


def test_gloo_snippet_has_no_device_ids_and_two_calls_in_flight():
    r = one(report(alpha_us=300, GBps=0.05, backend="gloo", world=2), exact_spec(64, backward_ms=300))
    assert "device_ids" not in r.snippet
    assert r.evidence["concurrent_all_reduces"] == 2


def test_ddp_flags_reach_snippet_and_rationale():
    spec = exact_spec(backward_ms=20, find_unused_parameters=True, gradient_as_bucket_view=True)
    r = one(report(alpha_us=5000, GBps=1), spec)
    assert "find_unused_parameters=True" in r.snippet and "gradient_as_bucket_view=True" in r.snippet
    assert "never rebuilds the buckets" in r.rationale


def test_old_torch_keeps_a_one_mib_first_bucket():
    spec = exact_spec(backward_ms=20)
    new = one(report(alpha_us=5000, GBps=1, torch="2.13.0"), spec)
    old = one(report(alpha_us=5000, GBps=1, torch="2.1.2"), spec)
    # same cap, but old torch adds a 1 MiB first bucket: one more 5 ms call
    assert old.value == new.value
    assert old.evidence["recommended_buckets"] == new.evidence["recommended_buckets"] + 1
    assert "torch >= 2.4" in new.rationale and "torch >= 2.4" not in old.rationale


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="caps_mb must be positive"):
        recommend(report(), exact_spec(), caps_mb=[0, 5])
    with pytest.raises(ValueError, match="margin must be a fraction"):
        recommend(report(), exact_spec(), margin=3)
