"""The diagnosis on synthetic evidence: the cases real gloo runs cannot produce on demand (wrapped
buffers, sub-groups, NCCL p2p, dtypes, a stalled network) and the edges of the matching rules."""

from __future__ import annotations

from ddpdoctor.model.hang.analysis import diagnose, is_user_frame, rank_list
from ddpdoctor.model.hang.evidence import Frame
from ddpdoctor.readers.hang_files import read_evidence
from tests.hang.evidence_helpers import C10D, entry, frame, rank_doc, write_ranks

USER = "/home/me/train.py"


def _diag(tmp_path, docs):
    return diagnose(read_evidence([write_ranks(tmp_path / "ev", docs)]))


def test_rank_never_called_with_hosts_named(tmp_path):
    ok = [entry(s) for s in range(1, 14)]
    d = _diag(
        tmp_path,
        [
            rank_doc(
                0, 4, ok + [entry(14, retired=False)], [frame(USER, 40, "step"), frame(C10D, 1, "all_reduce")]
            ),
            rank_doc(1, 4, ok, [frame(USER, 10, "main"), frame(USER, 77, "log_metrics", "print(x)")]),
            rank_doc(2, 4, ok + [entry(14, retired=False)]),
            rank_doc(3, 4, ok + [entry(14, retired=False)]),
        ],
    )
    assert d.kind == "missing" and d.seq == 14 and d.operation == "all_reduce"
    assert d.culprit_ranks == [1] and d.waiting_ranks == [0, 2, 3]
    assert d.rank(1).location == f"{USER}:77" and d.rank(1).host == "node0"
    assert "rank 1 (node0) did not" in d.findings[0].details[0]
    assert "ranks 0, 2, 3 (node0, node1) called it" in d.findings[0].details[0]
    assert d.rank(0).waiting_s == 6.0  # captured 20 s, created 14 s


def test_majority_decides_who_called_the_other_collective(tmp_path):
    base = [entry(s) for s in range(1, 6)]
    docs = [
        rank_doc(r, 4, base + [entry(6, "barrier" if r == 2 else "all_reduce", sizes=(), retired=False)])
        for r in range(4)
    ]
    d = _diag(tmp_path, docs)
    assert d.kind == "mismatch_op" and d.seq == 6 and d.culprit_ranks == [2]
    assert "ranks called different collectives at #6 (barrier vs all_reduce)" in d.verdict


def test_dtype_mismatch(tmp_path):
    docs = [
        rank_doc(r, 2, [entry(1), entry(2, dtype="Half" if r else "Float", retired=False)]) for r in range(2)
    ]
    d = _diag(tmp_path, docs)
    assert d.kind == "mismatch_dtype" and d.seq == 2
    assert "Float on rank 0" in d.findings[0].details[0] and "Half on rank 1" in d.findings[0].details[0]
    assert "crashes the job" in d.crash  # gloo, no crash recorded yet


def test_wrapped_buffer_is_not_a_disagreement(tmp_path):
    # rank 1's ring buffer kept only #5..#9; #1..#4 are unknown there, not missing
    docs = [
        rank_doc(0, 2, [entry(s) for s in range(1, 10)] + [entry(10, retired=False)]),
        rank_doc(1, 2, [entry(s) for s in range(5, 10)], [frame(USER, 3, "spin")]),
    ]
    d = _diag(tmp_path, docs)
    assert d.kind == "missing" and d.seq == 10 and d.culprit_ranks == [1]
    assert d.grids[0].seqs[0] == 1 and d.grids[0].cells[1][0] == "unknown"
    assert d.grids[0].cells[1][-1] == "never" and d.grids[0].cells[0][-1] == "waiting"


