"""Each parser on every relevant fixture file, asserting concrete facts."""

from __future__ import annotations

import pytest

from ddpdoctor.model.topology.analysis import nvlink_matrix, rails
from ddpdoctor.probes.ibstat import IbstatParseError, parse_ib_tool_output, parse_ibstat
from ddpdoctor.probes.nccl_xml import NcclTopoParseError, nccl_to_node, parse_nccl_topo
from ddpdoctor.probes.smi_query import SmiQueryParseError, get, parse_smi_query
from ddpdoctor.probes.smi_topo import TopoParseError, parse_topo_matrix, topo_to_node

from .conftest import fixture


def smi(name):
    return topo_to_node(parse_topo_matrix(fixture(f"nvidia-smi-topo/{name}").read_text()))


def xml(name):
    return nccl_to_node(parse_nccl_topo(fixture(f"nccl-topo/{name}").read_text()))


def totals(node):
    return [sum(v or 0 for v in row) for row in nvlink_matrix(node)["values"]]


def rail_map(node):
    return {r.gpu: (r.nic, r.path) for r in rails(node)}


# -- nvidia-smi topo -m ----------------------------------------------------------------------------


def test_smi_asus_nic_legend_and_numa():
    n = smi("asus-esc8000a-e12.4x-rtx6000ada.4nic.spaces.txt")
    assert [g.index for g in n.gpus] == [0, 1, 2, 3]
    assert [x.name for x in n.nics] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert [g.numa_node for g in n.gpus] == [0, 0, 1, 1]  # GPU NUMA ID is N/A: NUMA Affinity used
    assert n.gpus[2].cpu_affinity == list(range(32, 64))
    assert n.path("GPU0", "GPU2") == "SYS" and n.path("mlx5_0", "mlx5_1") == "PIX"
    assert rail_map(n) == {
        0: ("mlx5_0", "NODE"),
        1: ("mlx5_1", "NODE"),
        2: ("mlx5_2", "NODE"),
        3: ("mlx5_3", "NODE"),
    }
    assert totals(n) == [0, 0, 0, 0]


def test_smi_dgx1_hybrid_cube_mesh_and_old_nic_columns():
    n = smi("dgx1-v100.8gpu.4nic-mlx5cols.spaces.txt")
    assert len(n.gpus) == 8 and [x.name for x in n.nics] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert (
        n.path("GPU0", "GPU3") == "NV2"
        and n.path("GPU0", "GPU1") == "NV1"
        and n.path("GPU0", "GPU5") == "SYS"
    )
    assert totals(n) == [6] * 8  # every V100 uses all 6 of its links
    assert rail_map(n)[0] == ("mlx5_0", "PIX") and rail_map(n)[7] == ("mlx5_3", "PIX")
    assert n.gpus[4].cpu_affinity[:2] == [20, 21] and n.gpus[0].numa_node is None


def test_smi_h100_4gpu_one_nic_per_gpu():
    n = smi("h100-4gpu.nv6.4nic.spaces.no-legend.txt")
    assert [g.numa_node for g in n.gpus] == [3, 1, 7, 5]
    assert n.gpus[0].cpu_affinity == [6, 14, 22, 30]
    assert totals(n) == [18] * 4
    assert rail_map(n) == {i: (f"NIC{i}", "PIX") for i in range(4)}  # no legend: NIC labels kept


def test_smi_hgx_nv18_no_nics():
    n = smi("hgx-h100-8gpu.nv18.no-nic.spaces.no-legend.txt")
    assert len(n.gpus) == 8 and n.nics == []
    assert {n.path("GPU0", f"GPU{j}") for j in range(1, 8)} == {"NV18"}
    assert [g.numa_node for g in n.gpus] == [0] * 4 + [1] * 4


def test_smi_tab_separated_with_empty_cell():
    n = smi("pcie-8gpu-nvlink-bridge-pairs.nv12.tabs.no-legend.txt")
    assert len(n.gpus) == 8
    assert (
        n.path("GPU0", "GPU1") == "NV12"
        and n.path("GPU0", "GPU2") == "PXB"
        and n.path("GPU3", "GPU4") == "SYS"
    )
    assert n.gpus[7].numa_node == 1 and n.gpus[7].cpu_affinity[0] == 32
    assert totals(n) == [12] * 8


