"""Faults derived from real fixtures one at a time, each found and named; the unmodified fixtures
raise none of them."""

from __future__ import annotations

import pytest
from ddpdoctor.checks.gdr001_gpudirect import gdr_findings
from ddpdoctor.checks.ib001_ports import ib_findings
from ddpdoctor.checks.nvl001_nvlink import nvlink_findings
from ddpdoctor.checks.pci001_pcie import pcie_findings

from ddpdoctor.model.topology.analysis import gdr_verdicts
from ddpdoctor.probes.collect import collect_node
from ddpdoctor.probes.nccl_xml import nccl_to_node, parse_nccl_topo
from ddpdoctor.probes.smi_topo import parse_topo_matrix, topo_to_node
from ddpdoctor.probes.sysfs import read_infiniband

from .conftest import fixture
from .fake_nvml import make_pynvml, state_from_smi_q

H100_Q = "nvidia-smi/nvidia-smi-q.h100-80gb-hbm3.x8.535.183.01.txt"


def h100_state():
    return state_from_smi_q(fixture(H100_Q).read_text(), nvlinks_per_gpu=18)


def probe(state, root="/nonexistent-root"):
    return collect_node(root=root, env={}, nvml=make_pynvml(state), hostname="hgx", dmabuf_probe=False)


def messages(findings):
    return [f.message for f in findings]


# -- NVLink down ---------------------------------------------------------------------------------------


def test_unmodified_h100_has_no_nvlink_finding():
    assert nvlink_findings(probe(h100_state())) == []


def test_nvlink_down_is_named_by_gpu_and_link():
    state = h100_state()
    state["gpus"][2]["nvlinks"][3][0] = False
    found = nvlink_findings(probe(state))
    assert any(f.message == "NVLink 3 of GPU 2 is down" for f in found), messages(found)
    assert all(f.where["gpu"] == 2 for f in found)


def test_nvlink_down_between_two_gpus_is_named_by_pair():
    state = h100_state()
    state["gpus"][2]["nvlinks"][3] = [False, state["gpus"][5]["busid"]]
    found = nvlink_findings(probe(state))
    assert "NVLink 3 between GPU 2 and GPU 5 is down" in messages(found)


def test_nvlink_missing_from_a_parsed_matrix_is_named():
    text = fixture("nvidia-smi-topo/dgx1-v100.8gpu.4nic-mlx5cols.spaces.txt").read_text()
    assert nvlink_findings(topo_to_node(parse_topo_matrix(text))) == []
    lines = text.splitlines()
    # GPU0<->GPU3 is NV2 in the real file; make it NV1 on both rows.
    lines[1] = lines[1].replace("NV2     NV2     SYS", "NV1     NV2     SYS", 1)
    lines[4] = lines[4].replace("NV2     NV1     NV2      X", "NV1     NV1     NV2      X", 1)
    found = nvlink_findings(topo_to_node(parse_topo_matrix("\n".join(lines))))
    assert messages(found) == [
        "NVLink between GPU 0 and GPU 3 is degraded: NV1 where the other GPUs suggest NV2"
    ]


def test_nvswitch_gpu_with_one_link_less_in_a_matrix():
    text = fixture("nvidia-smi-topo/hgx-h100-8gpu.nv18.no-nic.spaces.no-legend.txt").read_text()
    out = []
    for ln in text.splitlines():
        cells = ln.split()
        if cells and cells[0].startswith("GPU") and cells[0] != "GPU0" or ln.startswith("GPU0 "):
            # GPU 6 lost a link to the switches: every pair with GPU 6 shows NV17.
            cells = [c.replace("NV18", "NV17") for c in cells] if cells[0] == "GPU6" else cells
            if cells[0] != "GPU6":
                cells[7] = "NV17"
            ln = "\t".join(cells)
        out.append(ln)
    found = nvlink_findings(topo_to_node(parse_topo_matrix("\n".join(out))))
    assert len(found) == 1 and found[0].where["gpu"] == 6, messages(found)
    assert "GPU 6 has 119 NVLink connections" in found[0].message


# -- PCIe x8 ---------------------------------------------------------------------------------------------


def test_unmodified_h100_has_no_pcie_warning():
    assert [f for f in pcie_findings(probe(h100_state())) if f.severity.value != "info"] == []


def test_pcie_x8_is_found():
    state = h100_state()
    state["gpus"][4]["cur_width"] = 8
    found = [f for f in pcie_findings(probe(state)) if f.severity.value == "warning"]
    assert messages(found) == ["GPU 4 PCIe link runs at x8, capable of x16: host↔device bandwidth cut to 50%"]


def test_idle_gen1_on_rtx4090_is_only_a_note():
    state = state_from_smi_q(fixture("nvidia-smi/nvidia-smi-q.rtx4090.x8.535.154.05.txt").read_text())
    found = pcie_findings(probe(state))
    assert found and {f.severity.value for f in found} == {"info"}
    assert "Gen1, capable of Gen4" in found[0].message


