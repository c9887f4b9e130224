"""Folding the event stream into the overview model, and the same model from a saved report."""

from __future__ import annotations

from ddpdoctor.run_state import RunState
from ddpdoctor.tui.livestate import state_from_report

START = {
    "t": 100.0,
    "event": "run_start",
    "world_size": 4,
    "nodes": 2,
    "backend": "gloo",
    "checks": [{"code": "ENV001", "title": "Env"}, {"code": "P2P001", "title": "P2P"}],
    "endpoint": "h:29400",
}


def rendezvous(rank: int) -> dict:
    return {
        "t": 101.0,
        "event": "rendezvous",
        "rank": rank,
        "node_rank": rank // 2,
        "hostname": f"n{rank // 2}",
    }


def test_events_drive_check_and_rank_status():
    st = RunState()
    for ev in [START, *(rendezvous(r) for r in range(4))]:
        st.apply(ev)
    assert [c.status for c in st.rows()] == ["pending", "pending"]
    assert st.node_groups() == [(0, "n0", [0, 1]), (1, "n1", [2, 3])]
    st.apply({"t": 102.0, "event": "check_start", "code": "ENV001", "title": "Env", "budget_s": 5})
    assert st.current == "ENV001" and set(st.checks["ENV001"].ranks.values()) == {"running"}
    st.apply(
        {"t": 103.0, "event": "progress", "code": "ENV001", "rank": 2, "done": 1, "total": 4, "message": "x"}
    )
    assert st.checks["ENV001"].progress == "r2 1/4 x"
    st.apply(
        {
            "t": 104.5,
            "event": "check_end",
            "code": "ENV001",
            "status": "warning",
            "summary": "s",
            "duration_s": 2.5,
            "findings": 1,
        }
    )
    row = st.checks["ENV001"]
    assert (row.status, row.summary, row.duration_s, row.finding_count) == ("warning", "s", 2.5, 1)
    assert set(row.ranks.values()) == {"warning"} and st.current is None
    assert st.elapsed == 4.5
    st.apply({"t": 105.0, "event": "run_end", "exit_code": 1, "report": "/tmp/r.json"})
    assert st.ended and st.exit_code == 1 and st.report_path == "/tmp/r.json"
    assert st.checks["P2P001"].status == "not_run"  # the run ended before it


def test_unknown_and_malformed_events_are_ignored():
    st = RunState()
    for ev in [
        {},
        {"event": 3},
        {"event": "nope"},
        {"event": "progress"},
        {"event": "check_end", "code": 5},
        {"event": "rendezvous", "rank": "x"},
        {"event": "run_start", "world_size": "four"},
    ]:
        st.apply(ev)
    assert st.checks == {} and st.world_size == 0


def test_check_events_without_run_start_still_show():
    st = RunState()
    st.apply({"event": "progress", "code": "BW001", "rank": 0, "done": 2, "total": 8})
    assert st.checks["BW001"].status == "running"


def test_logs_are_bounded():
    st = RunState()
    for k in range(500):
        st.apply({"event": "log", "level": "info", "message": str(k)})
    assert len(st.logs) == 200 and st.logs[-1] == ("info", "499")


def test_report_marks_only_the_ranks_findings_name(gloo_report):
    st = state_from_report(gloo_report)
    assert st.world_size == 4 and st.backend == "gloo" and st.ended and st.exit_code == 1
    p2p = st.checks["P2P001"]
    # error r3→r1 names ranks 3 and 1; warning r3→r0 names 0; rank 2 is clean
    assert p2p.ranks == {0: "warning", 1: "failed", 2: "passed", 3: "failed"}
    # a warning naming every rank
    assert set(st.checks["BW001"].ranks.values()) == {"warning"}
    assert set(st.checks["ENV001"].ranks.values()) == {"passed"}


def test_report_finding_by_node_and_whole_check_statuses(gloo_report):
    from ddpdoctor.core.report import CheckResult, Finding, Status

    gloo_report.checks = [
        CheckResult(
            "RDZ001",
            "R",
            status=Status.FAILED,
            findings=[Finding("RDZ001", "error", "late", where={"node": "ddpd-node1"})],
        ),
        CheckResult("COL001", "C", status=Status.TIMED_OUT),
        CheckResult("ENV001", "E", status=Status.WARNING, findings=[Finding("ENV001", "warning", "w")]),
    ]
    st = state_from_report(gloo_report)
    assert st.checks["RDZ001"].ranks == {0: "passed", 1: "passed", 2: "failed", 3: "failed"}
    assert set(st.checks["COL001"].ranks.values()) == {"timed_out"}
    assert set(st.checks["ENV001"].ranks.values()) == {"warning"}  # names no rank: all of them
