"""The adapter reads whatever the checks emit; missing or odd fields give None, not exceptions."""

from __future__ import annotations

import pytest

from ddpdoctor.core.report import CheckResult, Finding, Report
from ddpdoctor.tui import adapt


def report_with(code: str, data: dict) -> Report:
    return Report(checks=[CheckResult(code=code, title=code, data=data)])


def test_p2p_view_reads_matrix_and_outliers(gloo_report):
    v = adapt.p2p_view(gloo_report)
    assert v is not None and v.code == "P2P001"
    assert v.matrix.size == 4 and v.matrix.unit == "GB/s"
    assert v.outliers == {(3, 1), (3, 0)}
    assert v.matrix.values[3][1] == pytest.approx(0.025)


@pytest.mark.parametrize(
    "data",
    [{}, {"matrix": None}, {"matrix": {"values": []}}, {"matrix": {"values": "x"}}, {"matrix": [[1]]}],
)
def test_p2p_view_missing_or_malformed_is_none(data):
    assert adapt.p2p_view(report_with("P2P001", data)) is None
    assert adapt.p2p_view(None) is None


def test_p2p_view_drops_bad_outliers_and_pads_ragged_rows():
    data = {"matrix": {"values": [[None, 1.0], [2.0]]}, "outliers": [[0, 1], [5, 5], "x", [0], [True, 1]]}
    v = adapt.p2p_view(report_with("P2P002", data))
    assert v.matrix.labels == ["r0", "r1"]  # no labels: rank names
    assert v.matrix.values == [[None, 1.0], [2.0, None]]
    assert v.outliers == {(0, 1)}  # out of range, malformed and bool pairs dropped (True is an int)


def test_cell_details_compares_with_median(gloo_report):
    v = adapt.p2p_view(gloo_report)
    text = adapt.cell_details(v, 3, 1)
    assert "r3@ddpd-node1 → r1@ddpd-node0" in text and "0.025 GB/s" in text and "OUTLIER" in text
    assert "reverse 1.13 GB/s" in text
    assert "diagonal" in adapt.cell_details(v, 2, 2)
    assert "OUTLIER" not in adapt.cell_details(v, 0, 1)


def test_bandwidth_view_single_and_per_collective_curves(gloo_report):
    v = adapt.bandwidth_view(gloo_report)
    assert v.curves[0].name == "all_reduce" and v.curves[0].unit_y == "GB/s"
    assert v.times is not None and v.expected == pytest.approx(1.1)
    sizes = [p[0] for p in v.curves[0].points]
    assert sizes == sorted(sizes) and sizes[0] == 1024
    multi = {
        "busbw": {"unit_y": "GB/s", "all_reduce": {"points": [[8, 1.0]]}, "all_gather": {"points": [[8, 2]]}}
    }
    v2 = adapt.bandwidth_view(report_with("BW002", multi))
    assert [c.name for c in v2.curves] == ["all_reduce", "all_gather"]
    assert v2.curves[1].unit_y == "GB/s"


def test_bandwidth_view_skips_bad_points():
    data = {"busbw": {"points": [[1, "x"], ["a", 2], [4, float("nan")], [8, 3.0], [2]]}}
    v = adapt.bandwidth_view(report_with("BW001", data))
    assert v.curves[0].points == [(8.0, 3.0)]
    assert adapt.bandwidth_view(report_with("BW001", {"busbw": {"points": [[1, "x"]]}})) is None


def test_topology_merges_checks_of_one_node(gpu_report):
    nodes = adapt.topology_by_node(gpu_report)
    assert [n.host for n in nodes] == ["gpu-h100-07"]
    node = nodes[0]
    assert node.nvlink.size == 8 and node.nvlink.values[0][1] == 18
    assert len(node.nics) == 9 and node.nics[0]["name"] == "mlx5_0"
    assert node.gdr["verdict"] == "enabled"
    assert adapt.nic_row(node.nics[-1])[6] == ""  # a NIC on no rail


def test_topology_per_node_payload_and_string_gdr():
    data = {"nodes": {"a": {"gdr": "disabled"}, "b": {"nics": [{"name": "mlx5_0"}, "junk"]}}}
    nodes = {n.host: n for n in adapt.topology_by_node(report_with("GDR001", data))}
    assert nodes["a"].gdr == {"verdict": "disabled"}
    assert nodes["b"].nics == [{"name": "mlx5_0"}]
    assert adapt.topology_by_node(report_with("ENV001", {"x": 1})) == []


def test_lint_findings_sorted_by_location(gloo_report):
    fs = adapt.lint_findings(gloo_report)
    assert [f.location.line for f in fs] == [13, 18, 25]


def test_lint_result_to_report_accepts_shapes():
    f = Finding("DDP101", "error", "m")
    assert adapt.lint_result_to_report([f]).lint == [f]
    assert adapt.lint_result_to_report([f.to_dict()]).lint[0].code == "DDP101"
    rep = Report(lint=[f])
    assert adapt.lint_result_to_report(rep) is rep

    class Result:
        findings = (f,)

    assert adapt.lint_result_to_report(Result()).lint == [f]
    with pytest.raises(TypeError, match="not findings"):
        adapt.lint_result_to_report(42)
