"""The diagnosis on REAL evidence: gloo jobs with one bug each, recorded by Flight Recorder and stack
dumps (tests/fixtures/hang, see SOURCES.md). Each case asserts the culprit rank, the operation, its
sequence number and the culprit's path:line. No torch needed."""

from __future__ import annotations

import json
import pickle

import pytest

from ddpdoctor.commands.hang import analyse
from ddpdoctor.model.hang.analysis import HangDiagnosis
from ddpdoctor.model.hang.evidence import EvidenceError
from tests.hang.evidence_helpers import SCRIPTS, fixture


def _loc(name: str, line: int) -> str:
    return f"{SCRIPTS / name}:{line}"


def test_barrier_reached_by_rank0_only_through_a_chain_of_calls(tmp_path):
    d = analyse([fixture("barrier_rank0", tmp_path)])
    assert d.kind == "mismatch_op"
    assert d.seq == 4 and d.seq_kind == "collective" and d.group == "default_pg"
    assert d.culprit_ranks == [0]
    assert set(d.operation.split("/")) == {"barrier", "all_reduce"}
    assert d.waiting_ranks == [1, 2]
    c = d.rank(0)
    assert c.culprit and c.operation == "barrier" and c.seq == 4
    assert c.location == _loc("barrier_rank0.py", 9)
    # the call chain, innermost first: save_checkpoint <- maybe_save <- main
    assert [s.function for s in c.chain[:3]] == ["save_checkpoint", "maybe_save", "main"]
    assert c.chain[1].where == _loc("barrier_rank0.py", 14)
    # lint attached on the culprit's stack line it reports (lint names the rank-dependent call of
    # the helper, maybe_save's line 14, or the barrier itself): this is DDP301
    linted = [s for s in c.chain if s.lint]
    assert linted and [f["code"] for f in linted[0].lint] == ["DDP301"]
    assert "rank 0 only" in linted[0].lint[0]["message"]
    assert "different collectives at #4" in d.verdict and "barrier_rank0.py:9" in d.verdict
    assert d.crash is None  # barrier vs all_reduce hangs on gloo, it does not crash
    assert all(r.host == "vm" for r in d.ranks)


def test_send_ring_is_a_cycle(tmp_path):
    d = analyse([fixture("p2p_ring", tmp_path)])
    assert d.kind == "p2p_cycle" and d.seq_kind == "p2p" and d.operation == "send"
    assert d.culprit_ranks == [0, 1, 2]
    assert "a cycle 0\u21921\u21922\u21920" in d.verdict
    assert "every rank is blocked in send with no matching recv" in d.verdict
    for r in range(3):
        assert d.rank(r).location == _loc("p2p_ring.py", 9)
        assert d.rank(r).state == f"blocked in send to rank {(r + 1) % 3}"


def test_uneven_loops_the_rank_that_left_the_loop_is_the_culprit(tmp_path):
    d = analyse([fixture("uneven_steps", tmp_path)])
    assert d.kind == "mismatch_op" and d.seq == 4
    # 1 vs 1: the tie is broken by who still does what every rank did at #3 (all_reduce)
    assert d.culprit_ranks == [1]
    assert d.rank(1).operation == "barrier"
    assert d.rank(1).location == _loc("uneven_steps.py", 16)
    assert d.waiting_ranks == [0] and d.rank(0).location == _loc("uneven_steps.py", 11)
    # lint runs with the job's world size (2): it reports this divergence once, at the all_reduce
    # rank 0 waits in; the join shows it on that rank's line, culprit or not
    assert [f["code"] for f in d.rank(0).chain[0].lint] == ["DDP301"]
    assert "world size 2" in d.rank(0).chain[0].lint[0]["message"]


def test_rank_stuck_in_python_never_called_the_collective(tmp_path):
    d = analyse([fixture("python_stuck", tmp_path)])
    assert d.kind == "missing" and d.operation == "all_reduce" and d.seq == 2
    assert d.culprit_ranks == [2] and d.waiting_ranks == [0, 1]
    c = d.rank(2)
    assert c.kind == "python" and c.state == "in Python, in no collective"
    assert c.location == _loc("python_stuck.py", 12)
    assert [s.function for s in c.chain[:2]] == ["wait_for_data", "main"]
    assert d.verdict.startswith("rank 2 never called all_reduce #2")
    for r in (0, 1):
        w = d.rank(r)
        assert w.operation == "all_reduce" and w.seq == 2 and 3.5 < w.waiting_s < 6
    grid = d.grids[0]
    assert grid.cells[2] == ["done", "never"] and grid.cells[0] == ["done", "waiting"]


def test_size_mismatch_explains_the_gloo_crash(tmp_path):
    d = analyse([fixture("size_mismatch", tmp_path)])
    assert d.kind == "mismatch_size" and d.operation == "all_reduce" and d.seq == 2
    assert d.culprit_ranks == [0, 1]  # 10 vs 11 floats on two ranks: no majority to blame
    assert (
        "10 Float on rank 0" in d.findings[0].details[0] and "11 Float on rank 1" in d.findings[0].details[0]
    )
    assert d.rank(0).location == _loc("size_mismatch.py", 12)
    assert "explains the crash" in d.crash and "Received data size doesn't match" in d.crash
    assert d.watch["outcome"] == "crash" and d.watch["exit_codes"] == {"0": -6, "1": -15}


