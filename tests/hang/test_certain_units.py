"""The pure parts behind issue 22/23 without torchrun: which stalls are certain, the confirmation
window, --hang-after auto's rhythm, faulthandler reports, the one-continuous-wait rule, evidence in
every state a rank can be in, and watch's flag checks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ddpdoctor.model.hang.certain import Confirmer, WaitState, certain
from ddpdoctor.model.hang.ends import parse_fault
from ddpdoctor.model.hang.evidence import RankEnd, rank_from_dict, watch_from_dict
from ddpdoctor.model.hang.pending import Rhythm, StackWaitTracker

S = 1_000_000_000


def w(rank, op, seq=None, since=0, **kw):
    return WaitState(rank=rank, operation=op, since_ns=since, seq=seq, **kw)


def test_different_collectives_at_one_sequence_number_are_certain():
    waits = {0: w(0, "barrier", 10), 1: w(1, "all_reduce", 10), 2: w(2, "all_reduce", 10)}
    c = certain(waits, {}, 3)
    assert c.kind == "mismatch_op" and c.ranks == (0, 1, 2)
    assert "rank 0 waits in barrier #10 while ranks 1, 2 wait in all_reduce #10" in c.reason
    assert "can never match" in c.reason


def test_different_sequence_numbers_in_one_group_are_certain_but_not_across_groups():
    assert certain({0: w(0, "all_reduce", 5), 1: w(1, "all_reduce", 6)}, {}, 2).kind == "mismatch_seq"
    other = {0: w(0, "all_reduce", 5), 1: w(1, "all_reduce", 6, group="group 1")}
    assert certain(other, {}, 2) is None


def test_everyone_in_the_same_collective_waiting_for_a_computing_rank_is_not_certain():
    # rank 2 is computing (no wait published): a straggler or a stalled loader, only time tells
    assert certain({0: w(0, "all_reduce", 4), 1: w(1, "all_reduce", 4)}, {}, 3) is None


def test_p2p_cycle_is_certain_and_a_matching_pair_is_not():
    ring = {0: w(0, "send", peer=1), 1: w(1, "send", peer=2), 2: w(2, "send", peer=0)}
    c = certain(ring, {}, 3)
    assert c.kind == "p2p_cycle" and "0\u21921\u21922\u21920" in c.reason
    assert certain({0: w(0, "send", peer=1), 1: w(1, "recv", peer=0)}, {}, 2) is None


def test_a_member_that_ended_before_the_collective_makes_it_certain():
    end = RankEnd(1, "exit", 0, last_seq={"default_pg": 2})
    c = certain({0: w(0, "all_reduce", 3)}, {1: end}, 2)
    assert c.kind == "member_ended" and "rank 1, a member, exited with code 0" in c.reason
    # it ended after entering this very collective: its part may be done
    assert certain({0: w(0, "all_reduce", 2)}, {1: end}, 2) is None
    # a sub-group the ended rank is not in
    sub = w(0, "all_reduce", 3, group="group 1", members=(0, 2))
    assert certain({0: sub}, {1: end}, 3) is None


def test_new_group_by_some_ranks_while_others_sit_in_a_world_collective():
    waits = {0: w(0, "new_group"), 1: w(1, "all_reduce", 2), 2: w(2, "all_reduce", 2)}
    c = certain(waits, {}, 3)
    assert c.kind == "new_group" and "must be called by every rank" in c.reason
    # use_local_synchronization: only the new group's members must call it
    local = {0: w(0, "new_group", members=(0, 2)), 1: w(1, "all_reduce", 2)}
    assert certain(local, {}, 3) is None


def test_confirmation_needs_the_same_finding_unchanged():
    cf = Confirmer(3.0)
    waits = {0: w(0, "barrier", 4, since=1 * S), 1: w(1, "all_reduce", 4, since=1 * S)}
    found = certain(waits, {}, 2)
    assert cf.update(found, 10 * S) is None
    assert cf.update(found, 12 * S) is None
    # a moment's skew: rank 1 moved on to a new wait, the clock starts again
    moved = certain({0: waits[0], 1: w(1, "all_reduce", 4, since=12 * S)}, {}, 2)
    assert cf.update(moved, 12 * S) is None
    assert cf.update(moved, 15 * S) is moved
    assert cf.update(None, 16 * S) is None


def test_rhythm_sets_the_auto_threshold_never_below_the_floor():
    r = Rhythm()
    for i in range(20):  # one completion every 0.5 s
        r.update({"0": {"last_completed_collective": str(i)}}, int(i * 0.5 * S))
    assert r.usual_s() == pytest.approx(0.5)
    assert r.threshold_s(60, 10) == 60  # 10 x 0.5 s is below the floor
    r.update({"0": {"last_completed_collective": "40"}}, int(29.5 * S))  # a 20 s gap (evaluation)
    assert r.longest_gap_s == pytest.approx(20.0)
    assert r.threshold_s(60, 10) == pytest.approx(200.0)


def test_one_continuous_wait_never_sums_calls_at_the_same_line():
    """The straggler of issue 23: each all_reduce at one line waits 6 s and completes. A key made of
    the frame object (not its address) tells the calls apart, so no wait is longer than one call."""

    class FakeFrame:  # a new object per call, as Python makes a new frame per call
        pass

    tr = StackWaitTracker()
    for call in range(4):
        f = FakeFrame()
        start = call * 6 * S
        assert tr.update((f, 20, 5), "all_reduce", start).since_ns == start
        assert tr.update((f, 20, 5), "all_reduce", start + 5 * S).waiting_s(start + 5 * S) == 5.0


FAULT = """Fatal Python error: Aborted

