"""The typed check payloads: each writes exactly the JSON its check always wrote, reads it back, and reads
the reports main wrote before the payloads were typed (tests/fixtures/reports_v1, see its README)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from alg_payloads import MiB, alpha_beta, rank_payloads, world
from helpers import REPO

from ddpdoctor.cli import main
from ddpdoctor.core.payload import LabeledMatrix, PlotCurve
from ddpdoctor.core.report import Report
from ddpdoctor.model.bandwidth.curve import BandFit
from ddpdoctor.model.bandwidth.payloads import (
    BwSweepPayload,
    LinkClass,
    P2PPayload,
    ProfileComparison,
    SweepRow,
)
from ddpdoctor.model.nodes.environment import EnvPayload, NodeEnv, RankEnv, RankGpu
from ddpdoctor.model.profiles.detect import report_facts
from ddpdoctor.model.topology.payloads import ListedNic, NodeEntry, TopologyPayload, host_lists
from ddpdoctor.model.tuning.algo_ab import AbFailure, AbRow, AlgAbPayload, GpuFacts
from ddpdoctor.recommend import recommend_from_report

OLD = REPO / "tests" / "fixtures" / "reports_v1"
OLD_REPORTS = sorted(p.name for p in OLD.glob("*.json"))
TOPOLOGY_CODES = ("GPU001", "NVL001", "PCI001", "NUMA001", "IB001", "GDR001", "NCCL001")
TYPES = {"ALG001": AlgAbPayload, "P2P001": P2PPayload, "BW001": BwSweepPayload, "ENV001": EnvPayload}
TYPES.update({code: TopologyPayload for code in TOPOLOGY_CODES})


def _typed_checks(name: str):
    doc = json.loads((OLD / name).read_text())
    return [(c["code"], TYPES[c["code"]], c["data"]) for c in doc["checks"] if c["code"] in TYPES]


def test_the_old_reports_cover_every_typed_payload():
    seen = {code for name in OLD_REPORTS for code, _, _ in _typed_checks(name)}
    assert {"ALG001", "P2P001", "BW001", "ENV001", "GPU001", "NVL001", "IB001", "NUMA001"} <= seen


@pytest.mark.parametrize("name", OLD_REPORTS)
def test_old_report_payloads_read_back_and_write_the_same_json(name):
    for code, kind, data in _typed_checks(name):
        payload = kind.from_json(data)
        assert payload.to_json() == data, code
        # ... and through a JSON file and back again, to the same typed value
        assert kind.from_json(json.loads(json.dumps(payload.to_json()))) == payload, code


def test_live_payloads_keep_their_key_order():
    """A live run's payload is written in the order the check always wrote it (the file reads the same)."""
    for code, kind, data in _typed_checks("check_gloo_2ranks.json") + _typed_checks("topo_from_snapshots.json"):
        assert json.dumps(kind.from_json(data).to_json()) == json.dumps(data), code


def test_the_old_reports_read_show_and_recommend(capsys):
    for name in OLD_REPORTS:
        report = Report.from_dict(json.loads((OLD / name).read_text()))
        recommend_from_report(report)  # nccl_algo, bucket_cap, ... read the typed payloads
        assert main(["report", "show", str(OLD / name)]) in (0, 1)
    assert "P2P001" in capsys.readouterr().out


def test_old_gloo_report_alg001_is_read_as_measured_in_test_mode():
    report = Report.from_dict(json.loads((OLD / "check_gloo_2ranks.json").read_text()))
    alg = AlgAbPayload.from_json(report.check("ALG001").data)
    assert alg.applies and alg.test_mode and alg.backend == "gloo"
    assert set(alg.arms) >= {"default", "Ring"} and alg.results and all(isinstance(r, AbRow) for r in alg.results)
    p2p = P2PPayload.from_json(report.check("P2P001").data)
    assert p2p.median_GBps("intra_node") > 0 and p2p.matrix.unit == "GB/s" and p2p.mode in ("pairs", "sequential")
    bw = BwSweepPayload.from_json(report.check("BW001").data)
    assert bw.backend == "gloo" and bw.all_reduce is not None and "all_reduce" in bw.busbw
    gpu = TopologyPayload.from_json(report.check("GPU001").data)
    assert gpu.nodes is None and all(why.startswith("skipped") for why in gpu.skipped.values())


