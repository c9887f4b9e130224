"""Layouts from a matrix measured for real: `ddpdoctor check --select P2P001` on two emulated nodes
(network namespaces, 2 ranks each, a 200 Mbit/s link between them), then recommend() on its report."""

from support.marks import NEEDS_NETNS
from support.testbed import NetBed

from ddpdoctor.core.report import Report
from ddpdoctor.recommend.layouts import recommend
from tests.helpers import load

pytestmark = NEEDS_NETNS


def test_layouts_from_a_measured_p2p_matrix(tmp_path):
    with NetBed(2) as bed:
        for node in (0, 1):
            bed.shape(node, rate_mbit=200)  # 25 MB/s between nodes; loopback inside a node is GB/s
        results = bed.run_check(
            ["--rdzv-timeout", "60", "--select", "P2P001", "--p2p-size", "1M"], tmp_path, timeout=240, nproc=2
        )
    # exit 1 is expected: the 200 Mbit/s link is far below what the detected cpu-gloo profile expects
    assert [rc for rc, _ in results] in ([0, 0], [1, 1]), results
    report = Report.from_dict(load(tmp_path / "r0.json"))
    recs = {r.id: r for r in recommend(report, layout="tp=2,dp=2")}
    ev = recs["layout_tp_dp"].evidence
    assert ev["islands"] == ["0,1", "2,3"] and ev["island_source"] == "matrix"
    # the shaped link (0.025 GB/s) against loopback, which 4 ranks on 2 CPUs measure anywhere in 0.2-2 GB/s
    assert ev["gap_below_GBps"] < 0.03 and ev["gap_above_GBps"] > 0.1
    assert recs["layout_tp_dp"].value == "dp=2,tp=2" and "init_device_mesh" in recs["layout_tp_dp"].snippet
    assert recs["layout_ddp"].value == "keep the default"  # torchrun numbers ranks node after node
    check = recs["layout_check"]
    assert check.value == "use dp=2,tp=2"  # as written, TP pairs (0,2) and (1,3) cross nodes
    assert check.evidence["tp_groups_spanning_islands"] == 2