# -- IB port down ----------------------------------------------------------------------------------------


def test_sysfs_ib_unmodified_all_active(ib_root):
    nics = read_infiniband(ib_root)
    assert [n.name for n in nics] == [
        "mlx5_0",
        "mlx5_1",
        "mlx5_4",
        "mlx5_5",
        "mlx5_6",
        "mlx5_7",
        "mlx5_8",
        "mlx5_9",
        "mlx5_bond_0",
    ]
    assert all(n.ports[0].up for n in nics)
    assert {(n.hca_type, n.rate_gbps, n.kind) for n in nics} == {
        ("MT4129", 400.0, "InfiniBand"),
        ("MT41692", 200.0, "RoCE"),
    }
    assert nics[0].fw_ver == "28.41.1000" and nics[0].ports[0].rate_text == "400 Gb/sec (4X NDR)"
    from ddpdoctor.model.topology.node import NodeTopology

    assert ib_findings(NodeTopology(hostname="h", nics=nics)) == []


def test_sysfs_ib_port_down_is_named(ib_root):
    port = ib_root / "sys/class/infiniband/mlx5_5/ports/1"
    (port / "state").write_text("1: DOWN\n")
    (port / "phys_state").write_text("3: Disabled\n")
    from ddpdoctor.model.topology.node import NodeTopology

    found = ib_findings(NodeTopology(hostname="h", nics=read_infiniband(ib_root)))
    assert messages(found) == ["InfiniBand port mlx5_5/1 is DOWN (physical state Disabled)"]
    assert found[0].severity.value == "error"


def test_sysfs_ib_slow_link_is_named(ib_root):
    (ib_root / "sys/class/infiniband/mlx5_7/ports/1/rate").write_text("200 Gb/sec (4X HDR)\n")
    from ddpdoctor.model.topology.node import NodeTopology

    found = ib_findings(NodeTopology(hostname="h", nics=read_infiniband(ib_root)))
    assert messages(found) == ["mlx5_7 links at 200 Gb/s where its sibling MT4129 NICs run at 400 Gb/s"]


# -- No peer memory --------------------------------------------------------------------------------------


def _ndv5_probed(tmp_path, peermem: bool, open_module=False):
    node = nccl_to_node(parse_nccl_topo(fixture("nccl-topo/azure-ndv5-topo.xml").read_text()))
    if peermem:
        (tmp_path / "sys/module/nvidia_peermem").mkdir(parents=True)
        (tmp_path / "sys/module/nvidia_peermem/version").write_text("535.183.01\n")
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01\n"
        if not open_module
        else "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.183.01\n"
    )
    from ddpdoctor.probes.sysfs import read_peermem

    node.peermem = read_peermem(tmp_path)
    return node


def test_peermem_present_gives_gdr_on(tmp_path):
    node = _ndv5_probed(tmp_path, peermem=True)
    assert gdr_findings(node) == []
    assert all(v.enabled and v.mechanism == "peermem" for v in gdr_verdicts(node))


def test_no_peermem_module_turns_gdr_off_and_says_why(tmp_path):
    found = gdr_findings(_ndv5_probed(tmp_path, peermem=False))
    # One cause, one finding (not eight identical ones, one per GPU↔NIC pair).
    assert len(found) == 1, messages(found)
    assert found[0].message.startswith("GPUDirect RDMA is off for all 8 GPU↔NIC pairs: nvidia_peermem is not loaded")
    assert "proprietary NVIDIA kernel module" in found[0].message
    assert found[0].where["gpus"] == list(range(8)) and found[0].where["nics"][0] == "NIC0"


def test_gdr_pairs_off_for_different_causes_stay_apart(tmp_path):
    node = _ndv5_probed(tmp_path, peermem=True)
    node.gpus[2].gdr_supported = False
    assert messages(gdr_findings(node)) == [
        "GPUDirect RDMA is off for GPU 2 ↔ NIC2: GPU 2 does not support GPUDirect RDMA"
    ]
    node.gpus[3].gdr_supported = node.gpus[5].gdr_supported = False
    node.env["NCCL_NET_GDR_LEVEL"] = "LOC"  # nearer than any pair: every other pair is off for distance
    assert messages(gdr_findings(node)) == [
        "GPUDirect RDMA is off for 5 GPU↔NIC pairs (GPU 0 ↔ NIC0, GPU 1 ↔ NIC1, GPU 4 ↔ NIC4, GPU 6 ↔ NIC6, "
        "GPU 7 ↔ NIC7): GPU and NIC are PIX apart, farther than NCCL_NET_GDR_LEVEL=LOC",
        "GPUDirect RDMA is off for 3 GPU↔NIC pairs (GPU 2 ↔ NIC2, GPU 3 ↔ NIC3, GPU 5 ↔ NIC5): "
        "the GPU does not support GPUDirect RDMA",
    ]


def test_no_peermem_but_open_module_allows_dmabuf(tmp_path):
    node = _ndv5_probed(tmp_path, peermem=False, open_module=True)
    assert gdr_findings(node) == [] and {v.mechanism for v in gdr_verdicts(node)} == {"dmabuf"}


