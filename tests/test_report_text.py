"""The report on a terminal: skipped checks said once per reason, nothing cut or broken at 80 columns."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from ddpdoctor.core.report import CheckResult, Report, Status
from ddpdoctor.core.run_info import RunInfo
from ddpdoctor.report.render_text import ReportView

NO_GPU = "skipped: no NVIDIA GPU: NVML could not start (NVML Shared Library Not Found)"
TOPO = ("GPU001", "NVL001", "PCI001", "NUMA001", "GDR001", "NCCL001")


def cpu_report() -> Report:
    checks = [CheckResult("ENV001", "Environment and version consistency", summary="torch 2.13.0+cpu on 1 node(s)")]
    checks += [CheckResult(c, c.title(), status=Status.SKIPPED, summary=NO_GPU) for c in TOPO]
    checks.insert(5, CheckResult("IB001", "InfiniBand/RoCE ports and rails", status=Status.SKIPPED,
                                 summary="skipped: no InfiniBand/RoCE device"))
    checks.append(CheckResult("NCCL002", "A check with a long summary", status=Status.WARNING,
                              summary="NCCL_SOCKET_IFNAME=ib0,ib1,ib2,ib3,ib4,ib5,ib6,ib7 names 8 interfaces "
                              "(NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_2,mlx5_3 also set)"))
    return Report(run=RunInfo(world_size=2, nodes=["vm"], backend="gloo"), checks=checks)


def render(report: Report, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(ReportView(report))
    return console.export_text()


@pytest.mark.parametrize("width", [80, 200])
def test_seven_skipped_topology_checks_say_why_once(width):
    text = render(cpu_report(), width)
    flat = " ".join(text.split())
    assert flat.count("NVML could not start") == 1
    assert "- skipped GPU001, NVL001, PCI001, NUMA001, GDR001, NCCL001: no NVIDIA GPU: NVML could not start" in flat
    assert "- skipped IB001: no InfiniBand/RoCE device" in flat


@pytest.mark.parametrize("width", [80, 200])
def test_the_checks_table_never_breaks_a_word(width):
    report = cpu_report()
    text = render(report, width)
    assert max(len(line) for line in text.splitlines()) <= width and "…" not in text
    words = set(text.split())
    for c in report.checks:
        assert c.code in words or f"{c.code}," in words or f"{c.code}:" in words
        if c.status is not Status.SKIPPED:
            assert set(c.summary.split()) <= words, set(c.summary.split()) - words
