"""The heatmap and the braille plot render what they are given, at the width they are given."""

from __future__ import annotations

import pytest
from rich.console import Console

from ddpdoctor.tui.adapt import Curve, Matrix
from ddpdoctor.tui.charts import (
    BrailleCanvas,
    CurvePlot,
    fmt_bytes,
    fmt_size,
    heatmap_text,
    nice_ticks,
    plot_lines,
)


def render(renderable, width: int = 80) -> str:
    c = Console(width=width, color_system=None, record=True)
    c.print(renderable)
    return c.export_text()


def test_heatmap_shows_values_outliers_and_cursor():
    m = Matrix(["a", "b", "c"], [[None, 2.0, 2.1], [1.9, None, 0.03], [2.0, 2.0, None]], "GB/s")
    t = heatmap_text(m, {(1, 2)}, cursor=(0, 1)).plain
    rows = t.splitlines()
    assert rows[3].split()[0] == "r1" and "0.03!" in rows[3]
    assert "2.00◂" in rows[2]  # the cursor's marker
    assert "GB/s" in t and "! outlier" in t


def test_heatmap_falls_back_to_blocks_when_numbers_do_not_fit():
    n = 16
    m = Matrix(
        [f"r{i}" for i in range(n)], [[None if i == j else 1.0 + j for j in range(n)] for i in range(n)]
    )
    wide = heatmap_text(m, width=200).plain
    narrow = heatmap_text(m, width=60).plain
    assert "16.0" in wide and "██" not in wide
    assert "██" in narrow and max(len(line) for line in narrow.splitlines()[: n + 2]) <= 60


def test_heatmap_unmeasured_cells():
    m = Matrix(["a", "b"], [[None, "?"], [None, None]])
    assert heatmap_text(m).plain.count("?") >= 2


def test_braille_canvas_sets_dot_bits():
    cv = BrailleCanvas(1, 1)
    cv.dot(0, 0, "x")
    cv.dot(1, 3, "x")
    assert cv.rows()[0].plain == chr(0x2800 + 0x01 + 0x80)
    cv.dot(5, 5, "x")  # off the canvas: ignored
    assert cv.rows()[0].plain == chr(0x2881)


@pytest.mark.parametrize("width", [40, 80, 120])
def test_plot_fits_width_and_labels_axes(width):
    curve = Curve("all_reduce", [(2.0**k, k / 2) for k in range(10, 27)], unit_y="GB/s")
    lines = plot_lines([curve], width, 10, ref=8.0)
    assert all(len(line.plain) <= width for line in lines)
    assert len(lines) == 10
    text = "\n".join(line.plain for line in lines)
    assert "1K" in text and "64M" in text  # first and last sizes
    assert any(ch for ch in text if 0x2800 < ord(ch) <= 0x28FF)  # something was drawn


def test_plot_rises_left_to_right_for_a_rising_curve():
    curve = Curve("c", [(1024.0, 0.0), (1024.0 * 1024, 10.0)])
    lines = [line.plain for line in plot_lines([curve], 40, 8)]
    body = lines[:-2]
    first_col = min(i for i, line in enumerate(body) if any(0x2800 < ord(c) <= 0x28FF for c in line[-3:]))
    last_row_cells = [i for i, c in enumerate(body[-1]) if 0x2800 < ord(c) <= 0x28FF]
    assert first_col == 0  # the right end is at the top
    assert last_row_cells and last_row_cells[0] < 10  # the left end is at the bottom


def test_curve_plot_renderable_and_empty():
    out = render(CurvePlot([Curve("all_reduce", [(1024.0, 1.0), (2048.0, 2.0)])], 6, unit_y="GB/s"))
    assert "busbw (GB/s)" in out and "all_reduce" in out
    assert "no points" in render(CurvePlot([Curve("x", [(0.0, 1.0)])], 6))


def test_formatting_helpers():
    assert [fmt_bytes(x) for x in (512, 1024, 1536, 64 << 20, 4 << 30)] == ["512", "1K", "1.5K", "64M", "4G"]
    assert fmt_size(64 << 20) == "64MiB" and fmt_size(8) == "8 B"
    assert nice_ticks(0, 1.0) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert nice_ticks(3, 3) == [3]
