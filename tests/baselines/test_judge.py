"""Judging BW001 and P2P001 payloads (docs/architecture.md "Bandwidth payloads") against a profile."""

from __future__ import annotations

import json

import pytest
from helpers import REPO

from ddpdoctor.baselines import apply_profile, judge, load_profile
from ddpdoctor.core.report import CheckResult, Report, Severity, Status
from ddpdoctor.core.run_info import RunInfo
from ddpdoctor.model.bandwidth.busbw import busbw_factor
from ddpdoctor.model.profiles.schema import parse_profile

from .conftest import VALID

SIZES = [2**k for k in range(20, 31, 2)]  # 1 MiB .. 1 GiB


def bw_payload(busbw_at_large: float, n: int, nnodes: int, backend="nccl", sizes=SIZES) -> dict:
    """BW001 data as the check writes it; busbw ramps up and reaches ``busbw_at_large`` at >= 64 MiB."""
    rows = []
    for s in sizes:
        bus = busbw_at_large * (1.0 if s >= 64 * 2**20 else 0.3)
        alg = bus / busbw_factor("all_reduce", n)
        rows.append(
            {
                "size_B": s,
                "time_us": s / (alg * 1e9) * 1e6,
                "algbw_GBps": alg,
                "busbw_GBps": bus,
                "iters": 20,
                "verified": True,
            }
        )
    return {
        "sizes_B": sizes,
        "ops": {"all_reduce": rows},
        "world_size": n,
        "nnodes": nnodes,
        "backend": backend,
        "busbw": {
            "all_reduce": {
                "unit_x": "B",
                "unit_y": "GB/s",
                "points": [[r["size_B"], r["busbw_GBps"]] for r in rows],
            }
        },
    }


def report(nnodes: int, per_node: int, checks: list[CheckResult], backend="nccl") -> Report:
    ranks = [
        {"rank": i * per_node + j, "local_rank": j, "node_rank": i, "hostname": f"node{i}"}
        for i in range(nnodes)
        for j in range(per_node)
    ]
    return Report(
        run=RunInfo(backend=backend, world_size=len(ranks), nodes=[f"node{i}" for i in range(nnodes)]),
        ranks=ranks,
        checks=checks,
    )


def bw_report(busbw: float, nnodes=1, per_node=8, backend="nccl", **kw) -> Report:
    data = bw_payload(busbw, nnodes * per_node, nnodes, backend=backend, **kw)
    return report(nnodes, per_node, [CheckResult("BW001", "Collective sweep", data=data)], backend=backend)


@pytest.fixture(scope="module")
def h100():
    return load_profile("dgx-h100")  # all_reduce 370 intra / 360 inter, p2p 370 / 48; warn 75 %, fail 50 %


def test_bw_at_95_percent_is_quiet_and_at_40_percent_fails_with_the_percentage(h100):
    assert judge(bw_report(0.95 * 370), h100) == []
    ((code, f),) = judge(bw_report(0.40 * 370), h100)
    assert code == "BW001" and f.code == "BW001" and f.severity is Severity.ERROR
    assert "40% of the 370 GB/s expected" in f.message
    assert f.evidence["pct_of_expected"] == 40.0 and f.evidence["expected_GBps"] == 370
    assert f.evidence["link_class"] == "all_reduce_busbw_intra_node" and f.evidence["profile"] == "dgx-h100"
    assert f.evidence["size_B"] >= 64 * 2**20  # the large-message figure, not the ramp


def test_between_the_thresholds_is_a_warning(h100):
    ((_, f),) = judge(bw_report(0.60 * 370), h100)
    assert f.severity is Severity.WARNING and f.evidence["pct_of_expected"] == 60.0


