"""The recommended bucket_cap_mb moves the way theory says when the link gets faster or slower.

Regime tested: compute-bound (the all-reduce of all S bytes, S/β, is shorter than the backward B), gloo,
caps from 1 MiB. Buckets go out as they fill; a cap s is fine when two things hold:
- its all-reduces keep pace with the gradients: α + s/β ≤ s·B/S, i.e. s ≥ s_min = α / (B/S − 1/β);
- the last bucket's all-reduce, left after backward, is small against the step (forward F + B):
  s_last/β ≲ m·(F + B), i.e. s_last ≲ m·(F + B)·β, with m the margin (3 %).
Both edges widen the window as the bandwidth β grows. Here α·S/B is far below 1 MiB, so s_min stays under
the smallest swept cap; the recommendation is then the default when the default's last bucket (14 MiB
for this model) fits under the upper edge, and the smallest cap (1 MiB) when it does not. A faster link
can only move it from 1 MiB to the default, a slower one from the default to 1 MiB: the cap grows with β.
(Communication-bound, the window narrows from both sides as β grows, the smallest acceptable cap rising
as about α·β/m and the largest falling, so the value has no single direction there; not tested.)

The slow test measures the all-reduce curve for real with BW001 on a 2-node NetBed at two link rates
(the veth unshaped, ~0.25 GB/s for gloo on this machine, and tbf 200 Mbit/s) and asserts the strict move.
"""

from __future__ import annotations

import json

import pytest
from support.testbed import NetBed, netns_available

from ddpdoctor.core.report import CheckResult, Report
from ddpdoctor.core.run_info import RunInfo
from ddpdoctor.recommend.bucket_cap import recommend
from ddpdoctor.recommend.model_spec import ModelSpec

# 64 MiB of gradients in 1 MiB tensors; 4 s of backward: compute-bound down to 200 Mbit/s (2.7 s)
SPEC = {"tensors": [[f"w{i}", 2**18, "fp32"] for i in range(64)], "backward_ms": 4000, "forward_ms": 1000}


def _cap(rec) -> float:
    return 25 if rec.value == "keep the default" else rec.value


def _report(curve: dict, world: int = 2) -> Report:
    data = {"all_reduce": curve, "world_size": world, "backend": "gloo"}
    return Report(
        run=RunInfo(backend="gloo", world_size=world), checks=[CheckResult("BW001", "sweep", data=data)]
    )


def test_theory_on_synthetic_curves_cap_grows_with_bandwidth():
    """α = 1 ms, β from 25 MB/s to 10 GB/s: the recommended cap never shrinks as β grows; the slowest
    link gets the smallest cap, the fastest keeps the default."""
    spec = ModelSpec.from_dict(SPEC)
    caps = []
    for beta in (2.5e7, 5e7, 1e8, 1e9, 1e10):
        sizes = [2**k for k in range(10, 27, 2)]
        curve = {"unit_y": "s", "points": [[s, 1e-3 + s / beta] for s in sizes]}
        rec = recommend(_report(curve), spec)[0]
        assert rec.evidence["all_reduce_alone_ms"] < rec.evidence["backward_ms"]  # compute-bound
        caps.append(_cap(rec))
    assert caps == sorted(caps)
    assert caps[0] == 1 and caps[-1] == 25


NETNS_OK, NETNS_WHY = netns_available()


def _measure(rate_mbit: float | None, tmp_path) -> Report:
    out = tmp_path / f"rate{rate_mbit or 'full'}"
    out.mkdir()
    with NetBed(2) as bed:
        if rate_mbit:
            for i in (0, 1):
                bed.shape(i, rate_mbit=rate_mbit)
        args = [
            "--backend",
            "gloo",
            "--select",
            "BW001",
            "--option",
            "max_size=4194304",
            "--budget-scale",
            "3",
        ]
        results = bed.run_check(args, out, timeout=240)
    assert all(code in (0, 1) for code, _ in results), results
    return Report.from_dict(json.loads((out / "r0.json").read_text()))


@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.skipif(not NETNS_OK, reason=NETNS_WHY or "network namespaces unavailable")
def test_recommendation_moves_with_the_link_on_the_bed(tmp_path):
    spec = ModelSpec.from_dict(SPEC)
    fast_rep, slow_rep = _measure(None, tmp_path), _measure(200, tmp_path)
    fast, slow = recommend(fast_rep, spec)[0], recommend(slow_rep, spec)[0]
    # the shaping took: the slow link's bandwidth is a fraction of the fast one's
    assert slow.evidence["beta_GBps"] * 3 < fast.evidence["beta_GBps"], (fast.evidence, slow.evidence)
    # still the regime the theory above is about
    for rec in (fast, slow):
        assert rec.evidence["all_reduce_alone_ms"] < rec.evidence["backward_ms"], rec.evidence
    assert _cap(fast) > _cap(slow), (fast.value, slow.value, fast.data["points"], slow.data["points"])
