"""NCCL environment sanity against a node."""

from __future__ import annotations

import pytest
from ddpdoctor.checks.nccl001_env import nccl_env_findings, parse_name_list

from ddpdoctor.model.topology.node import IbPort, NetIface, Nic, NodeTopology
from ddpdoctor.probes.smi_topo import parse_topo_matrix, topo_to_node

from .conftest import fixture


def node(env: dict[str, str]) -> NodeTopology:
    n = topo_to_node(
        parse_topo_matrix(fixture("nvidia-smi-topo/dgx1-v100.8gpu.4nic-mlx5cols.spaces.txt").read_text())
    )
    n.hostname = "dgx"
    n.interfaces = [
        NetIface("eth0", True),
        NetIface("ib0", True),
        NetIface("ib1", False),
        NetIface("lo", True),
    ]
    for k, nic in enumerate(n.nics):
        nic.ports = [IbPort(1, "ACTIVE" if k != 3 else "DOWN", "LinkUp" if k != 3 else "Disabled", 100.0)]
    n.env = env
    return n


def msgs(env):
    return [(f.severity.value, f.message) for f in nccl_env_findings(node(env))]


def test_clean_environment_has_no_finding():
    assert msgs({}) == []
    assert msgs({"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5"}) == []
    assert msgs({"NCCL_SOCKET_IFNAME": "^lo,docker", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"}) == []


def test_socket_ifname_that_matches_nothing():
    out = msgs({"NCCL_SOCKET_IFNAME": "enp"})
    assert out[0][0] == "error" and out[0][1].startswith("NCCL_SOCKET_IFNAME=enp matches no usable interface")
    assert "ib1 (down)" in out[0][1]


def test_socket_ifname_naming_only_a_down_interface_and_a_typo():
    assert msgs({"NCCL_SOCKET_IFNAME": "=ib1"})[0][0] == "error"
    out = msgs({"NCCL_SOCKET_IFNAME": "eth0,ens9"})
    assert out == [("warning", "NCCL_SOCKET_IFNAME entry 'ens9' matches no interface on this node")]


def test_ib_hca_checks():
    assert msgs({"NCCL_IB_HCA": "mlx4"})[0][1].startswith("NCCL_IB_HCA=mlx4 matches no usable RDMA device")
    assert msgs({"NCCL_IB_HCA": "=mlx5_3"})[0][0] == "error"  # its only port is down
    assert (
        msgs({"NCCL_IB_HCA": "^mlx5"})[0][1]
        == "NCCL_IB_HCA=^mlx5 excludes every usable RDMA device on this node"
    )


@pytest.mark.parametrize(
    "var, value, sev, words",
    [
        ("NCCL_P2P_DISABLE", "1", "warning", "instead of NVLink"),
        ("NCCL_IB_DISABLE", "1", "warning", "TCP sockets"),
        ("NCCL_SHM_DISABLE", "1", "warning", "fall back to the network"),
        ("NCCL_NET_GDR_LEVEL", "LOC", "warning", "GPUDirect RDMA disabled"),
        ("NCCL_NET_GDR_LEVEL", "3", "info", "up to PHB"),
        ("NCCL_NET_GDR_LEVEL", "banana", "error", "not a level"),
        ("NCCL_ALGO", "Ring", "info", "debugging knob"),
        ("NCCL_DEBUG", "TRACE", "info", "TRACE slows"),
        ("NCCL_NET_GDR_READ", "0", "info", "staged through host memory"),
    ],
)
def test_knobs_left_set_say_what_they_cost(var, value, sev, words):
    (got,) = msgs({var: value})
    assert got[0] == sev and got[1].startswith(f"{var}={value} is set: ") and words in got[1]


def test_disable_knobs_set_to_zero_are_fine():
    assert msgs({"NCCL_P2P_DISABLE": "0", "NCCL_IB_DISABLE": "0"}) == []


def test_ib_disable_without_rdma_nics_is_quiet():
    n = NodeTopology(hostname="x", nics=[Nic("eth0", rdma=False)], env={"NCCL_IB_DISABLE": "1"})
    assert nccl_env_findings(n) == []


def test_name_list_syntax():
    assert parse_name_list("^docker,lo") == (True, False, ["docker", "lo"])
    assert parse_name_list("=eth0") == (False, True, ["eth0"])
