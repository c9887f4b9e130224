"""Issue 22 and 23 end to end on gloo (torchrun, one machine): certain deadlocks named after --confirm
with the default --hang-after (300 s), crashes named with their cause, and healthy jobs -- a
straggler, a long rank-0 checkpoint ending in a barrier -- finishing untouched with their own code.
Assertions are on behaviour (culprit rank, operation, sequence number, path:line, exit code), never
on speed: the timings are benchmarks/hang_certain_time.py's."""

from __future__ import annotations

import json

import pytest

from ._watch_run import leftovers, location, torchrun, watch

pytestmark = pytest.mark.slow
DEFAULT = 300  # --hang-after's default: a certain verdict must not wait for it


def _certain(run, kind: str) -> dict:
    assert leftovers(run.dumps) == [], run.out
    assert run.rc == 1, run.out
    w = json.loads((run.dumps / "watch.json").read_text())
    assert w["outcome"] == "hang" and w["certain"]["kind"] == kind, w
    # named long before --hang-after: the wait at capture is a few seconds, not 300
    assert w["trigger"]["waiting_s"] < DEFAULT / 2
    assert run.diag["why"].startswith("certain"), run.diag["why"]
    assert "Hang diagnosis:" in run.out
    return w


def test_barrier_vs_all_reduce_is_certain(tmp_path):
    run = watch(tmp_path, torchrun("barrier_rank0.py", 3), hang_after=DEFAULT)
    w = _certain(run, "mismatch_op")
    assert "rank 0 (" in w["certain"]["reason"] and "barrier #4" in w["certain"]["reason"]
    assert "all_reduce #4" in w["certain"]["reason"]
    d = run.diag
    assert d["culprit_ranks"] == [0] and (d["operation"], d["seq"]) == ("barrier", 4) or d["seq"] == 4
    assert location(run, 0) == "barrier_rank0.py:7"


def test_p2p_ring_is_certain(tmp_path):
    run = watch(tmp_path, torchrun("p2p_ring.py", 3), hang_after=DEFAULT)
    w = _certain(run, "p2p_cycle")
    assert "0\u21921\u21922\u21920" in w["certain"]["reason"]
    assert sorted(run.diag["culprit_ranks"]) == [0, 1, 2]
    for r in range(3):
        assert location(run, r) == "p2p_ring.py:7"


def test_new_group_by_some_ranks_is_certain(tmp_path):
    run = watch(tmp_path, torchrun("new_group_some.py", 3), hang_after=DEFAULT)
    w = _certain(run, "new_group")
    assert w["certain"]["ranks"] == [0, 1, 2]
    d = run.diag
    assert d["culprit_ranks"] == [0] and (d["operation"], d["seq"]) == ("all_reduce", 2)
    assert run.rank(0)["state"] == "blocked in new_group"
    assert location(run, 0) == "new_group_some.py:12"


def test_rank_that_exits_early_is_named_with_its_exit(tmp_path):
    """sys.exit(0) in rank 1: on gloo its closed sockets end the others' all_reduce #3 at once (a
    crash) or they wait on (a certain hang: a member has ended); either way rank 1 is the culprit,
    named as having exited with code 0."""
    run = watch(tmp_path, torchrun("rank_exits.py", 3), hang_after=DEFAULT)
    assert leftovers(run.dumps) == [], run.out
    assert run.rc == 1, run.out
    d = run.diag
    assert d["culprit_ranks"] == [1], d["verdict"]
    assert "rank 1" in d["verdict"] and "exited with code 0" in d["verdict"]
    w = json.loads((run.dumps / "watch.json").read_text())
    assert w["ends"]["1"]["how"] == "exit" and w["exit_codes"]["1"] == 0
    assert w["ends"]["1"]["last_seq"] == {"default_pg": 2}  # it entered all_reduce #1 and #2 only


def test_rank_raising_keeps_its_traceback_and_floods_nothing(tmp_path):
    run = watch(tmp_path, torchrun("rank_raises.py", 2), hang_after=DEFAULT)
    assert leftovers(run.dumps) == [], run.out
    assert "Error in sys.excepthook" not in run.out and "RecursionError" not in run.out
    assert run.out.count("ValueError: bad batch in step 2") >= 1
    assert run.out.count("[rank1]: ValueError: bad batch in step 2") == 1  # the user's, once
    assert "SignalException" not in run.out
    d = run.diag
    assert d["culprit_ranks"] == [1] and "ValueError" in d["verdict"]
    assert location(run, 1) == "rank_raises.py:8"
    assert "Crash diagnosis:" in run.out and "Hang diagnosis:" not in run.out
    w = json.loads((run.dumps / "watch.json").read_text())
    assert w["ends"]["1"]["how"] == "exception" and w["exit_codes"]["1"] == 1


def test_rank_crashing_before_its_first_collective_is_diagnosed(tmp_path):
    run = watch(tmp_path, torchrun("crash_after_init.py", 2), hang_after=DEFAULT)
    assert leftovers(run.dumps) == [], run.out
    assert run.rc == 1, run.out
    assert "cannot read the evidence" not in run.out
    d = run.diag
    assert d["culprit_ranks"] == [1] and "RuntimeError: config file missing" in d["verdict"]
    assert location(run, 1) == "crash_after_init.py:8"
    assert (d["operation"], d["seq"]) == ("barrier", 1)


@pytest.mark.parametrize("hang_after", [6, DEFAULT])
def test_healthy_straggler_finishes_with_its_own_code(tmp_path, hang_after):
    """Rank 1 computes 4 s longer every step: rank 0 waits 4 s in each of 4 all_reduces (16 s in all,
    more than --hang-after 6, but never 6 s in one): not a hang, and never certain."""
    env = {"LAG_S": "4", "STEPS": "4"}
    run = watch(tmp_path, torchrun("straggler.py", 2), hang_after=hang_after, env=env, timeout=240)
    assert leftovers(run.dumps) == [], run.out
    assert run.rc == 0, run.out  # the job's own code
    assert "diagnosis" not in run.out and "certain" not in run.out


def test_long_checkpoint_on_rank0_ending_in_a_barrier_finishes(tmp_path):
    env = {"CKPT_S": "10"}
    run = watch(tmp_path, torchrun("checkpoint_rank0.py", 3), hang_after=DEFAULT, env=env, timeout=240)
    assert leftovers(run.dumps) == [], run.out
    assert run.rc == 0, run.out
    assert "diagnosis" not in run.out


def test_uneven_all_gather_without_verify_names_the_refused_call(tmp_path):
    """gloo checks all_gather's sizes before Flight Recorder records the call: the rank it refuses
    did call it; the finding names the op, its number, the other rank's size and gloo's words."""
    run = watch(tmp_path, torchrun("verify_uneven_gather.py", 2), hang_after=DEFAULT)
    assert leftovers(run.dumps) == [], run.out
    assert run.rc == 1, run.out
    d = run.diag
    assert (d["kind"], d["operation"], d["seq"]) == ("mismatch_refused", "all_gather", 2)
    assert d["culprit_ranks"] == [1]
    details = " ".join(d["findings"][0]["details"])
    assert "100 Float on rank 0" in details and "expected (101), got (100)" in details
    assert location(run, 1) == "verify_uneven_gather.py:9"