def test_rank_that_died_is_named_with_its_exception_and_line(tmp_path):
    d = analyse([fixture("rank_dies", tmp_path)])
    assert d.kind == "missing" and d.operation == "all_reduce" and d.seq == 3
    assert d.culprit_ranks == [1] and d.waiting_ranks == [0, 2]
    c = d.rank(1)
    assert c.kind == "died" and c.exception == "ValueError: corrupt sample in shard 1"
    assert c.location == _loc("rank_dies.py", 10) and c.chain[0].function == "load_batch"
    assert "died of ValueError" in d.verdict


def test_missing_rank_file_is_named_as_missing_evidence(tmp_path):
    ev = fixture("python_stuck", tmp_path)
    (ev / "rank-2.json").unlink()
    d = analyse([ev])
    assert d.missing_ranks == [2]
    assert d.culprit_ranks == [2] and d.seq == 2 and d.operation == "all_reduce"
    assert d.rank(2).kind == "missing" and "gave no evidence" in d.rank(2).state


def test_evidence_in_one_folder_per_node(tmp_path):
    ev = fixture("rank_dies", tmp_path)
    node1 = tmp_path / "node1"
    node1.mkdir()
    (ev / "rank-2.json").rename(node1 / "rank-2.json")
    d = analyse([ev, node1])
    assert d.culprit_ranks == [1] and d.waiting_ranks == [0, 2] and not d.missing_ranks


def test_diagnosis_json_round_trip(tmp_path):
    d = analyse([fixture("barrier_rank0", tmp_path)])
    doc = json.loads(json.dumps(d.to_dict()))
    assert doc["format"] == "ddpdoctor-hang-diagnosis" and doc["culprit_ranks"] == [0]
    back = HangDiagnosis.from_dict(doc)
    assert back.to_dict() == d.to_dict()
    assert [s.lint[0]["code"] for s in back.rank(0).chain if s.lint] == ["DDP301"]


def _torch_dumps(src, dest, fmt: str):
    """torch's own dump files (<prefix><rank>) from the Flight Recorder part of real evidence."""
    dest.mkdir()
    for r in range(3):
        fr = json.loads((src / f"rank-{r}.json").read_text())["flight_recorder"]
        data = json.dumps(fr).encode() if fmt == "json" else pickle.dumps(fr, protocol=2)
        (dest / f"nccl_trace_rank_{r}").write_bytes(data)
    return dest


def test_torch_flight_recorder_json_dumps(tmp_path):
    dumps = _torch_dumps(fixture("python_stuck", tmp_path), tmp_path / "fr", "json")
    d = analyse([dumps])
    assert d.kind == "missing" and d.culprit_ranks == [2] and d.seq == 2 and d.operation == "all_reduce"
    assert d.rank(2).location is None  # torch's dumps carry no Python stacks
    assert d.world_size == 3


def test_pickled_dumps_only_with_allow_pickle(tmp_path):
    dumps = _torch_dumps(fixture("python_stuck", tmp_path), tmp_path / "fr", "pickle")
    with pytest.raises(EvidenceError) as e:
        analyse([dumps])
    assert "nccl_trace_rank_0" in str(e.value) and "--allow-pickle" in str(e.value)
    d = analyse([dumps], allow_pickle=True)
    assert d.culprit_ranks == [2] and d.seq == 2


def test_real_torch_dumps_json_and_pickled_with_stack_traces(tmp_path):
    # written by torch itself (_dump_fr_trace_json / _dump_fr_trace with stack traces), see SOURCES.md
    ev = fixture("torch_dumps", tmp_path)
    for form, extra in (("json", {}), ("pickle", {"allow_pickle": True})):
        d = analyse([ev / form], **extra)
        assert d.kind == "missing" and d.operation == "all_reduce" and d.seq == 2, form
        assert d.culprit_ranks == [2] and d.waiting_ranks == [0, 1] and d.world_size == 3, form
        assert d.rank(2).state == "in no collective (torch's dump holds no Python stack)"
    # the pickled form carries the Python stack of each call: the waiting ranks' line
    assert d.rank(0).location.endswith("python_stuck.py:19") and d.rank(0).chain[0].function == "main"
    with pytest.raises(EvidenceError, match="--allow-pickle"):
        analyse([ev / "pickle"])


def test_allow_pickle_still_refuses_objects(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    dest = tmp_path / "fr"
    dest.mkdir()
    (dest / "nccl_trace_rank_0").write_bytes(pickle.dumps({"entries": [Evil()]}, protocol=2))
    with pytest.raises(EvidenceError, match="refusing to load"):
        analyse([dest], allow_pickle=True)


def test_two_nodes_one_folder_each_names_hosts(tmp_path):
    fixture("two_nodes", tmp_path)
    ev = tmp_path / "two_nodes"
    d = analyse([ev / "node0", ev / "node1"])
    assert d.kind == "missing" and d.operation == "all_reduce" and d.seq == 2
    assert d.culprit_ranks == [2] and d.waiting_ranks == [0, 1, 3]
    c = d.rank(2)
    assert c.host == "ddpd-node1" and c.location == _loc("python_stuck.py", 12)
    assert "rank 2 on ddpd-node1 is in Python" in d.verdict
    assert "rank 2 (ddpd-node1) did not" in d.findings[0].details[0]
    assert {r.host for r in d.ranks} == {"ddpd-node0", "ddpd-node1"}
    # one node's folder alone: the other node's ranks are missing evidence, not a wrong verdict
    d = analyse([ev / "node0"])
    assert d.missing_ranks == [2, 3] and d.culprit_ranks == [2, 3] and d.seq == 2


def test_a_folder_of_node_folders_stands_for_them(tmp_path):
    fixture("two_nodes", tmp_path)
    d = analyse([tmp_path / "two_nodes"])
    assert d.culprit_ranks == [2] and not d.missing_ranks and len(d.sources) == 4
