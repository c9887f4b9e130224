"""Pilot-driven tests at 80×24: press keys, read what the screen shows."""

from __future__ import annotations

import pytest

from ddpdoctor.core.report import Report
from ddpdoctor.core.run_info import RunInfo
from ddpdoctor.tui.app import DoctorApp
from ddpdoctor.tui.live import LiveConfig
from ddpdoctor.tui.views.help import HelpScreen

from .helpers import DATA, SIZE, fake_command, screen_text

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]


async def show(pilot, *keys: str) -> str:
    """Press ``keys``, let the app settle, return the screen."""
    await pilot.press(*keys)
    await pilot.pause()
    return screen_text(pilot.app)


async def test_overview_shows_checks_and_rank_glyphs_per_node(gloo_report):
    app = DoctorApp(report=gloo_report, report_dir=DATA)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "verdict: FAILED" in text
        assert "gloo · 4 ranks on 2 node(s) · n0 ddpd-node0 r0-1 · n1 ddpd-node1 r2-3" in text
        p2p_line = next(line for line in text.splitlines() if "P2P001" in line)
        assert "✗ failed" in p2p_line and "!✗ ✓✗" in p2p_line  # per rank, a space between nodes
        await pilot.press("down", "down", "down", "down")  # select P2P001: its findings show below
        text = screen_text(app)
        assert "error r3 → r1 (ddpd-node1 → ddpd-node0)" in text
        assert "hint: check the NIC" in text


async def test_number_keys_switch_views_and_footer_lists_them(gloo_report):
    app = DoctorApp(report=gloo_report, report_dir=DATA)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        footer = screen_text(app).splitlines()[-1]
        for label in ("1 Checks", "2 P2P", "3 Curve", "4 Topo", "5 Recs", "6 Lint", "? Help"):
            assert label in footer
        expected = {
            "2": "P2P bandwidth heatmap",
            "3": "busbw (GB/s)",
            "4": "No topology yet",
            "5": "DDP bucket size",
            "6": "train_bad.py:13:17",
        }
        for key, needle in expected.items():
            await pilot.press(key)
            await pilot.pause()
            assert needle in screen_text(app), key


async def test_heatmap_cursor_moves_and_details_follow(gloo_report):
    app = DoctorApp(report=gloo_report)
    async with app.run_test(size=SIZE) as pilot:
        text = await show(pilot, "2")
        # it opens on the worst outlier
        assert "r3@ddpd-node1 → r1@ddpd-node0: 0.025 GB/s" in text and "OUTLIER" in text
        assert "0.03! 0.03!" in text
        await pilot.press("right", "right")  # (3,1) → (3,3): the diagonal
        assert "r3@ddpd-node1: diagonal" in screen_text(app)
        text = await show(pilot, "up")  # (2,3)
        assert "r2@ddpd-node1 → r3@ddpd-node1: 2.03 GB/s" in text and "OUTLIER" not in text
        assert "2.03◂" in text


async def test_curve_view_plots_and_lists_points(gloo_report):
    app = DoctorApp(report=gloo_report)
    async with app.run_test(size=SIZE) as pilot:
        text = await show(pilot, "3")
        assert "━ all_reduce" in text and "┄ expected 1.10" in text
        assert "BW001: peak 0.78 GB/s at 64MiB" in text
        assert any(0x2800 < ord(c) <= 0x28FF for c in text)


async def test_topology_view_of_a_gpu_node(gpu_report):
    app = DoctorApp(report=gpu_report)
    async with app.run_test(size=SIZE) as pilot:
        text = await show(pilot, "4")
        assert "Topology of gpu-h100-07" in text and "ENABLED" in text
        assert "GPU0     ·  NV18  NV18" in text
        pane = app.query_one("#view-topo")

        def at_end() -> bool:
            pane.scroll_end(animate=False)  # again each time: the layout may still be settling
            return "mlx5_bond_0" in screen_text(app)

        await wait_for(pilot, at_end)
        assert "ACTIVE" in screen_text(app)


async def test_copy_snippet_from_recommendations(gloo_report):
    app = DoctorApp(report=gloo_report)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5", "down", "c")
        await pilot.pause()
        assert app.clipboard == "export GLOO_SOCKET_IFNAME=ddpd-v0"
        assert [n.message for n in app._notifications] == ["copied: export GLOO_SOCKET_IFNAME=ddpd-v0"]


