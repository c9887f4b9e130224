"""ALG001's fresh-process A/B for real, on gloo (test mode): 2 ranks on this machine through the CLI.

NCCL itself cannot run here (no GPU); these runs prove the plumbing the NCCL path uses: every arm and
repetition gets new child processes that form their own group through the check's store, see the
NCCL_ALGO they were given and return timings; a failing or hanging child is stopped and reported.
"""

import time

import pytest
from helpers import check, load, run_cli

pytestmark = pytest.mark.slow

ARGS = (
    "check",
    "--select",
    "ALG001",
    "-q",
    "--option",
    "algo_backend=gloo",
    "--option",
    "algo_sizes=65536,1048576",
)


def test_children_form_groups_see_their_nccl_algo_and_time_all_reduce(tmp_path):
    rj = tmp_path / "r.json"
    p = run_cli(*ARGS, "--json", str(rj), timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    alg = check(load(rj), "ALG001")
    assert alg["status"] == "passed", alg
    d = alg["data"]
    assert d["test_mode"] is True and d["backend"] == "gloo" and d["world_size"] == 2
    assert d["arms"] == ["default", "Ring", "Tree"]
    assert d["order"] == [[a, rep] for rep in (0, 1) for a in ("default", "Ring", "Tree")]
    assert d["children_saw"] == {"default": [None], "Ring": ["Ring"], "Tree": ["Tree"]}
    assert d["child_processes"] == 6 * 2  # a fresh process per rank, arm and repetition
    got = {(r["arm"], r["rep"], r["size_B"]) for r in d["results"]}
    assert got == {(a, rep, s) for a in d["arms"] for rep in (0, 1) for s in (65536, 1048576)}
    assert all(r["time_us"] > 0 and r["busbw_GBps"] > 0 for r in d["results"])
    assert d["failures"] == [] and d["stopped_early"] is None


def test_a_failing_and_a_hanging_child_are_stopped_and_reported(tmp_path):
    rj = tmp_path / "r.json"
    t0 = time.monotonic()
    p = run_cli(
        *ARGS, "--option", "algo_launch_timeout_s=20", "--json", str(rj), timeout=300,
        env={"DDPDOCTOR_TEST_PROBE_FAULT": "exit@Tree:rank=1;hang@Ring:rank=0"},
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    assert p.returncode == 0, p.stdout + p.stderr  # warnings only: the default arm was measured
    alg = check(load(rj), "ALG001")
    assert alg["status"] == "warning"
    d = alg["data"]
    by_arm = {}
    for f in d["failures"]:
        by_arm.setdefault(f["arm"], []).append(f)
    assert sorted(by_arm) == ["Ring", "Tree"]
    tree = by_arm["Tree"]
    assert [f["rep"] for f in tree] == [0, 1] and all(f["rank"] == 1 for f in tree)
    assert (
        tree[0]["error"] == "exit code 7"
        and "test fault exit for NCCL_ALGO=Tree on rank 1" in tree[0]["log_tail"]
    )
    # rank 0 did not wait out its timeout: rank 1's parent told it through the store
    assert tree[0]["errors"]["0"] == "stopped: the child of rank 1 failed"
    ring = by_arm["Ring"]
    assert all(any(e.startswith("timed out after") for e in f["errors"].values()) for f in ring)
    assert {(r["arm"], r["rep"]) for r in d["results"]} == {("default", 0), ("default", 1)}
    messages = " | ".join(f["message"] for f in alg["findings"])
    assert "NCCL_ALGO=Tree failed in 2 of 2 repetitions (rank 1: exit code 7)" in messages
    assert "NCCL_ALGO=Ring failed in 2 of 2 repetitions" in messages
    assert elapsed < 200
