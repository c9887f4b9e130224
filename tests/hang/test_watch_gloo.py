"""`ddpdoctor watch` end to end on gloo: real torchrun jobs with the issue's bugs, each diagnosed to the
culprit rank, the operation and its sequence number, and the path:line; no process left behind."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import psutil
import pytest

from ._watch_run import leftovers, location, torchrun, watch, watch_argv

pytestmark = pytest.mark.slow


def _no_leftovers(run):
    assert leftovers(run.dumps) == [], run.out


def test_barrier_reached_by_rank0_only_through_a_chain_of_calls(tmp_path):
    run = watch(tmp_path, torchrun("barrier_rank0.py", 3))
    _no_leftovers(run)
    assert run.rc == 1, run.out
    d = run.diag
    assert d["culprit_ranks"] == [0]
    assert (d["kind"], d["seq"]) == ("mismatch_op", 4)  # barrier #4 against all_reduce #4
    assert (run.rank(0)["operation"], run.rank(0)["seq"]) == ("barrier", 4)
    assert location(run, 0) == "barrier_rank0.py:7"
    chain = [f"{s['function']}:{s['line']}" for s in run.rank(0)["chain"]]
    assert chain[:3] == ["save_checkpoint:7", "maybe_save:12", "main:21"]
    assert any(f["code"] == "DDP301" for s in run.rank(0)["chain"] for f in s["lint"])
    for r in (1, 2):  # the others wait in all_reduce #4 at the loop's line
        assert (run.rank(r)["operation"], run.rank(r)["seq"]) == ("all_reduce", 4)
        assert location(run, r) == "barrier_rank0.py:20"
    assert "barrier_rank0.py:7" in run.out  # printed, not only in the JSON
    assert sorted(p.name for p in run.dumps.iterdir()) == ["rank-0.json", "rank-1.json", "rank-2.json",
                                                         "watch.json"]


def test_ring_of_sends_is_a_cycle(tmp_path):
    run = watch(tmp_path, torchrun("p2p_ring.py", 3, launcher="module"))
    _no_leftovers(run)
    assert run.rc == 1, run.out
    d = run.diag
    assert d["kind"] == "p2p_cycle" and d["operation"] == "send"
    assert sorted(d["culprit_ranks"]) == [0, 1, 2]
    assert "0\u21921\u21922\u21920" in d["verdict"]
    for r in range(3):
        assert run.rank(r)["state"] == f"blocked in send to rank {(r + 1) % 3}"
        assert location(run, r) == "p2p_ring.py:7"


def test_uneven_loops_stop_matching(tmp_path):
    run = watch(tmp_path, torchrun("uneven_steps.py", 2))
    _no_leftovers(run)
    assert run.rc == 1, run.out
    d = run.diag
    # rank 1 ran 3 steps and went on to the final barrier; rank 0 is in its 4th all_reduce
    assert d["seq"] == 4 and d["kind"] == "mismatch_op"
    assert (run.rank(1)["operation"], location(run, 1)) == ("barrier", "uneven_steps.py:16")
    assert (run.rank(0)["operation"], location(run, 0)) == ("all_reduce", "uneven_steps.py:9")
    assert 1 in d["culprit_ranks"]


def test_rank_stuck_in_python_before_a_collective(tmp_path):
    run = watch(tmp_path, torchrun("python_stuck.py", 3))
    _no_leftovers(run)
    assert run.rc == 1, run.out
    d = run.diag
    assert d["culprit_ranks"] == [1]
    assert (d["operation"], d["seq"]) == ("all_reduce", 2)
    assert run.rank(1)["kind"] == "python"
    assert location(run, 1) == "python_stuck.py:10"
    assert sorted(d["waiting_ranks"]) == [0, 2]


def test_rank_killed_in_the_middle(tmp_path):
    # rank 1 dies once the others are in all_reduce #4 (ordered through the store); --hang-after 10
    # leaves a loaded machine room to deliver that death before the survivors' wait counts as a hang
    run = watch(tmp_path, torchrun("rank_killed.py", 3), hang_after=10)
    _no_leftovers(run)
    assert run.rc == 1, run.out  # torchrun's own code for a failed worker
    d = run.diag
    assert d["culprit_ranks"] == [1]
    assert d["missing_ranks"] == [1]
    assert (d["operation"], d["seq"]) == ("all_reduce", 4)
    for r in (0, 2):
        assert location(run, r) == "rank_killed.py:14"
    # torchrun ends the job when it sees the death, or watch first (certain: a member has ended)
    assert run.diag["watch"]["outcome"] in ("crash", "hang")
    assert "Crash diagnosis:" in run.out
    assert "SIGKILL" in run.diag["watch"]["ends"]["1"]
    # the survivors' helpers saw the exception they died of (before torchrun's SIGTERM, as a rule)
    died = [json.loads((run.dumps / f"rank-{r}.json").read_text()).get("exception") or {} for r in (0, 2)]
    assert any("by peer" in e.get("message", "") for e in died), died  # reset or closed by peer


def test_healthy_job_computing_longer_than_hang_after_is_not_a_hang(tmp_path):
    run = watch(tmp_path, torchrun("healthy_slow.py", 2), hang_after=2, env={"COMPUTE_S": "4", "STEPS": "2"})
    _no_leftovers(run)
    assert run.rc == 0, run.out
    assert run.seconds > 2 * 4  # it really computed longer than --hang-after between collectives
    assert "ddpdoctor watch:" not in run.out  # it said nothing: no hang, no crash
    assert not run.dumps.exists()


def test_rank_stopped_while_blocked_in_a_collective_leaves_evidence(tmp_path):
    """SIGTERM to a rank whose main thread is blocked in gloo (no Python handler can run there): the
    helper sees it through the wake-up fd, writes the evidence, and the rank still dies of SIGTERM."""
    dumps = tmp_path / "dumps"
    job = torchrun("slow_peer.py", 2)
    argv = watch_argv(60, dumps, tmp_path / "diag.json", job)
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen = []
        for line in p.stdout:
            seen.append(line)
            if "rank 0 enters all_reduce #2" in line:
                break
        time.sleep(1)  # rank 0 is blocked in all_reduce #2 by now, rank 1 asleep in Python
        _rank(p.pid, "0").send_signal(signal.SIGTERM)
        out = "".join(seen) + p.communicate(timeout=60)[0]
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert leftovers(dumps) == [], out
    ev0 = json.loads((dumps / "rank-0.json").read_text())
    assert ev0["reason"] == "exit"
    pending = [e for e in ev0["flight_recorder"]["entries"] if not e["retired"]]
    assert [(e["profiling_name"], e["collective_seq_id"]) for e in pending] == [("gloo:all_reduce", 2)]
    assert "exitcode  : -15" in out  # torchrun saw it die of SIGTERM, as without watch
    diag = json.loads((tmp_path / "diag.json").read_text())
    assert diag["culprit_ranks"] == [1] and (diag["operation"], diag["seq"]) == ("all_reduce", 2)
    assert next(r for r in diag["ranks"] if r["rank"] == 1)["location"].endswith("slow_peer.py:14")


def _rank(root_pid: int, rank: str) -> psutil.Process:
    for c in psutil.Process(root_pid).children(recursive=True):
        if c.environ().get("RANK") == rank and "slow_peer.py" in " ".join(c.cmdline()):
            return c
    raise AssertionError(f"rank {rank} not found")
