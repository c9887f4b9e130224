"""What one real NVIDIA H200 printed (a one-GPU pass-through VM, driver 580.159.04, torch 2.11.0+cu130,
NCCL 2.28.9), captured by benchmarks/device/capture.sh on 2026-11-27 and kept in
tests/fixtures/device-h200/. Each probe and reader here reads that machine's own output; the fixes the
run led to (one-rank bandwidth checks, more ranks than GPUs on NCCL, a CUDA error reported late) are
tested against it."""

from __future__ import annotations

import json

from helpers import fixture, run_cli
from support.nvml_tape import Replay
from topo.fake_nvml import make_pynvml, state_from_smi_q

from ddpdoctor.core.report import Status
from ddpdoctor.model.hang.analysis import diagnose
from ddpdoctor.probes.nccl_xml import nccl_to_node, parse_nccl_topo
from ddpdoctor.probes.nvml import read_nvml
from ddpdoctor.probes.smi_topo import parse_topo_matrix, topo_to_node
from ddpdoctor.readers.hang_files import read_evidence
from ddpdoctor.runtime.topo_offline import diagnose as diagnose_nodes

D = "device-h200"


def _tape():
    return Replay(json.loads(fixture(f"{D}/nvml-tape.json").read_text()))


def test_the_nvml_probe_reads_the_h200_as_nvml_answered():
    r = read_nvml(_tape())
    assert (r.driver_version, r.cuda_driver_version, len(r.gpus)) == ("580.159.04", "13.0", 1)
    g = r.gpus[0]
    assert (g.name, g.busid, g.memory_MiB, g.compute_capability) == ("NVIDIA H200", "0000:00:06.0", 143771, "9.0")
    assert (g.pcie.cur_gen, g.pcie.max_gen, g.pcie.cur_width, g.pcie.max_width) == (5, 5, 16, 16)
    assert g.ecc_enabled and g.ecc_uncorrected_volatile == 0 and g.retired_pages == 0 and not g.remap_failure
    # In the VM NVML answers NotSupported for the NUMA node and every NVLink: unknown, not a fault.
    assert g.numa_node is None and g.nvlinks == [] and g.cpu_affinity == list(range(16))
    assert g.throttle_reasons == ["gpu_idle"]


def test_nvidia_smi_q_of_the_same_gpu_agrees_with_nvml():
    from_smi = read_nvml(make_pynvml(state_from_smi_q(fixture(f"{D}/nvidia-smi-q.txt").read_text(), 0)))
    a, b = from_smi.gpus[0], read_nvml(_tape()).gpus[0]
    for field in ("name", "uuid", "busid", "memory_MiB", "pcie", "ecc_enabled", "throttle_reasons"):
        assert getattr(a, field) == getattr(b, field), field
    assert from_smi.driver_version == "580.159.04"


def test_the_real_gpu_passes_the_node_checks_and_unknowns_stay_unknown():
    from ddpdoctor.probes.collect import collect_node

    node = collect_node(root="/nonexistent-root", env={}, nvml=_tape(), hostname="vm", dmabuf_probe=False)
    results = {r.code: r for r in diagnose_nodes([node])}
    for code in ("GPU001", "PCI001", "NVL001", "NUMA001"):
        assert results[code].status is Status.PASSED, (code, results[code].summary)


def test_topo_m_with_terminal_escapes_and_no_gpu_numa_id():
    t = parse_topo_matrix(fixture(f"{D}/nvidia-smi-topo-m.txt").read_text())
    assert t.labels == ["GPU0"] and t.extras["GPU0"]["GPU NUMA ID"] == "N/A"
    assert topo_to_node(t).numa_cpus == {0: list(range(16))}


def test_nccls_own_dump_of_a_vm_leaves_numa_and_width_unknown():
    # numaid="-1" and link_width="0": NCCL could not read them in the VM; neither is a degraded link.
    node = nccl_to_node(parse_nccl_topo(fixture(f"{D}/nccl-topo-dump.xml").read_text()))
    (g,) = node.gpus
    assert g.busid == "0000:00:06.0" and g.numa_node is None
    assert g.pcie.max_gen == 5 and g.pcie.cur_width is None
    assert {r.code: r.status for r in diagnose_nodes([node])}["PCI001"] is Status.PASSED


