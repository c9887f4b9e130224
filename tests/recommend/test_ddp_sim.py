"""The overlap simulator on cases worked out by hand, and its bad inputs."""

from __future__ import annotations

import pytest

from ddpdoctor.model.tuning.ddp_buckets import (
    MIB,
    GradTensor,
    canonical_dtype,
    ddp_buckets,
    ready_times,
    run_calls,
    simulate_step,
    sweep,
)

ONE_MIB_FP32 = MIB // 4  # elements


def _equal(n: int, numel: int = ONE_MIB_FP32, dtype: str = "fp32") -> list[GradTensor]:
    return [GradTensor(numel, dtype) for _ in range(n)]


def alpha_beta(alpha_s: float, bytes_per_s: float):
    return lambda size_B: alpha_s + size_B / bytes_per_s


def test_ready_times_spread_backward_in_reverse_registration_order():
    ts = [GradTensor(100), GradTensor(300), GradTensor(600)]
    # ready order 2, 1, 0: 600/1000, then 900/1000, then all of it
    assert ready_times(ts, 10.0) == pytest.approx([10.0, 9.0, 6.0])


def test_one_channel_runs_calls_one_after_another():
    spans = run_calls([1, 2, 3, 4], [1.5] * 4, [0.0] * 4, channels=1)
    assert spans == [(1, 2.5), (2.5, 4.0), (4.0, 5.5), (5.5, 7.0)]


def test_two_channels_share_the_link_but_overlap_latency():
    # two pure-bandwidth calls launched together: each gets half the link, both end at 2
    assert run_calls([0, 0], [1, 1], [0, 0], channels=2) == [(0, 2), (0, 2)]
    # two pure-latency calls overlap completely
    assert run_calls([0, 0], [1, 1], [1, 1], channels=2) == [(0, 1), (0, 1)]
    # a third call waits for a free worker (FIFO), then has the link alone
    spans = run_calls([0, 0, 0], [1, 1, 1], [0, 0, 0], channels=2)
    assert spans[2] == pytest.approx((2, 3))
    # 0.5 latency + 0.5 bandwidth each, the second launched at 0.25
    s = run_calls([0, 0.25], [1, 1], [0.5, 0.5], channels=2)
    # first alone on the link 0.5..0.75 (0.25 done), shared 0.75..1.25 (0.25 more), done at 1.25;
    # second: latency to 0.75, shared until 1.25 (0.25 done), alone 1.25..1.5
    assert s == [pytest.approx((0, 1.25)), pytest.approx((0.25, 1.5))]


def test_hand_computed_step_four_buckets():
    ts = _equal(4)
    # cap 1 MiB: one tensor per bucket, ready at 1, 2, 3, 4 s; each all-reduce 1.5 s, serialized
    sim = simulate_step(ts, 1, lambda b: 1.5, backward_s=4.0, forward_s=0.5)
    assert sim.bucket_sizes_B == [MIB] * 4
    assert sim.exposed_comm_s == pytest.approx(3.0)  # last ends at 7
    assert sim.step_s == pytest.approx(0.5 + 4 + 3)
    assert sim.comm_s == pytest.approx(6.0)
    # fast all-reduces (0.5 s): only the last bucket's is exposed
    assert simulate_step(ts, 1, lambda b: 0.5, backward_s=4.0).exposed_comm_s == pytest.approx(0.5)


def test_a_single_bucket_means_no_overlap():
    ts = _equal(8)
    curve = alpha_beta(1e-3, 1e9)
    sim = simulate_step(ts, 500, curve, backward_s=0.2, forward_s=0.1)
    assert sim.buckets == 1
    assert sim.exposed_comm_s == pytest.approx(curve(8 * MIB))
    assert sim.step_s == pytest.approx(0.1 + 0.2 + curve(8 * MIB))


def test_compute_bound_small_caps_win():
    ts = _equal(256)  # 256 MiB in 1 MiB tensors
    curve = alpha_beta(20e-6, 10e9)  # all of it in ~27 ms, against 1 s of backward
    sims = {s.cap_mb: s for s in sweep(ts, [1, 5, 25, 100, 500], curve, 1.0)}
    steps = [sims[c].step_s for c in (1, 5, 25, 100, 500)]
    assert steps == sorted(steps)
    # with cap 1 MiB only the last bucket's all-reduce is left after backward
    assert sims[1].exposed_comm_s == pytest.approx(curve(MIB), rel=1e-6)


def test_communication_bound_with_large_alpha_large_caps_win():
    ts = _equal(256)
    curve = alpha_beta(20e-3, 5e9)  # 20 ms per call: 256 small buckets cost 5 s of latency
    sims = {s.cap_mb: s for s in sweep(ts, [1, 5, 25, 100, 500], curve, 0.05)}
    steps = [sims[c].step_s for c in (1, 5, 25, 100)]
    assert steps == sorted(steps, reverse=True)
    assert sims[1].step_s > 5.0 and sims[100].step_s < 0.2


def test_first_bucket_is_one_mib_only_for_the_default_cap():
    ts = _equal(40)
    assert [b.size_B for b in ddp_buckets(ts, None)][:2] == [MIB, 25 * MIB]
    assert [b.size_B for b in ddp_buckets(ts, 25)][:1] == [25 * MIB]
    assert [b.size_B for b in ddp_buckets(ts, 25, first_bucket_B=MIB)][:2] == [MIB, 25 * MIB]


def test_gloo_channels_hide_latency_of_many_small_buckets():
    ts = _equal(64)
    curve = alpha_beta(2e-3, 1e9)
    one = simulate_step(ts, 1, curve, 0.01, channels=1, latency_s=2e-3)
    two = simulate_step(ts, 1, curve, 0.01, channels=2, latency_s=2e-3)
    assert two.step_s < one.step_s
    # the bandwidth part cannot shrink: 64 MiB at 1 GB/s
    assert two.step_s > 64 * MIB / 1e9


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"cap_mb": 0}, "bucket_cap_mb must be a positive"),
        ({"cap_mb": -5}, "bucket_cap_mb must be a positive"),
        ({"cap_mb": "25"}, "bucket_cap_mb must be a positive"),
        ({"cap_mb": float("nan")}, "bucket_cap_mb must be a positive"),
        ({"backward_s": -1.0}, "backward_s must be a finite number >= 0"),
        ({"forward_s": float("inf")}, "forward_s must be a finite number >= 0"),
        ({"channels": 0}, "channels must be >= 1"),
    ],
)
def test_bad_simulation_inputs_are_named(kw, msg):
    args = {"cap_mb": 5, "backward_s": 1.0}
    args.update(kw)
    cap, backward = args.pop("cap_mb"), args.pop("backward_s")
    with pytest.raises(ValueError, match=msg):
        simulate_step(_equal(4), cap, alpha_beta(1e-4, 1e9), backward, **args)


def test_bad_model_inputs_are_named():
    with pytest.raises(ValueError, match="at least one gradient tensor"):
        ddp_buckets([], 25)
    with pytest.raises(ValueError, match="unknown gradient dtype 'int8'"):
        canonical_dtype("int8")
    assert canonical_dtype("torch.bfloat16") == "bf16" and canonical_dtype("Half") == "fp16"
    with pytest.raises(ValueError, match="every tensor index exactly once"):
        ddp_buckets(_equal(3), 1, order=[0, 0, 1])
