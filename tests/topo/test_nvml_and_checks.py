"""The NVML probe against a recorded double, the checks on this GPU-less machine and on recorded
per-rank data, snapshots and the offline cluster diagnosis."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ddpdoctor.core.report import Status
from ddpdoctor.core.world import WorldInfo
from ddpdoctor.model.topology.node import NodeTopology
from ddpdoctor.probes.collect import collect_node
from ddpdoctor.probes.nvml import NoGpu, read_nvml
from ddpdoctor.registry import discover
from ddpdoctor.runtime.context import ClusterContext
from ddpdoctor.runtime.topo_offline import diagnose

from .conftest import DATA, fixture
from .fake_nvml import make_pynvml, state_from_smi_q

CODES = ("GPU001", "NVL001", "PCI001", "NUMA001", "IB001", "GDR001", "NCCL001")


def h100(hostname="hgx", **edits):
    state = state_from_smi_q(
        fixture("nvidia-smi/nvidia-smi-q.h100-80gb-hbm3.x8.535.183.01.txt").read_text(), 18
    )
    return collect_node(
        root="/nonexistent-root", env={}, nvml=make_pynvml(state), hostname=hostname, dmabuf_probe=False
    )


def test_nvml_reading_from_recorded_h100():
    state = state_from_smi_q(
        fixture("nvidia-smi/nvidia-smi-q.h100-80gb-hbm3.x8.535.183.01.txt").read_text(), 18
    )
    r = read_nvml(make_pynvml(state))
    assert r.driver_version == "535.183.01" and r.cuda_driver_version == "12.2"
    assert len(r.gpus) == 8 and r.gpus[0].busid == "0000:53:00.0" and r.gpus[7].busid == "0000:ca:00.0"
    g = r.gpus[0]
    assert g.name == "NVIDIA H100 80GB HBM3" and g.uuid == "GPU-566e6f65-c38e-b12f-4824-6944218668b9"
    assert g.memory_MiB == 81559 and g.ecc_enabled and g.ecc_uncorrected_volatile == 0
    assert (g.pcie.cur_gen, g.pcie.max_gen, g.pcie.cur_width, g.pcie.max_width) == (5, 5, 16, 16)
    assert g.retired_pages == 0 and g.retired_pending is False and len(g.nvlinks) == 18
    assert r.gpus[2].throttle_reasons == ["sw_power_cap", "sw_thermal_slowdown", "hw_power_brake_slowdown"]
    assert r.paths[("GPU0", "GPU1")] == "PXB" and r.paths[("GPU0", "GPU4")] == "SYS"
    assert all(r.p2p.values())


def test_probe_builds_nv18_matrix_through_switches():
    node = h100()
    assert {node.path("GPU0", f"GPU{j}") for j in range(1, 8)} == {"NV18"}


@pytest.mark.parametrize("error, why", [(12, "Library Not Found"), (9, "Driver Not Loaded")])
def test_no_driver_is_no_gpu_never_a_crash(error, why):
    with pytest.raises(NoGpu, match=why):
        read_nvml(make_pynvml(None, init_error=error))
    node = collect_node(root="/nonexistent-root", env={}, nvml=make_pynvml(None, init_error=error))
    assert node.no_gpu_reason.startswith("no NVIDIA GPU") and node.gpus == []


def test_zero_devices_is_no_gpu():
    with pytest.raises(NoGpu, match="0 devices"):
        read_nvml(make_pynvml({"gpus": [], "driver": "1", "cuda": ""}))


def test_real_h100_throttle_finding_is_reported():
    results = {r.code: r for r in diagnose([h100()])}
    assert results["GPU001"].status is Status.WARNING
    assert [f.message for f in results["GPU001"].findings] == [
        "GPU 2 clocks held down by software thermal slowdown, external power brake"
    ]
    assert results["NVL001"].status is Status.PASSED and results["PCI001"].status is Status.PASSED


# -- the checks themselves ----------------------------------------------------------------------------


def _ctx(local_rank=0):
    world = WorldInfo.from_dicts([{"rank": 0, "local_rank": local_rank, "node_rank": 0, "hostname": "here"}])
    return ClusterContext(
        rank=0,
        world_size=1,
        local_rank=local_rank,
        local_world_size=1,
        node_rank=0,
        nnodes=1,
        hostname="here",
        backend="gloo",
        device="cpu",
        world=world,
    )


def test_checks_are_registered_with_docs():
    specs = {s.code: s for s in discover()}
    for code in CODES:
        assert code in specs and specs[code].kind == "cluster" and len(specs[code].doc) > 100


def test_checks_on_this_gpu_less_machine_say_skipped():
    from ddpdoctor.probes.nvml import _import_nvml

    try:
        read_nvml(_import_nvml())
        pytest.skip("this machine has an NVIDIA GPU")
    except NoGpu:
        pass
    specs = {s.code: s for s in discover()}
    for code in ("GPU001", "NVL001", "PCI001", "NUMA001", "GDR001", "NCCL001"):
        mod = specs[code].module
        data = mod.run(_ctx())
        json.dumps(data)  # JSON-able
        s = mod.summarize({0: data}, _ctx().world)
        assert s.final_status() is Status.SKIPPED and s.summary.startswith("skipped: no NVIDIA GPU"), code


def test_non_leader_returns_little():
    specs = {s.code: s for s in discover()}
    data = specs["GPU001"].module.run(_ctx(local_rank=1))
    assert data["leader"] is False and "findings" not in data


def test_summarize_flags_odd_node_from_recorded_dicts():
    gpu = {s.code: s for s in discover()}["GPU001"].module
    ok = gpu.payload(h100("a"))
    world = WorldInfo.from_dicts([{"rank": i, "node_rank": i, "hostname": h} for i, h in enumerate("abc")])
    short = json.loads(json.dumps(ok))
    short.update(node="c", facts={**ok["facts"], "GPU count": 7})
    b = {**ok, "node": "b"}
    s = gpu.summarize({0: ok, 1: b, 2: short}, world)
    odd = [f for f in s.findings if f.message.startswith("odd node")]
    assert [f.message for f in odd] == ["odd node c: GPU count is 7 where 2 other node(s) have 8"]
    assert s.final_status() is Status.FAILED
    lost = gpu.summarize({0: ok, 1: b, 2: None}, world)
    assert any("node c sent no topology" in f.message for f in lost.findings)


def test_numa_summarize_flags_rank_far_from_its_gpu():
    numa = {s.code: s for s in discover()}["NUMA001"].module
    node = NodeTopology.from_dict(json.loads((DATA / "asus-node.json").read_text()))
    leader = {**numa.payload(node), "local_rank": 0, "cpus": list(range(32))}
    far = {"node": node.hostname, "leader": False, "local_rank": 2, "cpus": list(range(32))}
    world = WorldInfo.from_dicts(
        [
            {"rank": 0, "local_rank": 0, "hostname": node.hostname},
            {"rank": 1, "local_rank": 2, "hostname": node.hostname},
        ]
    )
    s = numa.summarize({0: leader, 1: far}, world)
    assert [f.message for f in s.findings] == [
        "local rank 2 runs on CPUs 0-31, all far from GPU 2 (NUMA node 1, CPUs 32-63)"
    ]


# -- snapshots -----------------------------------------------------------------------------------------


def test_snapshot_round_trip():
    node = h100()
    again = NodeTopology.from_dict(json.loads(json.dumps(node.to_dict())))
    assert again == node
    with pytest.raises(ValueError, match="not a ddpdoctor topology snapshot"):
        NodeTopology.from_dict({"hostname": "x"})


def test_offline_diagnosis_from_fixture_snapshots_flags_the_odd_node():
    nodes = [
        NodeTopology.from_dict(json.loads((DATA / f).read_text()))
        for f in ("hgx-h100-a.json", "hgx-h100-b.json", "hgx-h100-c-nopeermem.json")
    ]
    results = {r.code: r for r in diagnose(nodes)}
    gdr = results["GDR001"]
    assert [f.message.split(":")[0] for f in gdr.findings] == ["odd node hgx-c"]
    assert gdr.findings[0].where["node"] == "hgx-c" and len(gdr.findings[0].where["gpus"]) == 8
    assert all(r.status is not Status.ERROR for r in results.values())
    with pytest.raises(ValueError, match="same host"):
        diagnose([nodes[0], nodes[0]])


def test_checks_do_not_import_torch_or_textual():
    code = (
        "import sys, ddpdoctor.registry as r; r.discover(); import ddpdoctor.runtime.topo_offline, "
        "ddpdoctor.probes.collect, ddpdoctor.commands.topo; "
        "bad=[m for m in ('torch','textual') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def _snap(name):
    return NodeTopology.from_dict(json.loads((DATA / name).read_text()))


def _set_rate(node, gbps):
    for nic in node.nics:
        nic.ports[0].rate_gbps = gbps


@pytest.mark.parametrize(
    "code, change, words",
    [
        ("GPU001", lambda n: n.gpus.pop(), "GPU count is 7 where 2 other node(s) have 8"),
        ("GPU001", lambda n: setattr(n, "driver_version", "550.54.15"), "driver is 550.54.15 where 2 other"),
        (
            "GPU001",
            lambda n: [setattr(g, "name", "NVIDIA H200") for g in n.gpus],
            "GPU models is NVIDIA H200",
        ),
        (
            "IB001",
            lambda n: _set_rate(n, 200.0),
            "active NIC rates (Gb/s) is 200×8 where 2 other node(s) have 400×8",
        ),
        (
            "GDR001",
            lambda n: setattr(n.peermem, "found", []),
            # one cause: said once, as the node's GDR finding, not again as "peer memory is missing"
            "GPUDirect RDMA is off for all 8 GPU↔NIC pairs: nvidia_peermem is not loaded",
        ),
        (
            "NCCL001",
            lambda n: n.env.update(NCCL_IB_HCA="mlx5"),
            "NCCL_IB_HCA is mlx5 where 2 other node(s) have unset",
        ),
    ],
)
def test_odd_node_is_named_for_each_fact(code, change, words):
    nodes = [_snap("hgx-h100-a.json"), _snap("hgx-h100-b.json"), _snap("hgx-h100-a.json")]
    nodes[2].hostname = "hgx-odd"
    clean = {r.code: r for r in diagnose([_snap("hgx-h100-a.json"), _snap("hgx-h100-b.json")])}
    assert not [f for f in clean[code].findings if "odd node" in f.message or "disagree" in f.message]
    change(nodes[2])
    result = {r.code: r for r in diagnose(nodes)}[code]
    odd = [f.message for f in result.findings if f.message.startswith("odd node hgx-odd")]
    assert any(words in m for m in odd), [f.message for f in result.findings]


def test_two_nodes_that_disagree_are_both_named():
    a, b = _snap("hgx-h100-a.json"), _snap("hgx-h100-c-nopeermem.json")
    gdr = {r.code: r for r in diagnose([a, b])}["GDR001"]
    disagree = sorted(f.message for f in gdr.findings if "disagree" in f.message)
    assert disagree == [
        "nodes disagree on GPUs with GPUDirect RDMA: hgx-a has 8; hgx-c has 0",
        "nodes disagree on peer memory: hgx-a has present; hgx-c has missing",
    ]


def test_numa_uses_the_gpu_a_rank_reports_over_its_local_rank():
    numa = {s.code: s for s in discover()}["NUMA001"].module
    node = h100()
    for g in node.gpus:
        g.cpu_affinity = list(range(48)) if g.index < 4 else list(range(48, 96))
        g.numa_node = 0 if g.index < 4 else 1
    leader = {**numa.payload(node), "local_rank": 0, "cpus": list(range(48))}
    # Local rank 1 drives GPU 5 (CUDA_VISIBLE_DEVICES reordered) and runs on socket 0: far.
    other = {
        "node": "hgx",
        "leader": False,
        "local_rank": 1,
        "cpus": list(range(48)),
        "gpu_busid": node.gpus[5].busid,
    }
    world = WorldInfo.from_dicts(
        [{"rank": 0, "local_rank": 0, "hostname": "hgx"}, {"rank": 1, "local_rank": 1, "hostname": "hgx"}]
    )
    s = numa.summarize({0: leader, 1: other}, world)
    assert [f.message for f in s.findings] == [
        "local rank 1 runs on CPUs 0-47, all far from GPU 5 (NUMA node 1, CPUs 48-95)"
    ]


def test_a_lost_gpu_is_named_and_the_others_still_read():
    state = state_from_smi_q(
        fixture("nvidia-smi/nvidia-smi-q.h100-80gb-hbm3.x8.535.183.01.txt").read_text(), 18
    )
    fake = make_pynvml(state)
    real_name = fake.nvmlDeviceGetName

    def name(h):
        if h == 3:
            raise fake.NVMLError(15)  # NVML_ERROR_GPU_IS_LOST
        return real_name(h)

    fake.nvmlDeviceGetName = name
    node = collect_node(root="/nonexistent-root", env={}, nvml=fake, hostname="hgx", dmabuf_probe=False)
    assert len(node.gpus) == 8 and node.gpus[3].nvml_error and node.gpus[4].name == "NVIDIA H100 80GB HBM3"
    gpu = {r.code: r for r in diagnose([node])}["GPU001"]
    assert gpu.status is Status.FAILED
    assert [f.message for f in gpu.findings if f.severity.value == "error"] == [
        "GPU 3 cannot be read through NVML: GPU is lost"
    ]
    assert {r.code: r for r in diagnose([node])}["NVL001"].findings == []