def test_old_topology_report_gives_its_snapshots_to_topo_and_detection(capsys):
    report = Report.from_dict(json.loads((OLD / "topo_from_snapshots.json").read_text()))
    snaps = TopologyPayload.from_json(report.check("GPU001").data).snapshots()
    assert len(snaps) == 2 and all("gpus" in s for s in snaps.values())
    facts = report_facts(report)
    assert set(facts.nodes) == set(snaps) and all(n.gpu_count == 8 and n.nvlink for n in facts.nodes.values())
    assert main(["topo", "--from", str(OLD / "topo_from_snapshots.json")]) in (0, 1)
    assert "from 2 snapshot(s): hgx-a, hgx-c" in capsys.readouterr().out


def test_imported_payloads_keep_their_own_keys():
    report = Report.from_dict(json.loads((OLD / "import_nccl_tests_p2p.json").read_text()))
    p2p = P2PPayload.from_json(report.check("P2P001").data)
    assert p2p.latency is None and p2p.source["tool"] and p2p.matrices and p2p.expected_GBps
    assert "latency" not in p2p.to_json() and "size_B" not in p2p.to_json()
    bw = BwSweepPayload.from_json(report.check("BW001").data)
    assert bw.source["tool"] == "nccl-tests" and bw.backend == "nccl"
    rows = bw.ops["all_reduce"]
    assert rows and all(r.iters is None and r.dtype and r.line for r in rows)


# -- payloads built here ------------------------------------------------------------------------------------
def _roundtrip(payload):
    back = type(payload).from_json(json.loads(json.dumps(payload.to_json())))
    assert back == payload
    assert back.to_json() == payload.to_json()
    return back


def test_alg001_summary_round_trips_with_failures_and_gpu():
    from ddpdoctor.checks.alg001_nccl_algo import summarize

    fail = {("Tree", 1, 3): "NCCL error: unhandled system error"}
    s = summarize(rank_payloads(alpha_beta(20, 100), n=8, per_node=4, fail=fail), world(8, 4))
    payload = AlgAbPayload.from_json(s.data)
    assert payload.to_json() == s.data
    assert payload.gpu == GpuFacts("NVIDIA H100 80GB HBM3", 90, 18) and payload.nnodes == 2
    assert payload.failures == (
        AbFailure("Tree", 1, 3, fail[("Tree", 1, 3)], "rank 3 log: NCCL WARN something",
                  {"3": fail[("Tree", 1, 3)]}),
    )  # fmt: skip
    assert {r.size_B for r in payload.results} == {1 * MiB, 25 * MiB, 256 * MiB}
    _roundtrip(payload)


def test_alg001_not_applicable_round_trips():
    from ddpdoctor.checks.alg001_nccl_algo import summarize

    s = summarize({0: {"applies": False, "backend": "gloo"}, 1: {"applies": False, "backend": "gloo"}},
                  world(2, 2, "gloo"))  # fmt: skip
    assert s.data == {"applies": False, "backend": "gloo", "reason": "NCCL_ALGO only changes NCCL; this run used gloo"}
    assert _roundtrip(AlgAbPayload.from_json(s.data)).applies is False