def test_smi_puget_two_gpus():
    n = smi("puget-wrx90.2x-gpu.2nic.spaces.txt")
    assert len(n.gpus) == 2 and n.path("GPU0", "GPU1") == "PHB"
    assert rail_map(n) == {0: ("mlx5_0", "NODE"), 1: ("mlx5_1", "NODE")}


@pytest.mark.parametrize(
    "text, msg",
    [
        ("hello world\n", "no header"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV1\n", "no row for GPU1"),
        ("\tGPU0\tGPU1\nGPU0\t X \tFOO\nGPU1\tNV1\t X \n", "not a topology path type"),
    ],
)
def test_smi_bad_input_is_a_clear_error(text, msg):
    with pytest.raises(TopoParseError, match=msg):
        parse_topo_matrix(text)


# -- NCCL topology XML -------------------------------------------------------------------------------


def test_xml_azure_ndv5_pairs_each_gpu_with_its_nic():
    n = xml("azure-ndv5-topo.xml")
    assert len(n.gpus) == 8 and len(n.nics) == 8
    assert all(g.pcie.max_gen == 5 and g.pcie.max_width == 16 for g in n.gpus)
    assert n.gpus[0].busid == "0001:00:00.0" and n.nics[0].busid == "0101:00:00.0"
    assert rail_map(n) == {i: (f"NIC{i}", "PIX") for i in range(8)}
    assert [g.numa_node for g in n.gpus] == [0] * 4 + [1] * 4
    assert n.gpus[0].cpu_affinity == list(range(48))  # mask 0000ffff,ffffffff
    assert n.path("GPU0", "GPU4") == "SYS" and n.path("GPU0", "GPU1") == "PHB"


def test_xml_azure_ndv4_two_gpus_two_nics_per_switch():
    n = xml("azure-ndv4-topo.xml")
    assert len(n.gpus) == 8 and len(n.nics) == 8 and len(n.numa_cpus) == 4
    assert n.path("GPU0", "GPU1") == "PIX" and all(g.pcie.max_gen == 4 for g in n.gpus)
    assert len({nic for nic, _ in rail_map(n).values()}) == 8  # 1:1 despite ties


def test_xml_azure_ndv2_one_nic_for_eight_gpus():
    n = xml("azure-ndv2-topo.xml")
    assert len(n.gpus) == 8 and len(n.nics) == 1
    assert [p for _, p in rail_map(n).values()] == ["PHB"] * 4 + ["SYS"] * 4


def test_xml_azure_ncv4_nvlink_self_targets_and_loose_eth():
    n = xml("azure-ncv4-topo.xml")
    assert len(n.gpus) == 4 and [x.name for x in n.nics] == ["eth0"]
    assert n.nics[0].speed_Mbps == 100000 and n.nics[0].rdma is False
    assert all(g.gdr_supported and g.compute_capability == "8.0" for g in n.gpus)
    assert totals(n) == [0] * 4  # the file points each GPU's NVLinks at itself: no pair links


def test_xml_aws_p4d_two_gpus_per_efa():
    n = xml("aws-p4d-24xl-topo.xml")
    assert len(n.gpus) == 8 and len(n.nics) == 4
    assert [nic for nic, _ in rail_map(n).values()] == [
        "NIC0",
        "NIC0",
        "NIC1",
        "NIC1",
        "NIC2",
        "NIC2",
        "NIC3",
        "NIC3",
    ]
    assert all(g.pcie.max_gen == 3 for g in n.gpus)
    assert all(x.rdma for x in n.nics)  # EFA (vendor 0x1d0f) despite its Ethernet class


def test_xml_aws_p4de_same_layout_as_p4d():
    assert rail_map(xml("aws-p4de-24xl-topo.xml")) == rail_map(xml("aws-p4d-24xl-topo.xml"))


def test_xml_aws_p5_dump_four_efa_per_gpu():
    n = xml("aws-p5.48xl-topo.pr1226.xml")
    assert len(n.gpus) == 8 and len(n.nics) == 32
    assert all(x.rate_gbps == 100 for x in n.nics) and n.nics[0].name == "rdmap79s0"
    assert n.nics[0].pcie.max_width == 8 and n.gpus[0].compute_capability == "9.0"
    assert all(p == "PIX" for _, p in rail_map(n).values())
    assert len({nic for nic, _ in rail_map(n).values()}) == 8


@pytest.mark.parametrize("name, pcis", [("aws-p5.48xl-topo.xml", 40), ("aws-g5.48xl-topo.xml", 9)])
def test_xml_static_files_without_gpus(name, pcis):
    t = parse_nccl_topo(fixture(f"nccl-topo/{name}").read_text())
    assert len(t.pcis) == pcis and t.gpus == [] and t.nics == []


def test_xml_graph_file_and_junk_are_clear_errors():
    with pytest.raises(NcclTopoParseError, match="graph file"):
        parse_nccl_topo(fixture("nccl-topo/azure-ncv4-graph.xml").read_text())
    with pytest.raises(NcclTopoParseError, match="well-formed"):
        parse_nccl_topo("<system><cpu>")
    with pytest.raises(NcclTopoParseError, match="<html>"):
        parse_nccl_topo("<html/>")


# -- ibstat, nvidia-smi -q -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, count, down",
    [
        ("ibstat.47.0.a100.all.active.0", 9, []),
        ("ibstat.39.0.a100.failed.ibpanic.exit-255.0", 8, []),
        ("ibstat.47.0.h100.all.active.0", 12, []),
        ("ibstat.47.0.h100.all.active.1", 12, []),
        ("ibstat.47.0.h100.all.active.2", 9, []),
        ("ibstat.47.0.h100.some.down.0", 12, ["mlx5_2", "mlx5_7", "mlx5_8"]),
        ("ibstat.47.0.h100.some.down.1", 12, ["mlx5_11", "mlx5_5"]),
        ("ibstat.47.0.h100.some.down.with.polling.1", 12, ["mlx5_11", "mlx5_5"]),
    ],
)
def test_ibstat_every_file(name, count, down):
    nics = parse_ibstat(fixture(f"infiniband/ibstat/{name}").read_text())
    assert len(nics) == count
    assert sorted(n.name for n in nics if not n.ports[0].up) == down


