"""Detection: the report fixtures, reports built offline from snapshots of tests/fixtures (through
the real topology checks), and what a report too thin to tell gets (nothing)."""

from __future__ import annotations

import copy
import json

import pytest
from helpers import REPO
from topo.conftest import DATA, fixture
from topo.fake_nvml import make_pynvml, state_from_smi_q

from ddpdoctor.baselines import detect_profile, detection, list_profiles, resolve_profile
from ddpdoctor.core.report import CheckResult, Report
from ddpdoctor.core.run_info import RunInfo
from ddpdoctor.model.profiles.detect import report_facts
from ddpdoctor.model.topology.node import NodeTopology
from ddpdoctor.probes.collect import collect_node
from ddpdoctor.probes.nccl_xml import nccl_to_node, parse_nccl_topo
from ddpdoctor.runtime.topo_offline import diagnose

TUI_DATA = REPO / "tests" / "tui" / "data"


def _name(report) -> str | None:
    p = detect_profile(report)
    return p.name if p else None


def snapshot_report(nodes: list[NodeTopology], backend: str = "nccl", ranks_per_node: int = 8) -> Report:
    """A report whose topology checks ran (offline, through the checks' own code) on these nodes."""
    ranks = [
        {"rank": i * ranks_per_node + j, "local_rank": j, "node_rank": i, "hostname": n.hostname}
        for i, n in enumerate(nodes)
        for j in range(ranks_per_node)
    ]
    return Report(
        run=RunInfo(backend=backend, world_size=len(ranks), nodes=[n.hostname for n in nodes]),
        ranks=ranks,
        checks=diagnose(nodes),
    )


def snapshot(name: str, host: str | None = None) -> NodeTopology:
    node = NodeTopology.from_dict(json.loads((DATA / name).read_text()))
    if host:
        node.hostname = host
    return node


def nvml_node(smi_q: str, nvlinks: int, host: str) -> NodeTopology:
    state = state_from_smi_q(fixture(f"nvidia-smi/{smi_q}").read_text(), nvlinks)
    return collect_node(
        root="/nonexistent", env={}, nvml=make_pynvml(state), hostname=host, dmabuf_probe=False
    )


# -- the report fixtures ---------------------------------------------------------------------------------
def test_gloo_report_gets_the_cpu_profile():
    assert _name(json.loads((TUI_DATA / "report_2x2_gloo.json").read_text())) == "cpu-gloo"


def test_gpu_node_report_gets_dgx_h100():
    doc = json.loads((TUI_DATA / "report_gpu_node.json").read_text())
    best = detection(doc)[0]
    assert best.profile.name == "dgx-h100" and best.qualifies
    assert set(best.satisfied) == {"backend", "gpu_model", "gpus_per_node", "nvlink", "nics"}
    # the cloud H100 profiles are ruled out by the NICs the report shows, not by chance
    by_name = {m.profile.name: m for m in detection(doc)}
    assert any("EFA" in v for v in by_name["aws-p5-48xlarge"].violated)
    assert any("mlx5_ib" in v for v in by_name["azure-nd-h100-v5"].violated)
    assert any("RDMA NIC" in v for v in by_name["gcp-a3-highgpu-8g"].violated)


# -- reports built from tests/fixtures snapshots ------------------------------------------------------
def test_hgx_h100_snapshots_get_dgx_h100():
    rep = snapshot_report([snapshot("hgx-h100-a.json"), snapshot("hgx-h100-b.json")])
    facts = report_facts(rep)
    assert (
        facts.nodes["hgx-a"].gpu_names[0] == "NVIDIA H100 80GB HBM3" and facts.nodes["hgx-a"].nvlink is True
    )
    assert facts.nodes["hgx-a"].gpu_count == 8 and facts.nodes["hgx-a"].pcie_gen == 5
    assert _name(rep) == "dgx-h100"


def test_rtx_4090_box_gets_the_pcie_gen4_profile():
    rep = snapshot_report([nvml_node("nvidia-smi-q.rtx4090.x8.535.154.05.txt", 0, "box")])
    facts = report_facts(rep).nodes["box"]
    assert (facts.gpu_count, facts.nvlink, facts.pcie_gen) == (8, False, 4)
    assert _name(rep) == "pcie-gen4-8gpu"


def test_h100_with_p5_efa_nics_gets_aws_p5():
    node = nvml_node("nvidia-smi-q.h100-80gb-hbm3.x8.535.183.01.txt", 18, "p5")
    node.nics = nccl_to_node(
        parse_nccl_topo(fixture("nccl-topo/aws-p5.48xl-topo.pr1226.xml").read_text())
    ).nics
    rep = snapshot_report([node])
    kinds = {(n.kind, n.rate_Gbps) for n in report_facts(rep).nodes["p5"].nics}
    assert kinds == {("EFA", 100.0)}
    assert _name(rep) == "aws-p5-48xlarge"


