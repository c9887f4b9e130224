"""Text snapshots of every view at 80×24, compared line by line with tests/tui/snapshots/*.txt.

Colours are not compared (the layout and the words are). After an intended change, regenerate with
`DDPDOCTOR_UPDATE_SNAPSHOTS=1 python -m pytest tests/tui/test_tui_snapshots.py` and review the diff.
"""

from __future__ import annotations

import difflib
import os

import pytest

from ddpdoctor.tui.app import DoctorApp

from .helpers import DATA, SIZE, load, screen_text

SNAPSHOTS = DATA.parent / "snapshots"
UPDATE = os.environ.get("DDPDOCTOR_UPDATE_SNAPSHOTS") == "1"

CASES = {
    "overview_gloo": ("report_2x2_gloo.json", ()),
    "p2p_gloo": ("report_2x2_gloo.json", ("2",)),
    "p2p_gpu_cursor_moved": ("report_gpu_node.json", ("2", "left", "up")),
    "curve_gloo": ("report_2x2_gloo.json", ("3",)),
    "curve_gpu": ("report_gpu_node.json", ("3",)),
    "topology_gpu": ("report_gpu_node.json", ("4",)),
    "recs_gloo": ("report_2x2_gloo.json", ("5",)),
    "lint_gloo": ("report_2x2_gloo.json", ("6", "down")),
    "help": ("report_2x2_gloo.json", ("question_mark",)),
}


@pytest.mark.asyncio
@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(CASES))
async def test_snapshot(name):
    report_name, keys = CASES[name]
    app = DoctorApp(report=load(report_name), report_dir=DATA)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
        await pilot.pause()
        actual = screen_text(app) + "\n"
    path = SNAPSHOTS / f"{name}.txt"
    if UPDATE or not path.exists():
        path.write_text(actual, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"{path.name} did not exist: written now, review it and run again")
        return
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), "stored", "now")
        )
        pytest.fail(f"screen differs from {path.name}:\n{diff}")
