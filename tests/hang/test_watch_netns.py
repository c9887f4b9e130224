"""`ddpdoctor watch` on two network-namespace nodes (one rank each, own hostnames): every node's watch
gets every rank's evidence through the job's store and prints the same diagnosis, naming hosts."""

from __future__ import annotations

import json

import pytest
from support.testbed import NetBed, netns_available

from ._watch_run import leftovers, location, watch_nodes

NETNS_OK, NETNS_WHY = netns_available()
pytestmark = [pytest.mark.slow, pytest.mark.netns,
              pytest.mark.skipif(not NETNS_OK, reason=NETNS_WHY or "network namespaces unavailable")]


def _run(tmp_path, script, **kw):
    with NetBed(2) as bed:
        runs = watch_nodes(bed, tmp_path, script, **kw)
    for run in runs:
        assert leftovers(run.dumps) == [], run.out
    return runs


def _both_hang(runs):
    for run in runs:
        assert run.rc == 1, run.out
        assert sorted(p.name for p in run.dumps.glob("rank-*.json")) == ["rank-0.json", "rank-1.json"]
        assert run.rank(0)["host"] == "ddpd-node0" and run.rank(1)["host"] == "ddpd-node1"
    assert runs[0].diag["verdict"] == runs[1].diag["verdict"]  # one diagnosis, on every node


def test_barrier_rank0_only_across_nodes(tmp_path):
    runs = _run(tmp_path, "barrier_rank0.py")
    _both_hang(runs)
    for run in runs:
        d = run.diag
        assert d["culprit_ranks"] == [0] and (d["kind"], d["seq"]) == ("mismatch_op", 4)
        assert (run.rank(0)["operation"], location(run, 0)) == ("barrier", "barrier_rank0.py:7")
        assert (run.rank(1)["operation"], location(run, 1)) == ("all_reduce", "barrier_rank0.py:20")
        assert "ddpd-node0" in run.out


def test_send_ring_across_nodes(tmp_path):
    runs = _run(tmp_path, "p2p_ring.py")
    _both_hang(runs)
    for run in runs:
        assert run.diag["kind"] == "p2p_cycle" and "0\u21921\u21920" in run.diag["verdict"]
        for r in (0, 1):
            assert run.rank(r)["state"] == f"blocked in send to rank {1 - r}"
            assert location(run, r) == "p2p_ring.py:7"


def test_uneven_loops_across_nodes(tmp_path):
    runs = _run(tmp_path, "uneven_steps.py")
    _both_hang(runs)
    for run in runs:
        assert (run.diag["kind"], run.diag["seq"]) == ("mismatch_op", 4)
        assert (run.rank(1)["operation"], location(run, 1)) == ("barrier", "uneven_steps.py:16")
        assert (run.rank(0)["operation"], location(run, 0)) == ("all_reduce", "uneven_steps.py:9")


def test_rank_stuck_in_python_across_nodes(tmp_path):
    runs = _run(tmp_path, "python_stuck.py")
    _both_hang(runs)
    for run in runs:
        d = run.diag
        assert d["culprit_ranks"] == [1] and (d["operation"], d["seq"]) == ("all_reduce", 2)
        assert run.rank(1)["kind"] == "python" and location(run, 1) == "python_stuck.py:10"


def test_rank_killed_on_node1(tmp_path):
    node0, node1 = _run(tmp_path, "rank_killed.py")
    assert node0.rc == 1, node0.out
    d = node0.diag
    assert d["culprit_ranks"] == [1] and d["missing_ranks"] == [1]
    assert (d["operation"], d["seq"]) == ("all_reduce", 4)
    assert location(node0, 0) == "rank_killed.py:14"
    record = json.loads((node0.dumps / "watch.json").read_text())
    assert record["hosts"]["1"] == "ddpd-node1"  # the lost rank's host is known on node 0
    # node 1's only rank was killed: it has no evidence, and says which rank and host it lost
    assert node1.rc == 1 and "1 (ddpd-node1)" in node1.out, node1.out


def test_healthy_slow_job_across_nodes(tmp_path):
    runs = _run(tmp_path, "healthy_slow.py", hang_after=2, env={"COMPUTE_S": "4", "STEPS": "2"})
    for run in runs:
        assert run.rc == 0, run.out
        assert "ddpdoctor watch:" not in run.out
        assert not run.dumps.exists()


def test_certain_deadlock_across_nodes_at_default_hang_after(tmp_path):
    """Rank 0 (node 0) in barrier #4, rank 1 (node 1) in all_reduce #4: each node's first rank copies
    the other node's published wait from the store, a watch calls it certain after --confirm (not
    after --hang-after 300), and both nodes print the same diagnosis."""
    runs = _run(tmp_path, "barrier_rank0.py", hang_after=300, timeout=240)
    _both_hang(runs)
    kinds = []
    for run in runs:
        w = json.loads((run.dumps / "watch.json").read_text())
        kinds.append((w.get("certain") or {}).get("kind"))
        assert run.diag["culprit_ranks"] == [0] and run.diag["seq"] == 4
        assert (run.rank(0)["operation"], location(run, 0)) == ("barrier", "barrier_rank0.py:7")
    assert "mismatch_op" in kinds, kinds  # at least the node that called it says why


def test_verify_names_an_uneven_all_gather_on_every_node(tmp_path):
    """watch --verify across nodes: the fingerprints meet in the job's store (node 0's launcher); every
    node's watch names the mismatch, the sequence number, the ranks' shapes and path:line."""
    runs = _run(tmp_path, "verify_uneven_gather.py", hang_after=300, extra=("--verify",))
    for run in runs:
        assert run.rc == 1, run.out
        d = run.diag
        assert (d["kind"], d["operation"], d["seq"]) == ("mismatch_size", "all_gather", 2), run.out
        assert "rank 0 calls all_gather float32[100] at verify_uneven_gather.py:9" in d["verdict"]
        assert "rank 1 calls all_gather float32[101] at verify_uneven_gather.py:9" in d["verdict"]
        assert sorted(d["culprit_ranks"]) == [0, 1]


def test_verify_names_a_forward_run_on_one_node_only(tmp_path):
    """The ranks' forward counts meet in the store at destroy_process_group: both nodes' watches
    compare both ranks."""
    runs = _run(tmp_path, "verify_forward_rank0.py", hang_after=300, extra=("--verify",))
    for run in runs:
        assert run.rc == 0, run.out
        (f,) = run.diag["verify"]
        assert f["kind"] == "forward_some_ranks" and f["ranks"] == [0] and f["other_ranks"] == [1]
        assert f["file"].endswith("verify_forward_rank0.py") and f["line"] == 14 and f["steps"] == [3]