def test_subgroup_matched_on_its_own_members(tmp_path):
    groups = {
        "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
        "1": {"name": "1", "desc": "tp", "ranks": "[2, 3]"},
    }
    tp = ("1", "tp")
    docs = [rank_doc(r, 4, [entry(1)], groups=groups) for r in range(2)] + [
        rank_doc(
            2,
            4,
            [entry(1), entry(1, pg=tp, created=5), entry(2, pg=tp, retired=False, created=9)],
            groups=groups,
        ),
        rank_doc(3, 4, [entry(1), entry(1, pg=tp, created=5)], [frame(USER, 8, "wait")], groups=groups),
    ]
    d = _diag(tmp_path, docs)
    assert d.group == "tp" and d.seq == 2 and d.culprit_ranks == [3] and d.waiting_ranks == [2]
    assert {g.group for g in d.grids} == {"default_pg", "tp"}


def test_all_ranks_in_the_same_collective_is_stalled_not_a_mismatch(tmp_path):
    docs = [rank_doc(r, 2, [entry(1), entry(2, retired=False)]) for r in range(2)]
    d = _diag(tmp_path, docs)
    assert d.kind == "stalled" and d.culprit_ranks == [] and d.waiting_ranks == [0, 1]
    assert "every rank is inside all_reduce #2" in d.verdict


def test_send_to_a_rank_that_never_receives(tmp_path):
    docs = [
        rank_doc(0, 3, [entry(1)], [frame(USER, 5, "push"), frame(C10D, 9, "send", args={"dst": 2})]),
        rank_doc(1, 3, [entry(1)], [frame(USER, 5, "push"), frame(C10D, 9, "recv", args={"src": 0})]),
        rank_doc(2, 3, [entry(1)], [frame(USER, 30, "evaluate")]),
    ]
    d = _diag(tmp_path, docs)
    assert d.kind == "p2p_waits" and d.culprit_ranks == [2] and d.rank(2).location == f"{USER}:30"
    assert "rank 0 waits in send on rank 2" in d.verdict


def test_matched_send_recv_pair_is_not_a_wait(tmp_path):
    docs = [
        rank_doc(0, 2, [entry(1)], [frame(USER, 5, "a"), frame(C10D, 9, "send", args={"dst": 1})]),
        rank_doc(1, 2, [entry(1)], [frame(USER, 6, "b"), frame(C10D, 9, "recv", args={"src": 0})]),
    ]
    d = _diag(tmp_path, docs)
    assert d.kind == "none" and d.culprit_ranks == []


def test_all_sends_without_peers_is_still_a_deadlock(tmp_path):
    docs = [rank_doc(r, 2, [entry(1)], [frame(USER, 5, "x"), frame(C10D, 9, "send")]) for r in range(2)]
    d = _diag(tmp_path, docs)
    assert d.kind == "p2p_cycle" and d.culprit_ranks == [0, 1] and "peers not recorded" in d.verdict


def test_healthy_evidence_finds_no_hang(tmp_path):
    docs = [rank_doc(r, 2, [entry(1), entry(2)], [frame(USER, 5, "compute")]) for r in range(2)]
    d = _diag(tmp_path, docs)
    assert d.kind == "none" and d.culprit_ranks == [] and d.verdict.startswith("no hang found")


def test_user_frames_skip_torch_stdlib_and_ddpdoctor():
    assert is_user_frame(Frame(USER, 1, "f"))
    assert is_user_frame(Frame("/venv/lib/python3.11/site-packages/transformers/trainer.py", 1, "f"))
    assert not is_user_frame(Frame(C10D, 1, "send"))
    assert not is_user_frame(Frame("/usr/lib/python3.11/threading.py", 1, "run"))
    assert not is_user_frame(Frame("<frozen runpy>", 1, "_run_code"))
    assert not is_user_frame(
        Frame("/venv/lib/python3.11/site-packages/ddpdoctor/runtime/rank_agent.py", 1, "f")
    )
    assert (
        rank_list([3, 1, 2]) == "ranks 1-3"
        and rank_list([0, 2]) == "ranks 0, 2"
        and rank_list([5]) == "rank 5"
    )


def _nccl_p2p(seq: int, name: str, retired: bool = False) -> dict:
    e = entry(seq, p2p=True, retired=retired)
    e["profiling_name"] = f"nccl:{name}"
    return e