def test_bandwidth_and_topology_payloads_round_trip():
    m = LabeledMatrix(("r0@a", "r1@b"), ((None, 2.5), (1.5, None)), unit="GB/s")
    _roundtrip(
        P2PPayload(
            matrix=m, latency=LabeledMatrix(m.labels, ((None, 10.0), (12.0, None)), unit="us"), size_B=8 * MiB,
            mode="pairs", plan="full", rounds=1, target_s=0.1, pairs=({"from": 0, "to": 1, "GBps": 2.5},),
            remeasured_alone=((1, 0),), unconfirmed=(), pairs_measured=2, pairs_possible=2,
            ranks=({"rank": 0, "node_rank": 0, "local_rank": 0, "hostname": "a"},),
            classes={"inter_node": LinkClass(2.0, 2, 2.5, "two parties only")}, outliers=((1, 0),),
            asymmetric=({"a": 0, "b": 1, "ratio": 0.6},), localization={"slow_nodes": [], "slow_ranks": []},
        )
    )  # fmt: skip
    curve = PlotCurve(((1024, 1e-5), (2048, 1.5e-5)), unit_y="s")
    _roundtrip(
        BwSweepPayload(
            sizes_B=(1024, 2048), ops={"all_reduce": (SweepRow(1024, 10.0, 0.1, 0.1, 5, True, slowest_rank=1),)},
            busbw={"all_reduce": PlotCurve(((1024, 0.1),), unit_y="GB/s")}, times={"all_reduce": curve},
            fit={"all_reduce": (BandFit(1024, 2048, 9.0, None, None, 2),)}, all_reduce=curve, world_size=2, nnodes=1,
            backend="gloo", stopped={"at_size_B": 4096, "elapsed_s": 1.0, "estimated_s": 2.0},
            expected_busbw_GBps=1.0, profile=ProfileComparison("cpu-gloo", "all_reduce_busbw_intra_node", 0.5, 2048, 50.0),
        )
    )  # fmt: skip
    topo = _roundtrip(
        TopologyPayload(
            nodes={"a": NodeEntry({"gpu_count": 8}, {"topology": {"hostname": "a"}}), "b": NodeEntry({"gpu_count": 8})},
            skipped={"c": "skipped: no NVIDIA GPU"},
        )
    )
    assert topo.snapshots() == {"a": {"hostname": "a"}}
    _roundtrip(TopologyPayload(skipped={"c": "skipped: no NVIDIA GPU"}))


def test_readers_take_partial_and_malformed_payloads():
    """A hand-edited or older report: missing keys give the defaults, wrong JSON types are left out."""
    assert AlgAbPayload.from_json({}) == AlgAbPayload()
    bad = AlgAbPayload.from_json({"nnodes": "2", "results": [{"arm": "Ring"}, 3], "gpu": [1], "arms": ["Ring", 4]})
    assert bad.nnodes is None and bad.results == () and bad.gpu is None and bad.arms == ("Ring",)
    p2p = P2PPayload.from_json({"classes": {"intra_node": {"median_GBps": 300.0}}, "outliers": [[0, 1], [True, 2], "x"]})
    assert p2p.median_GBps("intra_node") == 300.0 and p2p.median_GBps("inter_node") is None
    assert p2p.outliers == ((0, 1),) and p2p.matrix is None
    assert TopologyPayload.from_json({"nodes": {"a": 3}}).nodes == {}
    assert BwSweepPayload.from_json({"busbw": {"x": {"points": [[1, "a"], [2, 3.0]]}}}).busbw["x"].points == ((2, 3.0),)


def test_host_lists_read_flat_and_per_node_shapes():
    flat = host_lists("NVL001", {"gpus": [{"name": "H100"}], "nvlink": {"values": [[0, 18], [18, 0]]}}, "h",
                      inside_data=False)  # fmt: skip
    assert flat["h"].gpus == ({"name": "H100"},) and flat["h"].nvlink_matrix.values == ((0, 18), (18, 0))
    per_node = {"nodes": {"a": {"facts": {}, "data": {"matrix": {"values": [[0, 1], [1, 0]]}}}}}
    assert host_lists("NVL001", per_node, "h", inside_data=True)["a"].nvlink_matrix is not None
    assert host_lists("NVL001", per_node, "h", inside_data=False)["a"].nvlink is None


def test_env_payload_round_trips_with_a_gpu():
    rank = RankEnv(hostname="a", node_rank=0, local_rank=1, torch="2.13.0", nccl="2.21.5", driver="550.54",
                   gpu=RankGpu(1, "NVIDIA H100", "GPU-1", 24), cpu_count=64, mem_total_GiB=2015.5,
                   interfaces={"ib0": {"addrs": ["10.0.0.1"], "up": True}}, socket_ifname_var="NCCL_SOCKET_IFNAME",
                   socket_ifname="ib0", env={"NCCL_DEBUG": "INFO"})  # fmt: skip
    payload = _roundtrip(EnvPayload({"a": NodeEnv.of(rank, (1,))}, {"1": rank}))
    assert payload.nodes["a"].nccl == "2.21.5" and payload.nodes["a"].ranks == (1,)