async def test_copy_on_a_view_without_snippets_says_so(gpu_report):
    app = DoctorApp(report=gpu_report)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5", "c")  # NCCL_ALGO: keep the default, no snippet
        await pilot.pause()
        assert app.clipboard == ""
        assert [n.message for n in app._notifications] == ["nothing to copy here"]


async def test_lint_view_shows_source_around_the_finding(gloo_report):
    app = DoctorApp(report=gloo_report, report_dir=DATA)
    async with app.run_test(size=SIZE) as pilot:
        text = await show(pilot, "6", "down", "down")
        assert "train_bad.py:25:17: DDP301" in text
        assert "❱ 25                 dist.all_reduce(loss.detach())" in text
        assert "24             if rank == 0:" in text
        await pilot.press("c")
        assert app.clipboard.startswith("train_bad.py:25:17: DDP301 all_reduce only on rank 0")


async def test_lint_source_missing_says_so(gloo_report):
    app = DoctorApp(report=gloo_report)  # no report_dir: train_bad.py is not found from the cwd
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        await pilot.pause()
        assert "source not available on this machine" in screen_text(app)


async def test_help_screen_opens_and_closes():
    app = DoctorApp(report=Report())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        assert "ddpdoctor tui — keys" in text and "←↑↓→" in text and "copy the selected snippet" in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


async def test_empty_report_shows_no_data_panels():
    app = DoctorApp(report=Report())
    async with app.run_test(size=SIZE) as pilot:
        for key, needle in {
            "2": "No point-to-point matrix yet",
            "3": "No bandwidth curve yet",
            "4": "No topology yet",
            "5": "No recommendations yet",
            "6": "No lint findings yet",
        }.items():
            await pilot.press(key)
            await pilot.pause()
            assert needle in screen_text(app)


async def wait_for(pilot, cond, timeout: float = 20.0) -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError("condition not met in time:\n" + screen_text(pilot.app))
        await pilot.pause(0.05)


async def test_live_mode_streams_then_loads_the_report(tmp_path):
    app = DoctorApp(
        live=LiveConfig(command=fake_command("--delay", "0.03"), workdir=str(tmp_path), poll_s=0.05)
    )
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "live run" in screen_text(app))
        await pilot.press("2")  # the UI answers keys while the check runs
        await wait_for(pilot, lambda: "P2P bandwidth heatmap" in screen_text(app))
        await wait_for(pilot, lambda: app.report is not None)
        await wait_for(pilot, lambda: "0.03! 0.03!" in screen_text(app))
        await pilot.press("1")
        await wait_for(pilot, lambda: "live run finished · exit 1" in screen_text(app))
        assert "report:" in screen_text(app) and "/report.json" in screen_text(app)  # where it was saved
        assert app.exit_code == 1


async def test_live_mode_without_report_shows_why(tmp_path):
    app = DoctorApp(
        live=LiveConfig(
            command=fake_command("--delay", "0", "--no-report"), workdir=str(tmp_path), poll_s=0.05
        )
    )
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "without a report" in screen_text(app))
        assert "check exited with 2 without a report" in screen_text(app)
        assert app.exit_code == 2


async def test_stop_key_ends_a_hung_check(tmp_path):
    cfg = LiveConfig(
        command=fake_command("--delay", "0", "--hang"), workdir=str(tmp_path), poll_s=0.05, stop_grace_s=2.0
    )
    app = DoctorApp(live=cfg)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "… running" in screen_text(app))
        await pilot.press("x")
        await wait_for(pilot, lambda: "check stopped without a report" in screen_text(app))
        assert app.run_handle.returncode is not None


async def test_live_mode_bad_command_is_reported(tmp_path):
    app = DoctorApp(live=LiveConfig(command=[str(tmp_path / "missing")], workdir=str(tmp_path)))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "could not start the check" in screen_text(app))
        assert app.exit_code == 2


async def test_lint_mode_runs_the_linter_off_the_ui_thread(gloo_report):
    import threading

    seen = {}

    def lint():
        seen["thread"] = threading.current_thread() is not threading.main_thread()
        return Report(lint=gloo_report.lint)

    app = DoctorApp(lint=lint, report_dir=DATA)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "train_bad.py:18:5" in screen_text(app))
        assert seen["thread"]
        assert "3 lint finding(s)" in screen_text(app)