def test_nccl_p2p_entries_give_the_cycle_and_its_sequence_number(tmp_path):
    # NCCL records p2p in the Flight Recorder ("send 0->1", group ranks); no stacks needed
    docs = [
        rank_doc(0, 2, [entry(1), _nccl_p2p(1, "send 0->1", retired=True), _nccl_p2p(2, "send 0->1")]),
        rank_doc(1, 2, [entry(1), _nccl_p2p(1, "recv 1<-0", retired=True), _nccl_p2p(2, "send 1->0")]),
    ]
    d = _diag(tmp_path, docs)
    assert d.kind == "p2p_cycle" and d.seq_kind == "p2p" and d.seq == 2 and d.operation == "send"
    assert d.culprit_ranks == [0, 1] and "a cycle 0\u21921\u21920" in d.verdict
    assert d.rank(0).state.startswith("waiting in send #2")


def test_nccl_p2p_peer_is_mapped_to_global_ranks(tmp_path):
    groups = {
        "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
        "1": {"name": "1", "desc": "pp", "ranks": "[1, 3]"},
    }
    pp = ("1", "pp")
    send = {
        **entry(1, p2p=True, retired=False, pg=pp),
        "profiling_name": "nccl:send 0->1",
    }  # group 0->1 = 1->3
    docs = [rank_doc(r, 4, [entry(1)], groups=groups) for r in (0, 2)] + [
        rank_doc(1, 4, [entry(1), send], groups=groups),
        rank_doc(3, 4, [entry(1)], [frame(USER, 50, "evaluate")], groups=groups),
    ]
    d = _diag(tmp_path, docs)
    assert d.kind == "p2p_waits" and d.culprit_ranks == [3] and d.seq == 1
    assert "rank 1 waits in send on rank 3" in d.verdict and d.rank(3).location == f"{USER}:50"


def _watch(**kw) -> dict:
    return {
        "format": "ddpdoctor-hang-watch",
        "version": 1,
        "command": ["torchrun", "train.py"],
        "hang_after_s": 5,
        "started_ns": 1,
        "detected_ns": 9_000_000_001,
        "outcome": "hang",
        "trigger": {"rank": 0, "operation": "gloo:all_reduce", "waiting_s": 5.2},
        "world_size": 4,
        "exit_codes": {},
        "missing_ranks": [],
        **kw,
    }


def test_watch_record_names_the_host_of_a_rank_without_evidence(tmp_path):
    import json

    docs = [rank_doc(r, 4, [entry(1), entry(2, retired=False)]) for r in range(3)]
    ev = write_ranks(tmp_path / "ev", docs)
    (ev / "watch.json").write_text(
        json.dumps(_watch(missing_ranks=[3], hosts={"3": "gpu-node-17"}, job_exit_code=1))
    )
    d = diagnose(read_evidence([ev]))
    assert d.kind == "missing" and d.culprit_ranks == [3] and d.missing_ranks == [3]
    assert d.rank(3).host == "gpu-node-17" and d.rank(3).kind == "missing"
    assert "rank 3 (gpu-node-17)" in " ".join(d.findings[0].details) or "gpu-node-17" in d.verdict
    assert d.watch["trigger"]["rank"] == 0 and d.watch["detected_after_s"] == 9.0


def test_watch_without_world_size_is_not_mixed_input(tmp_path):
    import json

    ev = write_ranks(tmp_path / "ev", [rank_doc(r, 2, [entry(1)]) for r in range(2)])
    (ev / "watch.json").write_text(json.dumps(_watch(world_size=0, outcome="finished", trigger=None)))
    d = diagnose(read_evidence([ev]))
    assert d.kind == "none" and d.world_size == 2