# -- Nearest NIC across the socket -----------------------------------------------------------------------


def test_nearest_nic_sys_is_named():
    text = fixture("nvidia-smi-topo/h100-4gpu.nv6.4nic.spaces.no-legend.txt").read_text()
    node = topo_to_node(parse_topo_matrix(text))
    assert [f for f in ib_findings(node) if "across the socket" in f.message] == []
    # Move GPU 3's NIC away: its PIX entry (row GPU3 and row NIC3) becomes SYS.
    lines = [
        ln.replace("SYS     SYS     SYS     PIX     5,13", "SYS     SYS     SYS     SYS     5,13")
        if ln.startswith("GPU3")
        else ln
        for ln in text.splitlines()
    ]
    lines = [
        ln.replace("SYS     SYS     SYS     PIX     SYS", "SYS     SYS     SYS     SYS     SYS")
        if ln.startswith("NIC3")
        else ln
        for ln in lines
    ]
    node = topo_to_node(parse_topo_matrix("\n".join(lines)))
    found = [f for f in ib_findings(node) if "across the socket" in f.message]
    assert messages(found) == ["GPU 3's nearest NIC (NIC3) is across the socket (SYS)"]
    off = [v for v in gdr_verdicts(node) if v.gpu == 3]
    assert off[0].enabled is False and "SYS apart" in off[0].reason


@pytest.mark.parametrize(
    "name",
    ["azure-ndv5-topo.xml", "azure-ndv4-topo.xml", "aws-p4d-24xl-topo.xml", "aws-p5.48xl-topo.pr1226.xml"],
)
def test_rail_optimized_files_raise_no_fault(name):
    node = nccl_to_node(parse_nccl_topo(fixture(f"nccl-topo/{name}").read_text()))
    assert ib_findings(node) == [] and nvlink_findings(node) == [] and pcie_findings(node) == []


def test_p2p_disabled_between_nvlinked_gpus_is_named():
    state = h100_state()
    assert [f for f in nvlink_findings(probe(state)) if "P2P" in f.message] == []
    fake = make_pynvml(state)
    fake.nvmlDeviceGetP2PStatus = lambda a, b, idx: (
        4 if {a, b} == {1, 6} else 0
    )  # NVML_P2P_STATUS_NOT_SUPPORTED
    node = collect_node(root="/nonexistent-root", env={}, nvml=fake, hostname="hgx", dmabuf_probe=False)
    assert [f.message for f in nvlink_findings(node)] == [
        "P2P is disabled between NVLink-connected GPU 1 and GPU 6"
    ]


# -- Naming nodes, one finding per cause -----------------------------------------------------------------


def test_findings_name_their_node_and_merge_across_nodes():
    from ddpdoctor.core.report import Finding, Severity
    from ddpdoctor.model.topology.compare import fold_explained, name_nodes, odd_node_findings

    def f(host, msg):
        return Finding("X001", Severity.WARNING, msg, where={"node": host, "gpu": 1})

    per_node = {h: [f(h, "GPU 1 is hot")] for h in ("a", "b", "c", "d")}
    per_node["c"].append(f("c", "GPU 1 lost a link"))
    assert messages(name_nodes(per_node)) == ["all 4 nodes: GPU 1 is hot", "c: GPU 1 lost a link"]
    merged = name_nodes(per_node)[0]
    assert merged.where == {"nodes": ["a", "b", "c", "d"], "gpu": 1}
    assert messages(name_nodes({"a": [f("a", "GPU 1 is hot")]})) == ["GPU 1 is hot"]  # one node: nothing to name
    # A fact that differs because of what the node's findings say is the same cause: folded into "odd node".
    odd = odd_node_findings({h: {"links": 4 if h == "c" else 6, "model": "H100"} for h in per_node}, "X001")
    kept, odd_hosts = fold_explained(odd, {"c": per_node["c"]}, ("links",))
    assert kept == [] and odd_hosts == {"c"}
    assert "odd node c: GPU 1 lost a link" in messages(name_nodes(per_node, odd_hosts))
    kept, _ = fold_explained(odd, {"c": per_node["c"]}, ())
    assert messages(kept) == ["odd node c: links is 4 where 3 other node(s) have 6"]


def test_gpus_far_from_every_nic_are_one_finding():
    node = nccl_to_node(parse_nccl_topo(fixture("nccl-topo/azure-ndv5-topo.xml").read_text()))
    for nic in node.nics:
        nic.rdma = True
    for g in node.gpus[:4]:  # GPUs 0-3 lose their PIX NICs: the nearest ones are now across the socket
        for k in range(4):
            node.paths[g.label][f"NIC{k}"] = node.paths[f"NIC{k}"][g.label] = "SYS"
    found = [f.message for f in ib_findings(node) if "across the socket" in f.message]
    assert len(found) == 1 and found[0].startswith("GPUs 0-3: the nearest NIC (GPU 0 → "), found
