"""The pure parts of `watch --verify`: comparing collective fingerprints across ranks, comparing the
ranks' DDP forwards per call site, and grouping run-time findings into one per cause."""

from __future__ import annotations

from ddpdoctor.model.hang.fingerprint import CallPrint, CollectiveMismatch, compare
from ddpdoctor.model.hang.verify import forward_findings, group_run_findings


def fp(rank, op="all_reduce", shapes=("8",), dtypes=("float32",), root=None, line=10, seq=3):
    return CallPrint(rank, "default_pg", seq, op, tuple(shapes), tuple(dtypes), root, "/x/train.py", line)


def test_equal_calls_agree_even_from_different_lines():
    assert compare([fp(0, line=10), fp(1, line=20), fp(2, line=30)]) is None


def test_shape_difference_names_the_minority_with_its_line():
    m = compare([fp(0), fp(1, shapes=("9",), line=12), fp(2)])
    assert m is not None and m.kind == "mismatch_size" and m.aspects == ("shape",)
    assert m.culprits() == [1] and m.seq == 3 and m.operation() == "all_reduce"
    assert "rank 1 calls all_reduce float32[9] at train.py:12" in m.message()
    assert "ranks 0, 2 call all_reduce float32[8] at train.py:10" in m.message()


def test_operation_dtype_and_root_differences():
    assert compare([fp(0, op="broadcast", root=0), fp(1, op="all_reduce")]).kind == "mismatch_op"
    assert compare([fp(0, dtypes=("float32",)), fp(1, dtypes=("float16",))]).kind == "mismatch_dtype"
    m = compare([fp(0, op="broadcast", root=0), fp(1, op="broadcast", root=1)])
    assert m.aspects == ("root",) and "from rank 1" in m.message()


def test_split_operations_may_differ_in_shape():
    assert compare([fp(0, op="all_to_all_single", shapes=("5",)), fp(1, op="all_to_all_single", shapes=("7",))]) is None
    assert compare([fp(0, op="gather", shapes=("5",), root=0), fp(1, op="gather", shapes=("7",), root=0)]) is None


def test_prints_and_mismatches_survive_their_encodings():
    p = CallPrint(1, "group 2", 7, "all_gather", ("4x2",), ("int64",), None, "/a.py", 3, "all_gather_object", 12)
    assert CallPrint.decode(p.encode()) == p
    m = compare([fp(0), fp(1, shapes=("9",))])
    assert CollectiveMismatch.from_dict(m.to_dict()) == m


def site(rank, sites):
    return {"rank": rank, "sites": {k: {"count": c, "first": f, "last": f} for k, (c, f) in sites.items()}}


def test_forward_reached_by_some_ranks_only():
    items = forward_findings([site(0, {"/t.py:5": (3, 1), "/t.py:9": (1, 3)}), site(1, {"/t.py:5": (3, 1)})])
    (f,) = group_run_findings(items)
    assert f.kind == "forward_some_ranks" and f.file == "/t.py" and f.line == 9
    assert f.ranks == [0] and f.other_ranks == [1] and f.steps == [3]
    assert "reached by rank 0 only" in f.message


def test_forwards_alike_or_one_rank_known_give_nothing():
    assert forward_findings([site(0, {"/t.py:5": (3, 1)}), site(1, {"/t.py:5": (3, 1)})]) == []
    assert forward_findings([site(0, {"/t.py:5": (3, 1)})]) == []


def test_unwaited_requests_group_by_place_with_each_rank_call():
    items = [
        {"kind": "p2p_unwaited", "rank": r, "operation": "isend", "peer": 1 - r, "seq": 2, "file": "/t.py",
         "line": 4, "tensor": "float32[4]", "message": "m"}
        for r in (1, 0)
    ]
    (f,) = group_run_findings(items)
    assert f.ranks == [0, 1] and f.seqs == [2] and f.operation == "isend"
    assert f.calls == ["rank 1: isend to rank 0 of float32[4], p2p request #2",
                       "rank 0: isend to rank 1 of float32[4], p2p request #2"]
    assert "p2p request #2" in f.headline()