Thread 0x00007f1 (most recent call first):
  File "/u/ddpdoctor/runtime/rank_agent.py", line 300 in _run
  File "/usr/lib/python3.11/threading.py", line 975 in run

Current thread 0x00007f2 (most recent call first):
  File "/t/torch/distributed/distributed_c10d.py", line 4200 in all_gather
  File "/w/train.py", line 12 in gather_sizes
  File "/w/train.py", line 30 in <module>

Extension modules: torch._C (total: 1)
"""


def test_faulthandler_report_gives_the_signal_and_the_main_stack():
    f = parse_fault(FAULT)
    assert (f.signal, f.signum) == ("SIGABRT", 6)
    assert f.frames[-1] == ("/t/torch/distributed/distributed_c10d.py", 4200, "all_gather")
    assert f.frames[0] == ("/w/train.py", 30, "<module>")
    assert parse_fault("") is None and parse_fault("nothing fatal here") is None


def _doc(**kw):
    d = {"format": "ddpdoctor-hang-evidence", "version": 1, "rank": 1, "world_size": 2, "reason": "crash",
         "threads": [], "exception": {"type": "RuntimeError", "message": "config", "frames": []}}  # fmt: skip
    d.update(kw)
    return d


@pytest.mark.parametrize("fr", [None, {"version": "2.10", "pg_config": {}, "pg_status": {}}, {"version": "2.10"}])
def test_evidence_of_a_rank_without_entries_or_process_group_is_read(fr):
    ev = rank_from_dict(_doc(flight_recorder=fr), "rank-1.json")
    assert ev.rank == 1 and (ev.flight_recorder is None or ev.flight_recorder.entries == ())


def test_watch_record_carries_each_rank_end():
    rec = {"format": "ddpdoctor-hang-watch", "version": 1, "outcome": "crash", "exit_codes": {"1": -6},
           "ends": {"1": {"how": "signal", "code": 6, "detail": "SIGABRT", "last_seq": {"default_pg": 3}}},
           "certain": {"kind": "member_ended", "reason": "x"}}  # fmt: skip
    info = watch_from_dict(rec, "watch.json")
    assert info.ends[1] == RankEnd(1, "signal", 6, "SIGABRT", {"default_pg": 3})
    assert info.ends[1].exit_code == -6 and info.ends[1].text() == "was killed by SIGABRT"
    assert info.certain["kind"] == "member_ended"


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--hang-after", "0.001"], "at least 1"),
        (["--hang-after", "inf"], "finite"),
        (["--hang-after", "nan"], "finite"),
        (["--collect-timeout", "nan"], "--collect-timeout"),
        (["--collect-timeout", "inf"], "--collect-timeout"),
        (["--confirm", "0"], "--confirm"),
        (["--dumps", "/proc/ddpdoctor-cannot-be-here/x"], "not writable"),
    ],
)
def test_bad_flags_exit_2_and_say_why(flags, says, tmp_path):
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "watch", *flags, "--", sys.executable, "-c", "pass"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert says in p.stderr


def test_hang_after_auto_is_accepted(tmp_path):
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "watch", "--hang-after", "auto", "--json",
                        str(tmp_path / "w.json"), "--", sys.executable, "-c", "pass"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "w.json").read_text())["hang_after_auto"] is True