def test_without_flight_recorder_the_stacks_still_name_the_rank(tmp_path):
    docs = [
        rank_doc(0, 3, None, [frame(USER, 9, "save"), frame(C10D, 1, "barrier")]),
        rank_doc(1, 3, None, [frame(USER, 20, "main"), frame(C10D, 1, "all_reduce")]),
        rank_doc(2, 3, None, [frame(USER, 20, "main"), frame(C10D, 1, "all_reduce")]),
    ]
    d = _diag(tmp_path, docs)
    assert d.kind == "mismatch_op" and d.culprit_ranks == [0] and d.rank(0).location == f"{USER}:9"
    docs[0] = rank_doc(0, 3, None, [frame(USER, 44, "spin")])
    d = _diag(tmp_path / "b", docs)
    assert d.kind == "missing" and d.operation == "all_reduce" and d.culprit_ranks == [0]
    assert d.seq is None and d.rank(0).location == f"{USER}:44"


def test_a_rank_that_died_outside_any_collective_is_still_named(tmp_path):
    exc = {"type": "KeyError", "message": "'label'", "frames": [frame(USER, 61, "collate")]}
    docs = [
        rank_doc(0, 2, [entry(1)], [frame(USER, 5, "compute")]),
        rank_doc(1, 2, [entry(1)], exception=exc),
    ]
    d = _diag(tmp_path, docs)
    assert d.kind == "died" and d.culprit_ranks == [1] and d.rank(1).location == f"{USER}:61"
    assert "KeyError" in d.verdict


def test_rank_stuck_before_its_first_collective(tmp_path):
    docs = [rank_doc(r, 3, [entry(1, retired=False)], [frame(USER, 12, "main")]) for r in (0, 1)]
    docs.append(rank_doc(2, 3, [], [frame(USER, 4, "download_dataset")]))
    d = _diag(tmp_path, docs)
    assert d.kind == "missing" and d.seq == 1 and d.operation == "all_reduce" and d.culprit_ranks == [2]
    assert d.rank(2).location == f"{USER}:4" and d.waiting_ranks == [0, 1]


def test_rank_whose_flight_recorder_failed_is_judged_by_its_stack(tmp_path):
    docs = [rank_doc(r, 2, [entry(1), entry(2, retired=False)]) for r in (0,)]
    docs.append(
        {**rank_doc(1, 2, None, [frame(USER, 8, "loop")]), "flight_recorder_error": "RuntimeError: off"}
    )
    d = _diag(tmp_path, docs)
    assert d.culprit_ranks == [1] and d.seq == 2 and "left no Flight Recorder record" in d.verdict
    assert d.rank(1).location == f"{USER}:8"


def test_killed_rank_is_the_culprit_not_the_ranks_that_lost_it(tmp_path):
    # gloo: rank 1 SIGKILLed; ranks 0 and 2 die of "Connection closed by peer" inside all_reduce #4
    lost = {
        "type": "RuntimeError",
        "frames": [frame(USER, 14, "step"), frame(C10D, 1, "all_reduce")],
        "message": "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection "
        "closed by peer [127.0.0.1]:47508. This is typically caused by a remote worker crashing.",
    }
    docs = [rank_doc(r, 3, [entry(s) for s in range(1, 5)], exception=lost) for r in (0, 2)]
    d = _diag(tmp_path, docs)
    assert d.kind == "missing" and d.culprit_ranks == [1] and d.missing_ranks == [1]
    assert d.operation == "all_reduce" and d.seq == 4
    assert "ranks 0, 2 lost the connection in all_reduce #4" in d.verdict
    assert d.rank(0).state == "died: RuntimeError: Connection closed by peer [127.0.0.1]:47508."
    assert not d.rank(0).culprit and d.rank(0).exception.startswith("RuntimeError: [/__w/")


def test_own_error_beats_the_peers_that_lost_it(tmp_path):
    lost = {
        "type": "RuntimeError",
        "message": "Connection reset by peer",
        "frames": [frame(USER, 14, "step")],
    }
    own = {
        "type": "torch.OutOfMemoryError",
        "message": "CUDA out of memory.",
        "frames": [frame(USER, 33, "fwd")],
    }
    docs = [rank_doc(0, 2, [entry(1)], exception=lost), rank_doc(1, 2, [entry(1)], exception=own)]
    d = _diag(tmp_path, docs)
    assert d.kind == "died" and d.culprit_ranks == [1] and d.rank(1).location == f"{USER}:33"