def test_fleet_outputs_read_the_old_reports_payloads():
    """diff, Prometheus metrics and Kubernetes labels read BW001's rows and P2P001's matrices typed."""
    from ddpdoctor.model.fleet import diff, k8s_labels, metrics

    old = Report.from_dict(json.loads((OLD / "check_gloo_2ranks.json").read_text()))
    new = Report.from_dict(json.loads((OLD / "check_gloo_2ranks.json").read_text()))
    bw_new = BwSweepPayload.from_json(new.check("BW001").data)
    slower = {op: tuple(replace(r, busbw_GBps=r.busbw_GBps / 10) for r in rows) for op, rows in bw_new.ops.items()}
    new.check("BW001").data = replace(bw_new, ops=slower).to_json()
    kinds = {c.kind for c in diff.diff_reports(old, new).changes}
    assert "busbw" in kinds and not kinds & {"p2p", "latency"}
    text = metrics.render(old)
    assert "nccl_bus_bandwidth_gbs{" in text and "ddpdoctor_p2p_bandwidth_gbs{" in text
    assert "ddpdoctor_p2p_latency_microseconds{" in text
    top = max(bw_new.ops["all_reduce"], key=lambda r: r.size_B).busbw_GBps
    assert k8s_labels._busbw(old) == top


def test_a_busbw_of_one_curve_or_with_a_shared_unit_reads_as_curves_per_collective():
    one = BwSweepPayload.from_json({"busbw": {"unit_y": "GB/s", "points": [[8, 3.0]]}})
    assert one.busbw == {"all_reduce": PlotCurve(((8, 3.0),), unit_y="GB/s")}
    shared = BwSweepPayload.from_json({"busbw": {"unit_y": "GB/s", "all_gather": {"points": [[8, 2]]}}})
    assert shared.busbw == {"all_gather": PlotCurve(((8, 2),), unit_y="GB/s")}


def test_listed_nics_read_ib001_and_the_flat_shape_alike():
    ib001 = {"nodes": {"a": {"facts": {}, "data": {"nics": [{"name": "mlx5_0", "kind": "InfiniBand",
                                                              "rate_Gbps": 400.0, "ports_up": 1, "ports": 1}]}}}}
    flat = {"nics": [{"name": "mlx5_1", "state": "ACTIVE", "rate_gbps": 200, "link_layer": "Ethernet"}, {"name": "x"}]}
    assert host_lists("IB001", ib001, "h", inside_data=True)["a"].listed_nics == [ListedNic("mlx5_0", "InfiniBand", 400.0)]
    assert host_lists("X001", flat, "h", inside_data=False)["h"].listed_nics == [
        ListedNic("mlx5_1", "RoCE", 200.0), ListedNic("x", "RDMA", None)]
    assert host_lists("X001", {"nics": ["mlx5_0"]}, "h", inside_data=False)["h"].listed_nics is None


def test_the_tui_reads_the_old_reports():
    from ddpdoctor.tui import adapt

    gloo = Report.from_dict(json.loads((OLD / "check_gloo_2ranks.json").read_text()))
    p2p = adapt.p2p_view(gloo)
    assert p2p.code == "P2P001" and p2p.matrix.size == 2 and p2p.matrix.unit == "GB/s"
    bw = adapt.bandwidth_view(gloo)
    assert {c.name for c in bw.curves} >= {"all_reduce"} and bw.times is not None and bw.times.unit_y == "s"
    imported = Report.from_dict(json.loads((OLD / "import_nccl_tests_p2p.json").read_text()))
    assert adapt.p2p_view(imported).matrix.size == 8 and adapt.bandwidth_view(imported).expected == 360.0  # the H100 profile's