async def test_lint_mode_crash_is_shown():
    def lint():
        raise RuntimeError("parser exploded")

    app = DoctorApp(lint=lint)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "lint failed: RuntimeError: parser exploded" in screen_text(app))


async def test_large_run_keeps_the_rank_column_narrow_and_lists_ranks_in_details():
    from ddpdoctor.core.report import CheckResult, Finding

    ranks = [
        {"rank": r, "local_rank": r % 8, "node_rank": r // 8, "hostname": f"node{r // 8:02d}"}
        for r in range(64)
    ]
    slow = Finding("P2P001", "error", "slow", where={"ranks": [42]})
    report = Report(
        run=RunInfo(backend="nccl", world_size=64),
        ranks=ranks,
        checks=[CheckResult("P2P001", "P2P", status="failed", findings=[slow])],
    )
    app = DoctorApp(report=report)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "64 ranks on 8 node(s)" in text
        row = next(line for line in text.splitlines() if "P2P001" in line)
        assert len(row) <= 80
        # the details show every rank: node 5 holds ranks 40-47, rank 42 failed
        assert "ranks: " + " ".join(["✓" * 8] * 5 + ["✓✓✗✓✓✓✓✓"] + ["✓" * 8] * 2) in text.replace("\n ", "")


async def test_topology_next_node_key_cycles_hosts():
    from ddpdoctor.core.report import CheckResult

    nodes = {
        "hostA": {"gdr": {"verdict": "enabled"}},
        "hostB": {"gdr": {"verdict": "disabled", "reason": "no peermem"}},
    }
    app = DoctorApp(report=Report(checks=[CheckResult("GDR001", "GDR", data={"nodes": nodes})]))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await pilot.pause()
        assert "Topology of hostA  (node 1/2, n: next)" in screen_text(app)
        text = await show(pilot, "n")
        assert "Topology of hostB" in text and "DISABLED  no peermem" in text


async def test_large_heatmap_uses_blocks_and_scrolls_to_the_cursor():
    from ddpdoctor.core.report import CheckResult

    n = 100
    vals = [[None if i == j else 1.5 for j in range(n)] for i in range(n)]
    vals[90][95] = 0.01
    data = {"matrix": {"unit": "GB/s", "values": vals}, "outliers": [[90, 95]]}
    app = DoctorApp(report=Report(checks=[CheckResult("P2P001", "P2P", data=data)]))
    async with app.run_test(size=SIZE) as pilot:
        text = await show(pilot, "2")
        assert "r90 → r95: 0.01 GB/s" in text  # the cursor starts on the outlier
        # the outlier's cell comes on screen: the pane scrolls right and down to it
        await wait_for(pilot, lambda: "█!" in screen_text(app))
        assert " r0 " not in screen_text(app)
        assert all(len(line) <= 80 for line in text.splitlines())


async def test_live_mode_reports_unreadable_event_lines(tmp_path):
    import sys

    script = (
        "import sys, json\n"
        "path = sys.argv[sys.argv.index('--events') + 1]\n"
        "open(path, 'w').write('not an event\\n' + json.dumps({'event': 'run_end', 'exit_code': 2}) + '\\n')\n"
    )
    app = DoctorApp(
        live=LiveConfig(command=[sys.executable, "-c", script], workdir=str(tmp_path), poll_s=0.05)
    )
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "without a report" in screen_text(app))
        assert "1 unreadable line(s)" in " ".join(msg for _, msg in app.state.logs)


async def test_markup_in_report_text_is_shown_as_written(gloo_report):
    """A "[/red]" in a check's title and torch's "[enforce fail]" in a summary: shown, no crash."""
    gloo_report.checks[0].title = "a [/red] b"
    gloo_report.checks[0].summary = "[enforce fail] x"
    for f in gloo_report.checks[-1].findings[:1]:
        f.message = "[/bold] peer [enforce fail] gone"
    app = DoctorApp(report=gloo_report, report_dir=DATA)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "a [/red] b" in text and "[enforce fail] x" in text
        for key in "123456":
            await pilot.press(key)
            await pilot.pause()
    assert app.return_code in (None, 0)
