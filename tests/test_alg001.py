"""ALG001's pure halves: options, the rank-0 summary of recorded per-rank payloads, NCCL's log line."""

import pytest
from alg_payloads import MiB, alpha_beta, rank_payloads, world
from ddpdoctor.checks import alg001_nccl_algo as alg
from ddpdoctor.checks._algo_ab import nccl_read_algo

from ddpdoctor.core.report import Severity, Status
from ddpdoctor.registry import discover


def test_registered_in_the_full_suite_only():
    spec = next(s for s in discover() if s.code == "ALG001")
    assert spec.kind == "cluster" and spec.suites == ("full",)
    assert spec.budget_s >= 120


def test_gloo_does_not_apply_unless_test_mode():
    assert alg.plan_options({}, "gloo") is None
    test = alg.plan_options({"algo_backend": "gloo"}, "gloo")
    assert test["plan"]["backend"] == "gloo" and test["plan"]["sizes"] == [64 * 1024, 1 * MiB]


def test_nccl_defaults_sweep_and_ddp_buckets():
    got = alg.plan_options({}, "nccl")
    plan = got["plan"]
    assert plan["backend"] == "nccl" and plan["candidates"] == ["Ring", "Tree"] and plan["reps"] == 2
    assert plan["sizes"] == [1 * MiB, 4 * MiB, 16 * MiB, 25 * MiB, 64 * MiB, 256 * MiB]
    assert got["job_sizes_B"] == [1 * MiB, 25 * MiB]
    mine = alg.plan_options(
        {"algo_sizes": "25MiB,1MiB", "algo_candidates": "tree, nvls", "algo_reps": 3}, "nccl"
    )
    assert mine["plan"]["sizes"] == [1 * MiB, 25 * MiB] == mine["job_sizes_B"]
    assert mine["plan"]["candidates"] == ["Tree", "NVLS"] and mine["plan"]["reps"] == 3


def test_sizes_parse():
    assert alg.parse_sizes([1048576, "64KiB"]) == [65536, 1048576]
    assert alg.parse_sizes(1048577) == [1048576]  # whole float32 elements
    assert alg.parse_sizes("1 GiB") == [1 << 30]


@pytest.mark.parametrize(
    ("options", "backend", "message"),
    [
        ({"algo_backend": "mpi"}, "nccl", "algo_backend='mpi': expected nccl, or gloo"),
        ({"algo_backend": "nccl"}, "gloo", "needs the NCCL backend"),
        ({"algo_sizes": "lots"}, "nccl", "algo_sizes: 'lots' is not a size"),
        ({"algo_sizes": [2]}, "nccl", "at least 4 bytes"),
        ({"algo_sizes": ""}, "nccl", "is not a size"),
        ({"algo_sizes": []}, "nccl", "algo_sizes: no sizes given"),
        ({"algo_sizes": True}, "nccl", "algo_sizes: 'True' is not a size"),
        ({"algo_reps": 1}, "nccl", "algo_reps=1: expected a whole number from 2"),
        ({"algo_iters": "many"}, "nccl", "algo_iters='many'"),
        ({"algo_candidates": "Ring,Butterfly"}, "nccl", "unknown algorithm 'Butterfly'"),
        ({"algo_candidates": " , "}, "nccl", "name at least one algorithm"),
        ({"algo_launch_timeout_s": 0}, "nccl", "algo_launch_timeout_s=0"),
    ],
)
def test_bad_options_say_which_and_what(options, backend, message):
    with pytest.raises((ValueError, TypeError), match=message):
        alg.plan_options(options, backend)


def test_summary_of_a_gloo_run_is_skipped():
    s = alg.summarize({0: {"applies": False, "backend": "gloo"}, 1: {"applies": False, "backend": "gloo"}},
                      world(2, 2, "gloo"))  # fmt: skip
    assert s.final_status() is Status.SKIPPED
    assert s.summary == "skipped: NCCL_ALGO does not apply to gloo"
    assert s.data["applies"] is False and s.data["backend"] == "gloo"


def test_summary_takes_the_slowest_rank_and_computes_busbw():
    def t(arm, rep, size, rank):
        return 100.0 + size / 50e3 + (40.0 if rank == 5 else 0.0)

    s = alg.summarize(rank_payloads(t), world())
    assert s.final_status() is Status.PASSED and not s.findings
    rows = [x for x in s.data["results"] if x["arm"] == "Tree" and x["rep"] == 1 and x["size_B"] == 25 * MiB]
    assert len(rows) == 1 and rows[0]["time_us"] == pytest.approx(140.0 + 25 * MiB / 50e3)
    algbw = 25 * MiB / (rows[0]["time_us"] * 1e-6) / 1e9
    assert rows[0]["busbw_GBps"] == pytest.approx(algbw * 2 * 15 / 16, rel=1e-3)
    assert (
        s.data["arms"] == ["default", "Ring", "Tree"]
        and s.data["nnodes"] == 2
        and s.data["gpus_per_node"] == 8
    )
    assert set(s.data["busbw"]) == {"default", "Ring", "Tree"}
    assert s.data["children_saw"] == {"default": [None], "Ring": ["Ring"], "Tree": ["Tree"]}
    assert s.data["child_processes"] == 6 * 16
    assert "default vs Ring vs Tree at 3 sizes × 2 repetitions" in s.summary and "NCCL 2.21.5" in s.summary


