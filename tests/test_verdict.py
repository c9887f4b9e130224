from ddpdoctor.core.report import Status
from ddpdoctor.core.world import WorldInfo
from ddpdoctor.runtime.verdict import classify_ranks, fmt_ranks

WORLD = WorldInfo.from_dicts([
    {"rank": r, "node_rank": r // 2, "local_rank": r % 2, "hostname": f"node{r // 2}"} for r in range(4)
])


def test_fmt_ranks_compresses_ranges():
    assert fmt_ranks([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert fmt_ranks([]) == "none"


def test_all_ok_continues():
    v = classify_ranks({r: {"status": "ok"} for r in range(4)}, set(), WORLD, "COL001", 10)
    assert v.status is None and v.next_step == "continue" and not v.findings


def test_hang_names_the_ranks_that_never_arrived():
    per = {r: {"status": "timed_out", "op": "all_reduce 7 floats", "op_seconds": 10.0} for r in (0, 2, 3)}
    per[1] = {"status": "timed_out", "op": "fault injection: hang", "stack": ["  File x.py, line 3"]}
    v = classify_ranks(per, set(), WORLD, "COL001", 10)
    assert v.status is Status.TIMED_OUT and v.next_step == "abort"
    assert "timed out after 10 s in all_reduce 7 floats; ranks 1 never arrived" in v.findings[0].message
    assert v.findings[0].where["never_arrived"] == [1]


def test_lost_node_is_named():
    per = {0: {"status": "error", "error": "Connection closed by peer", "op": "all_reduce"},
           1: {"status": "error", "error": "Connection closed by peer", "op": "all_reduce"}, 2: None, 3: None}
    v = classify_ranks(per, {2, 3}, WORLD, "COL001", 10)
    assert v.status is Status.FAILED and v.next_step == "abort"
    assert "lost node" in v.findings[0].message and "node1 (node 1): ranks 2-3" in v.findings[0].message
    assert v.findings[0].where["nodes"] == ["node1"]


def test_errors_ask_for_a_fresh_group():
    per = {r: {"status": "ok"} for r in range(4)}
    per[3] = {"status": "error", "error": "RuntimeError: boom", "op": "broadcast"}
    v = classify_ranks(per, set(), WORLD, "X", 5)
    assert v.status is Status.ERROR and v.next_step == "new_group"
    assert "ranks 3 failed in broadcast: RuntimeError: boom" in v.findings[0].message