def test_h100_with_azure_hca_names_gets_azure_and_without_rdma_gets_gcp():
    node = snapshot("hgx-h100-a.json", "ndv5")
    for i, nic in enumerate(node.nics):
        nic.name = f"mlx5_ib{i}"  # the names Azure HPC images give the 8 HCAs
    assert _name(snapshot_report([node])) == "azure-nd-h100-v5"
    node.nics = []  # GPUDirect-TCPX nodes have no RDMA device
    assert _name(snapshot_report([node])) == "gcp-a3-highgpu-8g"


def test_a_node_without_gpu_is_no_gpu_profile():
    node = collect_node(root="/nonexistent", env={}, nvml=make_pynvml(None, init_error=9), hostname="cpu")
    rep = snapshot_report([node], backend="nccl", ranks_per_node=1)
    assert report_facts(rep).nodes["cpu"].gpu_count == 0
    assert _name(rep) is None


def test_mixed_nodes_match_no_single_profile():
    rtx = nvml_node("nvidia-smi-q.rtx4090.x8.535.154.05.txt", 0, "box")
    rep = snapshot_report([snapshot("hgx-h100-a.json"), rtx])
    assert _name(rep) is None
    h100 = {m.profile.name: m for m in detection(rep)}["dgx-h100"]
    assert any("on box" in v for v in h100.violated)


def test_without_gpu001_the_nvl001_and_ib001_payloads_still_tell():
    rep = snapshot_report([snapshot("hgx-h100-a.json")])
    rep.checks = [c for c in rep.checks if c.code != "GPU001"]
    rep.checks += env_report(["NVIDIA H100 80GB HBM3"] * 8, host="hgx-a").checks
    facts = report_facts(rep).nodes["hgx-a"]
    assert facts.nvlink is True  # NVL001's matrix
    assert facts.gpu_count == 8  # NUMA001 lists the node's GPUs
    assert set(facts.gpu_names) == {"NVIDIA H100 80GB HBM3"}  # ENV001's torch names
    assert [n.kind for n in facts.nics].count("InfiniBand") == 8
    assert _name(rep) == "dgx-h100"


# -- thinner reports ---------------------------------------------------------------------------------------
def env_report(names: list[str], host="n0", backend="nccl") -> Report:
    per_rank = {
        str(i): {"hostname": host, "gpu": {"index": i, "name": n, "uuid": f"GPU-{i}"}}
        for i, n in enumerate(names)
    }
    return Report(
        run=RunInfo(backend=backend),
        ranks=[{"rank": i, "hostname": host} for i in range(len(names))],
        checks=[CheckResult("ENV001", "Environment", data={"per_rank": per_rank})],
    )


def test_env_only_h100_report_prefers_the_generic_system_over_clouds():
    rep = env_report(["NVIDIA H100 80GB HBM3"] * 2)
    best = detection(rep)[0]
    assert best.profile.name == "dgx-h100"
    assert set(best.unknown) == {"gpus_per_node", "nvlink", "nics"}  # what the report could not tell
    assert _name(env_report(["NVIDIA H200"] * 4)) == "hgx-h200"
    assert _name(env_report(["NVIDIA A100-SXM4-80GB"] * 8)) == "dgx-a100"


def test_env_lower_bound_on_gpu_count_rules_profiles_out():
    assert _name(env_report(["NVIDIA H100 80GB HBM3"] * 16)) is None  # 16 GPUs on one node: not an 8-GPU box


def test_too_little_to_tell_gives_none():
    assert _name(Report(run=RunInfo(backend="nccl"))) is None  # a GPU profile needs more than the backend
    assert _name(Report(run=RunInfo())) is None
    assert _name(env_report(["NVIDIA GeForce RTX 4090"] * 2)) is None  # only PCIe profiles, which need facts


def test_resolve_profile_chosen_detected_or_none(tmp_path):
    doc = json.loads((TUI_DATA / "report_2x2_gloo.json").read_text())
    p, how, det = resolve_profile(doc)
    assert (p.name, how, det.profile.name) == ("cpu-gloo", "detected", "cpu-gloo")
    p, how, det = resolve_profile(doc, "dgx-h100")
    assert (p.name, how, det) == ("dgx-h100", "chosen", None)
    assert resolve_profile(Report(run=RunInfo(backend="nccl"))) == (None, "none", None)


def test_detection_does_not_change_the_report():
    doc = json.loads((TUI_DATA / "report_gpu_node.json").read_text())
    before = copy.deepcopy(doc)
    detection(doc, list_profiles())
    assert doc == before


@pytest.mark.parametrize("fixture_name", ["report_2x2_gloo.json", "report_gpu_node.json"])
def test_facts_say_where_they_came_from(fixture_name):
    facts = report_facts(json.loads((TUI_DATA / fixture_name).read_text()))
    assert facts.backend in ("gloo", "nccl")
    if fixture_name == "report_gpu_node.json":
        assert facts.sources and all(host == "gpu-h100-07" for host in facts.nodes)