def test_a_device_side_assert_is_blamed_on_its_rank_and_said_to_surface_late():
    d = diagnose(read_evidence([fixture(f"{D}/watch-device-assert")]))
    (f,) = d.findings
    assert f.kind == "died" and f.culprit_ranks == [0]
    culprit = next(r for r in d.ranks if r.rank == 0)
    assert culprit.host == "vm" and culprit.location.endswith("train_gpu.py:26")
    assert "device-side assert" in culprit.state
    assert any("CUDA_LAUNCH_BLOCKING=1" in line and "at or before" in line for line in f.details)


def test_an_ordinary_crash_gets_no_cuda_note():
    import dataclasses

    ev = read_evidence([fixture(f"{D}/watch-device-assert")])
    e = ev.ranks[0].exception
    ev.ranks[0] = dataclasses.replace(ev.ranks[0], exception=dataclasses.replace(e, type="ValueError", message="bad"))
    (f,) = diagnose(ev).findings
    assert f.kind == "died" and f.details == []


def test_the_reports_the_h200_wrote_still_render():
    for name in ("check-report.json", "check-full-report.json", "check-2ranks-1gpu.json"):
        p = run_cli("report", "show", str(fixture(f"{D}/{name}")))
        assert p.returncode in (0, 1), p.stderr
        assert "nccl" in p.stdout and "NCCL" in p.stdout and "Traceback" not in p.stderr


def test_one_rank_measures_no_bandwidth_and_says_so():
    # The H200 run (check-report.json) printed "all_reduce busbw 0 GB/s at 1 KiB (peak)" and "no pair
    # measured" as passed: with one rank there is no link. Both are skipped now, with the reason.
    import importlib

    from ddpdoctor.core.world import WorldInfo

    old = json.loads(fixture(f"{D}/check-report.json").read_text())
    assert "busbw 0 GB/s" in json.dumps(old)
    world = WorldInfo.from_dicts([{"rank": 0, "node_rank": 0, "hostname": "vm"}], backend="nccl")
    for mod in ("ddpdoctor.checks.bw001_collective_sweep", "ddpdoctor.checks.p2p001_p2p_matrix"):
        s = importlib.import_module(mod).summarize({0: {"one_rank": True}}, world)
        assert s.final_status() is Status.SKIPPED and s.summary.startswith("one rank")


def test_a_recommendation_does_not_repeat_its_reason_as_evidence():
    from rich.console import Console

    from ddpdoctor.recommend.bucket_cap import _cannot_tell
    from ddpdoctor.report.render_text import recommendation_panel

    rec = _cannot_tell(["no model was given: give it as --model-params 124M --backward-ms 180"])
    console = Console(width=80, record=True, color_system=None)
    console.print(recommendation_panel(rec, evidence=True))
    text = " ".join(console.export_text().replace("│", " ").split())
    assert text.count("--model-params 124M") == 1 and "missing:" not in text and "['" not in text


def test_the_h200_run_after_the_fixes():
    # The same machine, rerun on the fixed code (tests/fixtures/device-h200/after-fixes/).
    from helpers import check, load

    report = load(fixture(f"{D}/after-fixes/check-report.json"))
    assert check(report, "BW001")["status"] == "skipped" and check(report, "P2P001")["status"] == "skipped"
    assert check(report, "COL001")["status"] == "passed" and report["run"]["backend"] == "nccl"
    refused = fixture(f"{D}/after-fixes/check-2ranks-1gpu.txt").read_text()
    assert "--nproc-per-node 1" in refused and "Traceback" not in refused
    crash = fixture(f"{D}/after-fixes/watch-assert.txt").read_text()
    assert "CUDA_LAUNCH_BLOCKING=1" in crash and "train_gpu.py:26" in crash
