"""`ddpdoctor topo` end to end through its command module (argparse → run → exit code, output)."""

from __future__ import annotations

import argparse
import json

import pytest

from ddpdoctor.commands import topo
from ddpdoctor.model.topology.node import NodeTopology

from .conftest import DATA, fixture


def run(capsys, *argv) -> tuple[int, str, str]:
    p = argparse.ArgumentParser(prog="ddpdoctor topo")
    topo.add_arguments(p)
    rc = topo.run(p.parse_args(list(argv)))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_this_machine_prints_and_says_skipped(capsys, tmp_path):
    rc, out, _ = run(capsys, "--root", str(tmp_path), "--hostname", "box")
    assert rc == 0 and "host box" in out and "Findings" in out


def test_file_input_with_ibstat_save_and_json(capsys, tmp_path):
    snap = tmp_path / "n.json"
    rc, out, _ = run(
        capsys,
        "--root",
        str(tmp_path),
        "--hostname",
        "dgx",
        "--nvidia-smi-topo",
        str(fixture("nvidia-smi-topo/dgx1-v100.8gpu.4nic-mlx5cols.spaces.txt")),
        "--save",
        str(snap),
    )
    assert rc == 0 and "NVLink matrix" in out and "mlx5_3" in out and "snapshot written" in out
    node = NodeTopology.from_dict(json.loads(snap.read_text()))
    assert node.hostname == "dgx" and len(node.gpus) == 8 and node.path("GPU0", "mlx5_0") == "PIX"
    rc, out, _ = run(
        capsys,
        "--root",
        str(tmp_path),
        "--json",
        "--nccl-topo",
        str(fixture("nccl-topo/azure-ndv5-topo.xml")),
    )
    assert rc == 0 and len(json.loads(out)["gpus"]) == 8


def test_ibstat_with_down_ports_fails(capsys, tmp_path):
    rc, out, _ = run(
        capsys,
        "--root",
        str(tmp_path),
        "--ibstat",
        str(fixture("infiniband/ibstat/ibstat.47.0.h100.some.down.0")),
    )
    assert rc == 1 and "mlx5_2/1 is DOWN" in out


def test_from_snapshots_offline(capsys):
    files = [str(DATA / f) for f in ("hgx-h100-a.json", "hgx-h100-b.json", "hgx-h100-c-nopeermem.json")]
    rc, out, _ = run(capsys, "--from", *files)
    assert rc == 0 and "odd node hgx-c" in out
    rc, out, _ = run(capsys, "--snapshots", *files, "--json")
    report = json.loads(out)
    assert report["schema_version"] == 1 and {c["code"] for c in report["checks"]} >= {"GPU001", "GDR001"}
    found = {c["code"]: [f["message"] for f in c["findings"]] for c in report["checks"]}
    # One finding per node and cause, naming the node: not eight identical ones per GPU↔NIC pair, and
    # not again as "peer memory is missing" / "0 GPUs with GPUDirect RDMA" (the same cause).
    assert found["GDR001"] == [
        "odd node hgx-c: GPUDirect RDMA is off for all 8 GPU↔NIC pairs: nvidia_peermem is not loaded and "
        "DMA-BUF is not available: the proprietary NVIDIA kernel module is loaded, DMA-BUF needs the open one"
    ]
    # The same finding on every node is said once, naming them.
    assert found["GPU001"] == [
        "hgx-a, hgx-b, hgx-c: GPU 2 clocks held down by software thermal slowdown, external power brake"
    ]


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: p.write_text("not json"), "not valid JSON"),
        (lambda p: p.write_text("{}"), "not a ddpdoctor topology snapshot"),
        (lambda p: None, "cannot read"),
    ],
)
def test_bad_snapshot_is_exit_2_with_a_reason(capsys, tmp_path, make, words):
    f = tmp_path / "bad.json"
    make(f)
    rc, _, err = run(capsys, "--from", str(f))
    assert rc == 2 and words in err


def test_bad_topology_file_is_exit_2(capsys, tmp_path):
    bad = tmp_path / "t.txt"
    bad.write_text("GPU zero\n")
    rc, _, err = run(capsys, "--root", str(tmp_path), "--nvidia-smi-topo", str(bad))
    assert rc == 2 and "not `nvidia-smi topo -m` output" in err
    rc, _, err = run(
        capsys, "--root", str(tmp_path), "--nccl-topo", str(fixture("nccl-topo/azure-ncv4-graph.xml"))
    )
    assert rc == 2 and "graph file" in err


def test_from_a_check_report_reuses_its_snapshots(capsys, tmp_path):
    files = [str(DATA / f) for f in ("hgx-h100-a.json", "hgx-h100-b.json", "hgx-h100-c-nopeermem.json")]
    rc, out, _ = run(capsys, "--from", *files, "--json")
    report = tmp_path / "report.json"
    report.write_text(out)
    rc, out, _ = run(capsys, "--from", str(report))
    assert rc == 0 and "odd node hgx-c" in out
    empty = tmp_path / "empty-report.json"
    empty.write_text(json.dumps({"schema_version": 1, "checks": []}))
    rc, _, err = run(capsys, "--from", str(empty))
    assert rc == 2 and "without GPU001 topology data" in err


@pytest.mark.parametrize("flag, name", [("--nccl-topo", "nccl-topo/azure-ndv5-topo.xml"),
                                        ("--nvidia-smi-topo", "nvidia-smi-topo/dgx1-v100.8gpu.4nic-mlx5cols.spaces.txt")])
def test_a_topology_file_is_judged_alone(capsys, monkeypatch, flag, name):
    """Nothing of this machine (host name, interfaces, kernel, peer memory, NCCL variables) is mixed into
    the snapshot of a file that describes another machine."""
    import socket

    monkeypatch.setenv("NCCL_IB_DISABLE", "1")  # would turn GDR off and raise NCCL001 if mixed in
    rc, out, _ = run(capsys, flag, str(fixture(name)), "--json")
    node = NodeTopology.from_dict(json.loads(out))
    assert rc == 0 and node.hostname != socket.gethostname()
    assert not node.env and not node.interfaces and not node.peermem.probed and node.peermem.kernel == ""
    rc, out, _ = run(capsys, flag, str(fixture(name)))
    assert "kernel" not in out and "NCCL_IB_DISABLE" not in out
    assert "NCCL001: no NCCL environment (topology read from a file)" in " ".join(out.split())


def test_a_topology_file_without_gpus_does_not_pass_the_gpu_checks(capsys):
    rc, out, _ = run(capsys, "--nccl-topo", str(fixture("nccl-topo/aws-g5.48xl-topo.xml")), "--json")
    assert json.loads(out)["gpus"] == []
    rc, out, _ = run(capsys, "--nccl-topo", str(fixture("nccl-topo/aws-g5.48xl-topo.xml")))
    text = " ".join(out.split())
    assert "GPU001" in text and "passed" not in text
    assert "skipped GPU001, NVL001, PCI001, NUMA001, GDR001, NCCL001: no NVIDIA GPU: none listed in" in text
