"""A report made by `ddpdoctor import` opens in the TUI like any other: curve and heatmap views."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpdoctor.baselines import list_profiles
from ddpdoctor.model.imported.report import build_report
from ddpdoctor.readers.tool_output import parse_file
from ddpdoctor.report.io import load_report, save_report
from ddpdoctor.tui.app import DoctorApp

from .helpers import SIZE, screen_text

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "tool-output"


@pytest.fixture
def imported(tmp_path):
    files = [
        parse_file(FIX / "nccl-tests/synth-nccl-tests-h100-1node-slow.log"),
        parse_file(FIX / "cuda-samples/synth-p2pBandwidthLatencyTest-h100-slow-gpu6.txt"),
    ]
    path = tmp_path / "imported.json"
    save_report(build_report(files, list_profiles()), path)
    return load_report(path)  # as `ddpdoctor tui imported.json` reads it


async def test_imported_report_overview_heatmap_and_curve(imported):
    app = DoctorApp(report=imported)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "verdict: FAILED" in text and "BW001" in text and "P2P001" in text
        assert "68% of the 370 GB/s expected on dgx-h100" in text
        await pilot.press("2")
        await pilot.pause()
        text = screen_text(app)
        assert "P2P bandwidth heatmap" in text and "14 outlier(s)" in text
        assert "94.7!" in text  # GPU 6's links are marked
        assert "GPU6 → GPU" in text and "OUTLIER" in text  # the cursor starts on the worst cell
        await pilot.press("3")
        await pilot.pause()
        text = screen_text(app)
        assert "━ all_reduce" in text and "┄ expected 370" in text
        assert "BW001: peak 251 GB/s at 8GiB" in text


async def test_perftest_curve_shows_when_no_collective_was_imported(tmp_path):
    rep = build_report([parse_file(FIX / "perftest/superbench-ib_loopback_all_sizes.log")], list_profiles())
    app = DoctorApp(report=rep)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await pilot.pause()
        text = screen_text(app)
        assert "ib_write_bw ib0" in text and "RDMA001: peak 24.4 GB/s at 4MiB" in text