def test_frame_args_key_is_read_like_locals(tmp_path):
    import json

    docs = [rank_doc(r, 2, [entry(1)], [frame(USER, 5, "x"), frame(C10D, 9, "send")]) for r in range(2)]
    for r, doc in enumerate(docs):
        doc["threads"][0]["frames"][1]["args"] = {"dst": 1 - r}
    ev = write_ranks(tmp_path / "ev", docs)
    d = diagnose(read_evidence([ev]))
    assert d.kind == "p2p_cycle" and "a cycle 0\u21921\u21920" in d.verdict
    assert json.loads(json.dumps(d.to_dict()))["culprit_ranks"] == [0, 1]


def test_cycle_among_some_ranks_is_not_called_every_rank(tmp_path):
    docs = [
        rank_doc(r, 3, [entry(1)], [frame(USER, 5, "x"), frame(C10D, 9, "send", args={"dst": 1 - r})])
        for r in range(2)
    ]
    docs.append(rank_doc(2, 3, [entry(1)], [frame(USER, 50, "idle")]))
    d = _diag(tmp_path, docs)
    assert d.kind == "p2p_cycle" and d.culprit_ranks == [0, 1]
    assert d.verdict.startswith(
        "ranks 0, 1 are each blocked in send with no matching recv: a cycle 0\u21921\u21920"
    )


def test_different_collectives_explain_a_gloo_crash_only_when_it_crashed(tmp_path):
    import json

    docs = [
        rank_doc(r, 2, [entry(1), entry(2, "all_gather" if r else "all_reduce", retired=False)])
        for r in range(2)
    ]
    ev = write_ranks(tmp_path / "ev", docs)
    assert diagnose(read_evidence([ev])).crash is None
    (ev / "watch.json").write_text(json.dumps(_watch(world_size=2, outcome="crash", trigger=None)))
    d = diagnose(read_evidence([ev]))
    assert d.kind == "mismatch_op" and "explains the crash" in d.crash


def test_verify_mismatch_in_the_watch_record_is_the_verdict(tmp_path):
    """watch.json's collective_mismatches (watch --verify) name the mismatch, also for `hang DIR`."""
    import json

    from ddpdoctor.model.hang.fingerprint import CallPrint, compare

    prints = [CallPrint(r, "default_pg", 5, "all_reduce", ("8",) if r != 2 else ("9",), ("float32",), None,
                        USER, 30 if r != 2 else 33) for r in range(3)]  # fmt: skip
    ev = write_ranks(tmp_path / "ev", [rank_doc(r, 3, [entry(1)]) for r in range(3)])
    m = compare(prints)
    (ev / "watch.json").write_text(json.dumps(_watch(world_size=3, outcome="crash", trigger=None,
                                                     collective_mismatches=[m.to_dict()])))  # fmt: skip
    d = diagnose(read_evidence([ev]))
    assert (d.kind, d.seq, d.operation, d.culprit_ranks) == ("mismatch_size", 5, "all_reduce", [2])
    assert "rank 2 calls all_reduce float32[9] at train.py:33" in d.verdict


def test_wait_on_a_request_names_its_operation_and_peer(tmp_path):
    """A wait on an irecv request (watch --verify) carries the operation and peer in its frame."""
    wait = "/site-packages/ddpdoctor/runtime/verify_p2p.py"
    docs = [rank_doc(r, 2, [entry(1)], frames=[frame(USER, 12, "main", "req.wait()"),
                                              frame(wait, 140, "wait", args={"request": "irecv", "src": 1 - r,
                                                                             "p2p_seq": 1})])  # fmt: skip
            for r in range(2)]
    d = _diag(tmp_path, docs)
    assert (d.kind, d.operation, d.seq, sorted(d.culprit_ranks)) == ("p2p_cycle", "irecv", 1, [0, 1])