def test_a_failed_arm_is_a_warning_with_the_log_tail_and_the_real_culprit():
    fail = {("Tree", 0, 3): "exit code 1", **{("Tree", 0, r): "stopped: the child of rank 3 failed"
                                              for r in range(16) if r != 3}}  # fmt: skip
    s = alg.summarize(rank_payloads(alpha_beta(50, 100), fail=fail), world())
    assert s.final_status() is Status.WARNING
    (f,) = s.findings
    assert "NCCL_ALGO=Tree failed in 1 of 2 repetitions (rank 3: exit code 1)" in f.message
    assert "rank 3 log" in f.evidence["log_tail"]
    (failure,) = s.data["failures"]
    assert (failure["arm"], failure["rep"], failure["rank"], failure["error"]) == (
        "Tree",
        0,
        3,
        "exit code 1",
    )
    assert failure["log_tail"] == "rank 3 log: NCCL WARN something"
    assert failure["errors"]["0"] == "stopped: the child of rank 3 failed" and len(failure["errors"]) == 16
    assert {(x["arm"], x["rep"]) for x in s.data["results"]} == {
        ("default", 0),
        ("Ring", 0),
        ("default", 1),
        ("Ring", 1),
        ("Tree", 1),
    }


def test_children_that_miss_their_nccl_algo_invalidate_the_ab():
    s = alg.summarize(rank_payloads(alpha_beta(50, 100), env_override={("Ring", 2): None}), world())
    assert s.final_status() is Status.FAILED
    assert any("did not see NCCL_ALGO=Ring" in f.message and f.severity is Severity.ERROR for f in s.findings)


def test_nccl_reading_another_value_is_reported():
    payloads = rank_payloads(alpha_beta(50, 100))
    for p in payloads.values():
        for launch in p["launches"]:
            launch["nccl_read_algo"] = {"default": "Ring", "Ring": "ring", "Tree": "Ring"}[launch["arm"]]
    s = alg.summarize(payloads, world())
    msgs = {f.message: f.severity for f in s.findings}
    assert msgs == {
        "NCCL reports NCCL_ALGO=Ring for the default arm (no NCCL_ALGO): that arm did not measure what it says":
        Severity.WARNING,
        "NCCL reports NCCL_ALGO=Ring for the NCCL_ALGO=Tree arm: that arm did not measure what it says":
        Severity.ERROR,
    }  # fmt: skip


def test_nothing_measured_is_an_error():
    fail = {(arm, rep, r): "timed out after 90 s" for arm in ("default", "Ring", "Tree") for rep in (0, 1)
            for r in range(16)}  # fmt: skip
    s = alg.summarize(rank_payloads(alpha_beta(50, 100), fail=fail), world())
    assert s.final_status() is Status.FAILED and s.summary == "no arm measured"
    assert any(f.message == "no NCCL_ALGO arm could be measured" for f in s.findings)


def test_a_missing_rank_is_named():
    payloads = rank_payloads(alpha_beta(50, 100))
    payloads[7] = None
    s = alg.summarize(payloads, world())
    assert any(f.message == "ranks [7] returned no A/B data" for f in s.findings)


def test_nccls_own_log_line():
    log = "node0:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Tree\nother\n"
    assert nccl_read_algo(log) == "Tree"
    assert nccl_read_algo("NCCL INFO NCCL_PROTO set by environment to Simple") is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sizes", "1MiB"], "argument --sizes: '1MiB': expected comma-separated byte counts"),
        (["--sizes", "2"], "every size must be at least 4 bytes"),
        (["--sizes", "1024", "--rank", "3"], "--rank 3 is outside 0..1"),
        (["--sizes", "1024", "--iters", "0"], "--iters must be >= 1"),
    ],
)
def test_the_probe_refuses_bad_arguments(args, message):
    import subprocess
    import sys

    base = ["--host", "127.0.0.1", "--port", "1", "--prefix", "p/", "--rank", "0", "--world-size", "2",
            "--backend", "gloo", "--out", "/nonexistent/x.json"]  # fmt: skip
    p = subprocess.run([sys.executable, "-m", "ddpdoctor.checks._algo_probe", *base, *args],
                       check=False, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode == 2 and message in p.stderr, p.stderr