def test_inter_node_uses_the_inter_node_figure_scaled_to_the_gpus_used(h100):
    assert judge(bw_report(0.95 * 360, nnodes=2, per_node=8), h100) == []
    ((_, f),) = judge(bw_report(0.40 * 360, nnodes=2, per_node=8), h100)
    assert f.evidence["link_class"] == "all_reduce_busbw_inter_node" and f.evidence["expected_GBps"] == 360
    # 2 of the 8 GPUs per node bring 2 of the 8 NICs: 90 GB/s expected; 85.5 is 95 % of it
    assert judge(bw_report(85.5, nnodes=2, per_node=2), h100) == []
    ((_, f),) = judge(bw_report(36, nnodes=2, per_node=2), h100)
    assert f.evidence["expected_GBps"] == 90 and f.evidence["scaling"] == "scaled to 2 of 8 GPUs per node"


def test_the_tui_curve_shape_is_read_too(h100):
    rep = bw_report(0.4 * 370)
    data = rep.check("BW001").data
    del data["ops"]
    data["busbw"] = data["busbw"]["all_reduce"]  # a bare curve, as the TUI samples write it
    ((_, f),) = judge(rep, h100)
    assert f.evidence["pct_of_expected"] == 40.0


def test_a_sweep_below_the_large_message_size_is_not_compared(h100):
    ((_, f),) = judge(bw_report(1.0, sizes=[2**20, 2**22]), h100)
    assert f.severity is Severity.INFO and "busbw not compared" in f.message and "4 MiB" in f.message


def p2p_report(intra: float, inter: float, slow: tuple[int, int, float] | None = None, classes_only=False):
    hosts = ["node0", "node0", "node1", "node1"]
    values = [
        [None if i == j else (intra if hosts[i] == hosts[j] else inter) for j in range(4)] for i in range(4)
    ]
    if slow:
        values[slow[0]][slow[1]] = slow[2]
    data = {
        "matrix": {"unit": "GB/s", "labels": [f"r{r}@{h}" for r, h in enumerate(hosts)], "values": values},
        "size_B": 2**26,
        "mode": "pairs",
    }
    if classes_only:
        data = {
            "classes": {
                "intra_node": {"median_GBps": intra, "pairs": 4},
                "inter_node": {"median_GBps": inter, "pairs": 8},
            }
        }
    return report(2, 2, [CheckResult("P2P001", "Point-to-point", data=data)])


def test_p2p_classes_at_95_and_40_percent(h100):
    assert judge(p2p_report(0.95 * 370, 0.95 * 48), h100) == []
    found = judge(p2p_report(0.95 * 370, 0.40 * 48, slow=(3, 1, 0.1 * 48)), h100)
    ((code, f),) = found
    assert code == "P2P001" and f.severity is Severity.ERROR
    assert "inter-node point-to-point" in f.message and "40% of the 48 GB/s" in f.message
    assert f.evidence["slowest_pair"] == {"from_rank": 3, "to_rank": 1, "GBps": 4.8, "pct_of_expected": 10.0}
    assert f.where == {"link": [3, 1]}
    ((_, f),) = judge(p2p_report(0.40 * 370, 48), h100)
    assert f.evidence["link_class"] == "p2p_intra_node" and f.evidence["pairs"] == 4


def test_p2p_from_class_medians_only(h100):
    ((_, f),) = judge(p2p_report(370, 0.3 * 48, classes_only=True), h100)
    assert f.evidence["pct_of_expected"] == 30.0 and "slowest_pair" not in f.evidence


def test_no_reference_means_no_judgement():
    pcie = load_profile("pcie-gen4-8gpu")  # inter-node figures are null
    assert judge(p2p_report(20, 0.001), pcie) == []


def test_a_profile_for_another_backend_says_so_and_compares_nothing(h100):
    ((_, f),) = judge(bw_report(0.01, backend="gloo"), h100)
    assert f.severity is Severity.INFO and "this run used gloo" in f.message


def test_judge_takes_a_report_dict(h100):
    assert judge(bw_report(0.4 * 370).to_dict(), h100)[0][1].evidence["pct_of_expected"] == 40.0