def test_ibstat_facts():
    nics = {
        n.name: n
        for n in parse_ibstat(fixture("infiniband/ibstat/ibstat.47.0.h100.all.active.2").read_text())
    }
    assert (
        nics["mlx5_0"].hca_type == "MT4129"
        and nics["mlx5_0"].rate_gbps == 400
        and nics["mlx5_0"].kind == "InfiniBand"
    )
    assert nics["mlx5_bond_0"].rate_gbps == 200 and nics["mlx5_bond_0"].kind == "RoCE"
    polling = parse_ibstat(fixture("infiniband/ibstat/ibstat.47.0.h100.some.down.with.polling.1").read_text())
    assert {n.name: n.ports[0].phys_state for n in polling}["mlx5_11"] == "Polling"
    with pytest.raises(IbstatParseError):
        parse_ibstat("nothing here")


def test_ibstatus_a100():
    nics = parse_ib_tool_output(fixture("infiniband/ibstatus/ibstatus.39.0.a100.all.active.0").read_text())
    assert len(nics) == 9 and all(n.ports[0].up for n in nics)
    assert {(n.kind, n.rate_gbps) for n in nics} == {("InfiniBand", 200.0), ("RoCE", 40.0)}
    assert nics[0].ports[0].rate_text == "200 Gb/sec (4X HDR)"
    assert parse_ib_tool_output(fixture("infiniband/ibstat/ibstat.47.0.a100.all.active.0").read_text())[
        0
    ].hca_type


def test_smi_query_h100_and_4090():
    head, gpus = parse_smi_query(
        fixture("nvidia-smi/nvidia-smi-q.h100-80gb-hbm3.x8.535.183.01.txt").read_text()
    )
    assert head["Driver Version"] == "535.183.01" and len(gpus) == 8
    assert gpus[0]["Bus Id"] == "00000000:53:00.0" and get(gpus[0], "Fabric", "State") == "Completed"
    _, rtx = parse_smi_query(fixture("nvidia-smi/nvidia-smi-q.rtx4090.x8.535.154.05.txt").read_text())
    assert get(rtx[0], "PCI", "GPU Link Info", "PCIe Generation", "Current") == "1"
    with pytest.raises(SmiQueryParseError):
        parse_smi_query("Driver Version : 1\n")
