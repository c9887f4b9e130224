"""RunInfo (Report.run): reports read and written again give back exactly the ``run`` they held, key order
included; producers filling it in steps write the keys in the order they set them, as the dict did."""

import json
from pathlib import Path

import pytest

from ddpdoctor.core.report import Report
from ddpdoctor.core.run_info import BadNodes, RunInfo

HERE = Path(__file__).parent
SAVED = sorted((HERE / "fixtures" / "reports_v1").glob("*.json")) + sorted((HERE / "tui" / "data").glob("report_*.json"))


@pytest.mark.parametrize("path", SAVED, ids=lambda p: p.name)
def test_saved_reports_round_trip_exactly(path):
    doc = json.loads(path.read_text())
    again = Report.from_dict(doc).to_dict()["run"]
    assert json.dumps(again) == json.dumps(doc["run"])  # same keys, values and order


def test_saved_reports_are_read_into_fields():
    check = Report.from_dict(json.loads((HERE / "fixtures/reports_v1/check_gloo_2ranks.json").read_text())).run
    assert (check.backend, check.world_size, check.nodes, check.complete) == ("gloo", 2, ["vm"], True)
    assert check.profile["name"] == "cpu-gloo" and check.bad_nodes == BadNodes()
    assert check.extra == {}
    imported = Report.from_dict(json.loads((HERE / "fixtures/reports_v1/import_nccl_tests_p2p.json").read_text())).run
    assert imported.mode == "import" and len(imported.imported) == 2 and "gpu-node-a" in imported.facts
    sample = Report.from_dict(json.loads((HERE / "tui/data/report_2x2_gloo.json").read_text())).run
    assert sample.nodes == [] and sample.counted_nodes == 2 and sample.node_count == 2
    assert sample.extra == {"nodes": 2, "nproc_per_node": 2, "suite": "quick"}


def test_keys_are_written_in_the_order_they_were_set():
    run = RunInfo(backend="gloo", world_size=2, nodes=["a"], complete=True, aborted_reason=None)
    run.profile = {"name": "p"}
    run.add_warning("one")
    run.bad_nodes = BadNodes(("n1",), "n1")
    run.add_warning("two")  # an existing key keeps its place
    assert list(run.to_json()) == ["backend", "world_size", "nodes", "complete", "aborted_reason", "profile",
                                   "warnings", "bad_nodes"]
    assert run.to_json()["warnings"] == ["one", "two"] and run.to_json()["aborted_reason"] is None
    run.unset("profile")  # forget_profile then apply_profile: the record goes last, as dict pop/set did
    assert "profile" not in run.to_json() and run.profile is None
    run.profile = {"name": "q"}
    assert list(run.to_json())[-1] == "profile"


def test_only_keys_set_are_written():
    assert RunInfo().to_json() == {}
    assert RunInfo(mode="lint").to_json() == {"mode": "lint"}
    assert RunInfo(backend=None).to_json() == {"backend": None}  # set to None is written (partial reports)


def test_unknown_and_mistyped_keys_are_kept_verbatim_in_place():
    doc = {"suite": "quick", "backend": 3, "world_size": 4, "complete": "yes", "nodes": ["a", "b"], "x": {"y": 1}}
    run = RunInfo.from_json(doc)
    assert run.backend is None and run.complete is None and run.world_size == 4
    assert run.extra == {"suite": "quick", "backend": 3, "complete": "yes", "x": {"y": 1}}
    assert json.dumps(run.to_json()) == json.dumps(doc)
    run.backend = "nccl"  # a producer's value replaces the mistyped one, in its place
    assert list(run.to_json()) == list(doc) and run.to_json()["backend"] == "nccl" and "backend" not in run.extra


def test_bad_nodes_read_typed_and_anything_else_kept_verbatim():
    assert RunInfo.from_json({"bad_nodes": {"nodes": ["a"], "hostlist": "a"}}).bad_nodes == BadNodes(("a",), "a")
    for odd in ({"nodes": ["a"], "hostlist": "a", "note": 1}, {"hostlist": "a"}, {"nodes": [1], "hostlist": ""}, "a"):
        run = RunInfo.from_json({"bad_nodes": odd})
        assert run.bad_nodes is None and run.to_json() == {"bad_nodes": odd}


def test_reading_is_lenient():
    assert RunInfo.from_json(None) == RunInfo() and RunInfo.from_json([1]) == RunInfo()
    run = RunInfo.from_json({"duration_s": 3, "drained": 1, "lost_ranks": None})
    assert run.duration_s == 3 and run.drained is None and run.extra == {"drained": 1, "lost_ranks": None}


def test_a_misspelt_field_is_refused():
    with pytest.raises(TypeError, match="world_sise"):
        RunInfo(world_sise=2)
    with pytest.raises(AttributeError, match="drain_reasn"):
        RunInfo().drain_reasn = "x"


def test_report_json_round_trip_through_text():
    rep = Report(run=RunInfo(command="health", nodes=["n1"], nnodes=1, duration_s=1.5, topology={"n1": {}}))
    rep.run.drain_reason = "GPU001: gpu lost"
    again = Report.from_dict(json.loads(json.dumps(rep.to_dict())))
    assert again.run == rep.run and json.dumps(again.to_dict()) == json.dumps(rep.to_dict())
