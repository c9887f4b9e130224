"""Charts as rich renderables: a matrix heatmap and a braille line plot.

Rich only (no textual), so they render the same inside the app, in a plain console and in tests.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from ddpdoctor.tui.adapt import Curve, Matrix, _is_number

# Low → high bandwidth; red is slow so the eye lands on bad links first.
HEAT = ["#8b0000", "#c0392b", "#d68910", "#b7950b", "#7d9c2c", "#2e8b57"]
CURVE_STYLES = ["bold green", "bold cyan", "bold magenta", "bold yellow", "bold blue"]


def fmt_bytes(n: float) -> str:
    """Binary-prefixed size as nccl-tests sweeps it (powers of two): 1K, 64M, 1G."""
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div:
            v = n / div
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{n:.0f}"


def fmt_size(n: float) -> str:
    """A size with its unit: 64MiB, 512 B."""
    s = fmt_bytes(n)
    return s + "iB" if s[-1] in "KMG" else s + " B"


def fmt_value(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def heat_style(v: float, lo: float, hi: float) -> str:
    frac = 1.0 if hi <= lo else (v - lo) / (hi - lo)
    idx = min(len(HEAT) - 1, max(0, int(frac * len(HEAT))))
    return f"bold white on {HEAT[idx]}"


HEATMAP_TOP = 2  # lines above the first row: "to→" and the column numbers


def heatmap_layout(n: int, width: int) -> tuple[int, int]:
    """(row label width, cell width) for an n×n heatmap in ``width`` columns."""
    label_w = len(f"r{n - 1}") + 1
    return label_w, next((w for w in (6, 3) if label_w + w * n <= width), 2)


def column_ruler(n: int, cell_w: int) -> str:
    """Column numbers over the cells: every column when they fit, else every 5th."""
    if cell_w >= 3:
        return "".join(f"{j:>{cell_w - 1}} " for j in range(n))
    ruler = [" "] * (n * cell_w)
    for j in range(0, n, 5):
        s = str(j)
        if j * cell_w + len(s) <= len(ruler) and all(
            c == " " for c in ruler[max(0, j * cell_w - 1) : j * cell_w + len(s)]
        ):
            ruler[j * cell_w : j * cell_w + len(s)] = s
    return "".join(ruler)


# -- heatmap -----------------------------------------------------------------------------------------
def heatmap_text(
    m: Matrix,
    outliers: Iterable[tuple[int, int]] = (),
    cursor: tuple[int, int] | None = None,
    width: int = 80,
) -> Text:
    """The matrix as coloured cells; rows are senders. Numbers when they fit, blocks otherwise
    (2 or 1 characters a cell); wider than ``width`` only when even 1 character does not fit.

    Outliers carry a ``!``; the cursor cell is shown reversed with a ``◂``.
    """
    outl = set(outliers)
    nums = m.numbers()
    lo, hi = (min(nums), max(nums)) if nums else (0.0, 0.0)
    n = m.size
    label_w, cell_w = heatmap_layout(n, width)
    out = Text(no_wrap=True, overflow="ignore")  # a wrapped row would no longer line up
    out.append(" " * label_w + "to→ ", "dim")
    out.append("\n")
    out.append(" " * label_w)
    out.append(column_ruler(n, cell_w), "dim")
    out.append("\n")
    for i in range(n):
        out.append(f"{'r' + str(i):<{label_w}}", "bold")
        for j in range(n):
            v = m.values[i][j]
            mark = "!" if (i, j) in outl else " "
            if i == j or not _is_number(v):
                body = "·" if i == j else "?"
                style = "dim"
            else:
                body = fmt_value(v) if cell_w == 6 else "█" * (cell_w - 1)
                style = heat_style(v, lo, hi)
                if (i, j) in outl:
                    style += " underline"
            cell = f"{body:>{cell_w - 1}}"[-(cell_w - 1) :]
            if cursor == (i, j):
                out.append(cell, style + " reverse")
                out.append(mark if mark != " " else "◂", "bold")
            else:
                out.append(cell, style)
                out.append(mark, "bold red")
        out.append("\n")
    out.append(" " * label_w + "row = sender, column = receiver", "dim")
    if nums:
        out.append("\n" + " " * label_w)
        out.append(f"{fmt_value(lo)} ", "dim")
        for k in range(len(HEAT)):
            out.append("  ", f"on {HEAT[k]}")
        out.append(f" {fmt_value(hi)} {m.unit}", "dim")
        if outl:
            out.append("   ! outlier", "bold red")
    return out


# -- braille plot ----------------------------------------------------------------------------------------
_DOTS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))  # [row % 4][col % 2]


class BrailleCanvas:
    """A grid of braille cells, 2×4 dots each; the last style drawn in a cell wins."""

    def __init__(self, width: int, height: int) -> None:
        self.w, self.h = width, height
        self.bits = [[0] * width for _ in range(height)]
        self.styles: list[list[str | None]] = [[None] * width for _ in range(height)]

    def dot(self, x: int, y: int, style: str) -> None:
        if 0 <= x < self.w * 2 and 0 <= y < self.h * 4:
            self.bits[y // 4][x // 2] |= _DOTS[y % 4][x % 2]
            self.styles[y // 4][x // 2] = style

    def line(self, x0: float, y0: float, x1: float, y1: float, style: str) -> None:
        steps = max(1, int(max(abs(x1 - x0), abs(y1 - y0))))
        for k in range(steps + 1):
            t = k / steps
            self.dot(round(x0 + (x1 - x0) * t), round(y0 + (y1 - y0) * t), style)

    def rows(self) -> list[Text]:
        out = []
        for r in range(self.h):
            t = Text()
            for c in range(self.w):
                b = self.bits[r][c]
                t.append(chr(0x2800 + b) if b else " ", self.styles[r][c] or "")
            out.append(t)
        return out


def nice_ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw)
    first = math.ceil(lo / step) * step
    ticks, v = [], first
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 10))
        v += step
    return ticks


def plot_lines(
    curves: list[Curve], width: int, height: int, ref: float | None = None, unit_y: str = ""
) -> list[Text]:
    """busbw-against-size style plot: x on a log2 axis (sizes), y linear from 0."""
    pts = [p for c in curves for p in c.points if p[0] > 0]
    if not pts:
        return [Text("no points to plot", "dim")]
    xs = [math.log2(p[0]) for p in pts]
    x_lo, x_hi = min(xs), max(xs)
    y_hi = max([p[1] for p in pts] + ([ref] if ref else []))
    y_hi = y_hi * 1.05 if y_hi > 0 else 1.0
    ticks = nice_ticks(0.0, y_hi)
    axis_w = max(len(fmt_value(t)) for t in ticks) + 1
    pw, ph = max(8, width - axis_w - 1), max(3, height - 2)
    cv = BrailleCanvas(pw, ph)

    def to_px(x: float, y: float) -> tuple[float, float]:
        fx = 0.5 if x_hi == x_lo else (math.log2(x) - x_lo) / (x_hi - x_lo)
        return fx * (pw * 2 - 1), (1 - y / y_hi) * (ph * 4 - 1)

    if ref:
        _, ry = to_px(2**x_lo, ref)
        for x in range(0, pw * 2, 3):
            cv.dot(x, round(ry), "dim")
    for k, c in enumerate(curves):
        style = CURVE_STYLES[k % len(CURVE_STYLES)]
        prev = None
        for x, y in c.points:
            if x <= 0:
                continue
            px = to_px(x, y)
            if prev is not None:
                cv.line(*prev, *px, style)
            cv.dot(round(px[0]), round(px[1]), style)
            prev = px
    tick_rows = {round((1 - t / y_hi) * (ph - 1)): t for t in ticks}
    lines = []
    for r, body in enumerate(cv.rows()):
        label = fmt_value(tick_rows[r]) if r in tick_rows else ""
        line = Text(f"{label:>{axis_w}}┤" if label else " " * axis_w + "│", "dim")
        line.append_text(body)
        lines.append(line)
    lines.append(Text(" " * axis_w + "└" + "─" * pw, "dim"))
    # x labels at powers of two spread over the axis, skipped where they would collide
    xl = [" "] * (axis_w + 1 + pw)
    n_labels = max(2, min(6, pw // 10))
    for k in range(n_labels):
        xv = 2 ** round(x_lo + (x_hi - x_lo) * k / (n_labels - 1))
        pos = axis_w + 1 + round(to_px(xv, 0)[0] / 2)
        s = fmt_bytes(xv)
        start = min(max(0, pos - len(s) // 2), len(xl) - len(s))
        if all(ch == " " for ch in xl[max(0, start - 1) : start + len(s) + 1]):
            xl[start : start + len(s)] = s
    axis = "".join(xl).rstrip()
    suffix = "  size (B)"
    lines.append(Text(axis + suffix if len(axis) + len(suffix) <= width else axis, "dim"))
    return lines


class CurvePlot:
    """A rich renderable around plot_lines that fits whatever width it is given."""

    def __init__(
        self, curves: list[Curve], height: int = 12, ref: float | None = None, unit_y: str = ""
    ) -> None:
        self.curves, self.height, self.ref, self.unit_y = curves, height, ref, unit_y

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        title = Text(f"busbw ({self.unit_y or '?'})  ", "bold")
        for k, c in enumerate(self.curves):
            title.append(f"━ {c.name}  ", CURVE_STYLES[k % len(CURVE_STYLES)])
        if self.ref:
            title.append(f"┄ expected {fmt_value(self.ref)}", "dim")
        yield title
        yield from plot_lines(self.curves, options.max_width, self.height, self.ref, self.unit_y)