def test_apply_profile_writes_findings_statuses_expected_line_and_the_record(h100):
    rep = bw_report(0.6 * 370)
    p2p = p2p_report(0.3 * 370, 48).check("P2P001")
    rep.checks.append(p2p)
    rep.checks.append(CheckResult("GPU001", "GPUs", status=Status.SKIPPED))
    judged = apply_profile(rep, h100, how="detected")
    assert sorted(code for code, _ in judged) == ["BW001", "P2P001"]
    assert rep.check("BW001").status is Status.WARNING and rep.check("P2P001").status is Status.FAILED
    assert rep.check("GPU001").status is Status.SKIPPED
    bw = rep.check("BW001").data
    assert bw["expected_busbw_GBps"] == 370 and bw["profile"]["pct_of_expected"] == 60.0
    assert rep.run.profile["name"] == "dgx-h100" and rep.run.profile["how"] == "detected"
    assert rep.exit_code() == 1
    json.dumps(rep.to_dict())  # still JSON


def test_apply_profile_never_improves_a_status_and_sets_the_line_when_quiet(h100):
    rep = bw_report(370)
    rep.check("BW001").status = Status.FAILED
    assert apply_profile(rep, h100) == []
    assert rep.check("BW001").status is Status.FAILED
    assert rep.check("BW001").data["expected_busbw_GBps"] == 370


def test_applying_again_replaces_the_earlier_judgement(h100):
    rep = bw_report(0.4 * 370)
    apply_profile(rep, h100)
    apply_profile(rep, h100)
    assert len(rep.check("BW001").findings) == 1 and rep.check("BW001").status is Status.FAILED
    lenient = parse_profile(
        VALID.replace("all_reduce_busbw_intra_node: 200", "all_reduce_busbw_intra_node: 150")
    )
    apply_profile(rep, lenient)  # 148 GB/s is 99 % of 150
    assert rep.check("BW001").findings == [] and rep.check("BW001").status is Status.PASSED
    assert rep.check("BW001").data["expected_busbw_GBps"] == 150 and rep.run.profile["name"] == "test-box"


def test_the_gloo_sample_report_against_the_cpu_profile():
    rep = Report.from_dict(json.loads((REPO / "tests/tui/data/report_2x2_gloo.json").read_text()))
    cpu = load_profile("cpu-gloo")
    assert judge(rep, cpu) == []  # intra 2.05 of 1.8, inter median 1.12 of 1.2, busbw 0.78 of 0.6
    apply_profile(rep, cpu)
    assert rep.check("BW001").data["expected_busbw_GBps"] == 0.6
    # the shaped direction node1 -> node0 (0.025 GB/s) fails once it is the typical inter-node figure
    for row in rep.check("P2P001").data["matrix"]["values"]:
        row[:] = [v if v is None or v > 1.5 else 0.025 for v in row]
    ((_, f),) = judge(rep, cpu)
    assert f.severity is Severity.ERROR and f.evidence["pct_of_expected"] < 10


def test_thresholds_come_from_the_profile():
    lenient = parse_profile(
        VALID.replace("warn_below_pct: 80", "warn_below_pct: 30").replace(
            "fail_below_pct: 50", "fail_below_pct: 20"
        )
    )
    assert judge(bw_report(0.4 * 200, per_node=8), lenient) == []  # 40 % is fine when warning starts at 30


def test_links_p2p001_flagged_are_left_out_of_the_class_median(h100):
    # 5 of 8 inter-node links slow: the median is slow, but P2P001 has flagged (and blamed) them
    rep = p2p_report(370, 48)
    data = rep.check("P2P001").data
    slow = [(0, 2), (0, 3), (1, 2), (1, 3), (2, 0)]
    for i, j in slow:
        data["matrix"]["values"][i][j] = 0.02 * 48
    ((_, f),) = judge(rep, h100)  # without P2P001's verdict the class looks slow
    assert f.evidence["pct_of_expected"] == 2.0
    data["outliers"] = [list(p) for p in slow]
    assert judge(rep, h100) == []  # the healthy links are at 100 %
    data["outliers"] = [[i, j] for i in range(4) for j in range(4) if i // 2 != j // 2]
    ((_, f),) = judge(rep, h100)  # everything flagged: everything counts
    assert f.evidence["pairs"] == 8
