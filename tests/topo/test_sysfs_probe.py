"""sysfs readers on hand-built trees shaped like a real /sys (devices, bus/pci symlinks, class links),
and the PCI path rules they feed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ddpdoctor.checks.pci001_pcie import pcie_findings

from ddpdoctor.model.topology.analysis import gdr_verdicts, rails
from ddpdoctor.model.topology.pci_path import PciPlace, pci_path_type
from ddpdoctor.probes import sysfs
from ddpdoctor.probes.collect import collect_node

from .conftest import fixture
from .fake_nvml import make_pynvml, state_from_smi_q


def _pci(
    root: Path,
    chain: list[str],
    numa: int,
    width=(16, 16),
    speed=("32.0 GT/s PCIe", "32.0 GT/s PCIe"),
    host="pci0000:00",
) -> Path:
    d = root / "sys/devices" / host
    for bdf in chain:
        d = d / bdf
    d.mkdir(parents=True, exist_ok=True)
    (d / "numa_node").write_text(f"{numa}\n")
    (d / "current_link_width").write_text(f"{width[0]}\n")
    (d / "max_link_width").write_text(f"{width[1]}\n")
    (d / "current_link_speed").write_text(f"{speed[0]}\n")
    (d / "max_link_speed").write_text(f"{speed[1]}\n")
    link = root / "sys/bus/pci/devices" / chain[-1]
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(d, link.parent), link)
    return d


@pytest.fixture
def machine(tmp_path):
    """One socket: GPU 0000:03:00.0 and mlx5_0 (0000:04:00.0) under one PCIe switch; a second
    host bridge on NUMA node 1 holds mlx5_1 (0000:81:00.0)."""
    sw = ["0000:00:01.0", "0000:01:00.0"]
    _pci(tmp_path, sw + ["0000:02:00.0", "0000:03:00.0"], 0)
    nic0 = _pci(tmp_path, sw + ["0000:02:01.0", "0000:04:00.0"], 0)
    nic1 = _pci(tmp_path, ["0000:80:01.0", "0000:81:00.0"], 1, width=(8, 16), host="pci0000:80")
    for name, dev, netdev in (("mlx5_0", nic0, "ib0"), ("mlx5_1", nic1, "ib1")):
        ib = tmp_path / "sys/class/infiniband" / name
        (ib / "ports/1").mkdir(parents=True)
        for f, v in (
            ("state", "4: ACTIVE"),
            ("phys_state", "5: LinkUp"),
            ("rate", "400 Gb/sec (4X NDR)"),
            ("link_layer", "InfiniBand"),
        ):
            (ib / "ports/1" / f).write_text(v + "\n")
        (ib / "hca_type").write_text("MT4129\n")
        os.symlink(os.path.relpath(dev, ib), ib / "device")
        (dev / "net" / netdev).mkdir(parents=True)
    for n, cpus in ((0, "0-15"), (1, "16-31")):
        (tmp_path / f"sys/devices/system/node/node{n}").mkdir(parents=True)
        (tmp_path / f"sys/devices/system/node/node{n}/cpulist").write_text(cpus + "\n")
    net = tmp_path / "sys/class/net"
    for name, state in (("eth0", "up"), ("ib0", "up"), ("ib1", "down")):
        (net / name).mkdir(parents=True)
        (net / name / "operstate").write_text(state + "\n")
    return tmp_path


def one_gpu(busid="00000000:03:00.0"):
    state = state_from_smi_q(fixture("nvidia-smi/nvidia-smi-q.h100-80gb-hbm3.x8.535.183.01.txt").read_text())
    state["gpus"] = state["gpus"][:1]
    state["gpus"][0]["busid"] = busid
    return make_pynvml(state)


def test_pci_place_and_nic_facts(machine):
    place = sysfs.pci_place(machine, "0000:03:00.0")
    assert place == PciPlace(
        numa=0, root="pci0000:00", bridges=("0000:00:01.0", "0000:01:00.0", "0000:02:00.0")
    )
    nics = {n.name: n for n in sysfs.read_infiniband(machine)}
    assert nics["mlx5_0"].busid == "0000:04:00.0" and nics["mlx5_0"].netdevs == ["ib0"]
    assert nics["mlx5_1"].numa_node == 1 and nics["mlx5_1"].pcie.cur_width == 8
    assert sysfs.read_numa_cpus(machine) == {0: list(range(16)), 1: list(range(16, 32))}
    assert {i.name: i.up for i in sysfs.read_interfaces(machine)} == {"eth0": True, "ib0": True, "ib1": False}


def test_collect_pairs_gpu_with_the_nic_under_its_switch(machine):
    node = collect_node(root=machine, env={}, nvml=one_gpu(), hostname="m", dmabuf_probe=False)
    assert node.path("GPU0", "mlx5_0") == "PIX" and node.path("GPU0", "mlx5_1") == "SYS"
    assert [(r.gpu, r.nic, r.path) for r in rails(node)] == [(0, "mlx5_0", "PIX")]
    assert node.gpus[0].numa_node == 0 and node.gpus[0].cpu_affinity == list(range(16))
    msgs = [f.message for f in pcie_findings(node)]
    assert msgs == ["NIC mlx5_1 PCIe link runs at x8, capable of x16: host↔device bandwidth cut to 50%"]
    assert gdr_verdicts(node)[0].enabled is False  # no peer memory in this tree, proprietary unknown


def test_gpu_missing_from_sysfs_is_a_note_not_a_crash(machine):
    node = collect_node(
        root=machine, env={}, nvml=one_gpu("00000000:99:00.0"), hostname="m", dmabuf_probe=False
    )
    assert node.path("GPU0", "mlx5_0") is None
    assert any("GPU0" in n for n in node.notes)


def test_peermem_files(tmp_path):
    assert sysfs.read_peermem(tmp_path).present is False
    for rel in sysfs.PEERMEM_FILES:
        root = tmp_path / rel.replace("/", "_")
        (root / rel).parent.mkdir(parents=True)
        (root / rel).write_text("1.0\n")
        assert sysfs.read_peermem(root).found == ["/" + rel]


@pytest.mark.parametrize(
    "a, b, expect",
    [
        (PciPlace(0, "h0", ("rp", "usp")), PciPlace(0, "h0", ("rp", "usp")), "PIX"),
        (PciPlace(0, "h0", ("rp", "usp", "dsp1")), PciPlace(0, "h0", ("rp", "usp", "dsp2")), "PIX"),
        (
            PciPlace(0, "h0", ("rp", "usp", "dsp1", "usp2", "dsp3")),
            PciPlace(0, "h0", ("rp", "usp", "dsp2")),
            "PXB",
        ),
        (PciPlace(0, "h0", ("rp1",)), PciPlace(0, "h0", ("rp2",)), "PHB"),
        (PciPlace(0, "h0", ("rp1",)), PciPlace(0, "h1", ("rp2",)), "NODE"),
        (PciPlace(0, "h0", ()), PciPlace(1, "h1", ()), "SYS"),
        (PciPlace(None, "h0", ()), PciPlace(None, "h1", ()), "SYS"),
    ],
)
def test_pci_path_rules(a, b, expect):
    assert pci_path_type(a, b) == expect == pci_path_type(b, a)
