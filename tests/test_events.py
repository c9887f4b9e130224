"""The typed event stream: every kind reads back as the JSON it was written from, key order included,
and a reader is lenient with lines it does not know."""

from __future__ import annotations

import json

import pytest

from ddpdoctor.core.events import (
    CheckEnd,
    CheckInfo,
    CheckStart,
    Log,
    OtherEvent,
    Progress,
    RankCheckEnd,
    RankCheckStart,
    Rendezvous,
    RunEnd,
    RunStart,
    parse_event,
)
from ddpdoctor.events import EventTail, EventWriter, read_events

# One of each kind, as the worker writes them (docs/architecture.md, "Events")
WRITTEN = [
    RunStart(world_size=2, nodes=["n0"], backend="gloo", checks=[CheckInfo("ENV001", "Env", 5.0)], endpoint="h:1"),
    Rendezvous(rank=1, node_rank=0, hostname="n0", seconds=0.5),
    CheckStart(code="ENV001", title="Env", budget_s=5.0),
    RankCheckStart(code="ENV001", rank=1),
    Progress(code="BW001", rank=0, done=3, total=9, message="4 MiB done", extra={"size_B": 4 << 20}),
    RankCheckEnd(code="ENV001", rank=1, status="ok"),
    RankCheckEnd(code="ENV001", rank=0, status="timed_out", op="all_reduce 1 MiB"),
    CheckEnd(code="ENV001", status="passed", summary="ok", duration_s=0.25, findings=0),
    Log(level="error", message="rank 1: giving up"),
    RunEnd(exit_code=0, report=None),
]


def test_each_kind_round_trips_through_the_file(tmp_path):
    path = tmp_path / "events.jsonl"
    w = EventWriter(path)
    for ev in WRITTEN:
        w.emit(ev)
    w.close()
    lines = path.read_text().splitlines()
    back = list(read_events(path))
    assert [type(e) for e in back] == [type(e) for e in WRITTEN]
    assert back == WRITTEN  # t was set on write, on both
    for line, ev in zip(lines, back):
        d = json.loads(line)
        assert list(d)[0] == "event" and list(d)[-1] == "t"
        assert json.dumps(ev.to_json()) == json.dumps(d)  # the same JSON, key order and int/float included


def test_the_json_of_a_kind_is_the_documented_one():
    assert RankCheckEnd(code="C", rank=1, status="ok", t=1.0).to_json() == {
        "event": "rank_check_end", "code": "C", "rank": 1, "status": "ok", "t": 1.0}  # no op unless timed out
    assert RunEnd(exit_code=1, report=None, t=2.0).to_json() == {"event": "run_end", "exit_code": 1, "report": None,
                                                                  "t": 2.0}
    assert Progress(code="P", rank=0, t=3.0).to_json() == {"event": "progress", "code": "P", "rank": 0, "t": 3.0}


@pytest.mark.parametrize("raw", [
    {"event": "nope", "x": 1},
    {"event": "check_end", "code": 5},
    {"event": "rendezvous", "rank": "x"},
    {"event": "rank_check_end", "code": "C"},
])
def test_unknown_or_incomplete_lines_stay_as_they_were(raw):
    ev = parse_event(raw)
    assert isinstance(ev, OtherEvent) and ev.to_json() == raw


def test_wrong_types_in_optional_fields_are_dropped_not_fatal():
    ev = parse_event({"event": "run_start", "world_size": "four", "nodes": 2, "checks": [{"title": "no code"}, 3]})
    assert isinstance(ev, RunStart) and ev.world_size is None and ev.nodes == 2 and ev.checks == []
    ev = parse_event({"event": "progress", "code": "BW001", "done": "x", "total": True})
    assert isinstance(ev, Progress) and ev.done is None and ev.total is None


def test_tail_gives_typed_events(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text('{"event": "check_start", "code": "X", "title": "T", "budget_s": 1, "t": 5}\n')
    (ev,) = EventTail(path).read()
    assert isinstance(ev, CheckStart) and (ev.code, ev.title, ev.budget_s, ev.t) == ("X", "T", 1, 5)
