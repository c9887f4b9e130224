"""A measured time-versus-size curve of one collective, and its latency–bandwidth (α–β) fit.

The recommendations need "how long does an all_reduce of S bytes take here" for sizes that were not
measured exactly. ``TimeCurve.time_s`` interpolates between measured points (linear in time against
size, which is what an α + S/β world looks like between two neighbours) and, outside the measured
range, extrapolates with the α–β fit of the nearest size band. Pure: no torch, no I/O.

Size bands: small messages are latency-bound and large ones bandwidth-bound, so one straight line
fits neither well. ``fit_bands`` fits t = α + S/β by least squares on each band that has at least
two points and reports α in µs, β as algbw in GB/s and the fit's R².
"""

from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass

# Band edges in bytes: < 64 KiB latency-bound, 64 KiB–4 MiB the knee, >= 4 MiB bandwidth-bound.
DEFAULT_BAND_EDGES_B = (64 * 1024, 4 * 1024 * 1024)


@dataclass
class BandFit:
    lo_B: int  # smallest size in the band (inclusive)
    hi_B: int  # largest size in the band (inclusive)
    alpha_us: float  # fixed cost per call
    beta_GBps: float | None  # algbw the band tends to (None: time did not grow with size)
    r2: float | None
    points: int

    def time_s(self, size_B: float) -> float:
        t = self.alpha_us * 1e-6
        if self.beta_GBps:
            t += size_B / (self.beta_GBps * 1e9)
        return max(t, 0.0)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: object) -> BandFit | None:
        """A fit as ``to_dict`` wrote it; None when its band or fixed cost is missing."""
        if not isinstance(d, dict):
            return None
        lo, hi, alpha = d.get("lo_B"), d.get("hi_B"), d.get("alpha_us")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (lo, hi, alpha)):
            return None
        beta, r2, points = d.get("beta_GBps"), d.get("r2"), d.get("points")
        return cls(lo, hi, alpha, beta if isinstance(beta, (int, float)) else None,
                   r2 if isinstance(r2, (int, float)) else None, points if isinstance(points, int) else 0)  # fmt: skip


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float, float | None]:
    """Least squares t = a + b·S over (S, t) points: (a, b, R²). Needs two distinct sizes."""
    n = len(points)
    xs = [float(p[0]) for p in points]
    ys = [float(p[1]) for p in points]
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("a line fit needs at least two different sizes")
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    syy = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (a + b * x)) ** 2 for x, y in zip(xs, ys))
    r2 = None if syy == 0 else 1 - ss_res / syy
    return a, b, r2


def fit_bands(
    points: list[tuple[float, float]], edges: tuple[int, ...] = DEFAULT_BAND_EDGES_B
) -> list[BandFit]:
    """α–β fit per size band over (size_B, seconds) points; bands with fewer than two sizes are
    merged into their neighbour so every point belongs to some fit."""
    pts = sorted((float(s), float(t)) for s, t in points if s > 0 and t > 0 and math.isfinite(t))
    if len({s for s, _ in pts}) < 2:
        return []
    groups: list[list[tuple[float, float]]] = [[] for _ in range(len(edges) + 1)]
    for s, t in pts:
        groups[bisect.bisect_right(edges, s)].append((s, t))
    merged: list[list[tuple[float, float]]] = []
    for g in groups:
        if not g:
            continue
        if merged and len({s for s, _ in merged[-1]}) < 2:
            merged[-1].extend(g)
        else:
            merged.append(list(g))
    if len(merged) > 1 and len({s for s, _ in merged[-1]}) < 2:
        merged[-2].extend(merged.pop())
    out = []
    for g in merged:
        a, b, r2 = fit_line(g)
        out.append(
            BandFit(
                lo_B=int(g[0][0]),
                hi_B=int(g[-1][0]),
                alpha_us=round(max(a, 0.0) * 1e6, 3),
                beta_GBps=round(1.0 / b / 1e9, 6) if b > 0 else None,
                r2=None if r2 is None else round(r2, 4),
                points=len(g),
            )
        )
    return out


class TimeCurve:
    """Seconds for one call of a collective at any size, from measured (size_B, seconds) points."""

    def __init__(self, points: list[tuple[float, float]], fits: list[BandFit] | None = None) -> None:
        pts = sorted((float(s), float(t)) for s, t in points if s > 0 and t > 0 and math.isfinite(t))
        if not pts:
            raise ValueError("a time curve needs at least one measured point")
        self.sizes = [s for s, _ in pts]
        self.times = [t for _, t in pts]
        self.fits = fits if fits is not None else fit_bands(pts)

    @classmethod
    def from_curve(cls, curve: dict) -> TimeCurve:
        """From the report's curve shape ``{"unit_x": "B", "unit_y": "s", "points": [[S, t], ...]}``."""
        if not isinstance(curve, dict) or curve.get("unit_y", "s") != "s":
            raise ValueError("expected a time curve in seconds ({'unit_y': 's', 'points': [...]})")
        return cls([tuple(p[:2]) for p in curve.get("points") or []])

    def time_s(self, size_B: float) -> float:
        if size_B <= 0:
            return 0.0
        s, t = self.sizes, self.times
        if len(s) == 1:
            return t[0] * size_B / s[0] if size_B > s[0] else t[0]
        if size_B <= s[0]:
            # Below the smallest measured size time does not drop much: latency dominates.
            fit = self.fits[0] if self.fits else None
            return min(t[0], fit.time_s(size_B)) if fit else t[0]
        if size_B >= s[-1]:
            fit = self.fits[-1] if self.fits else None
            if fit and fit.beta_GBps:
                # Continue from the last measured point with the band's bandwidth.
                return t[-1] + (size_B - s[-1]) / (fit.beta_GBps * 1e9)
            return t[-1] * size_B / s[-1]
        i = bisect.bisect_left(s, size_B)
        if s[i] == size_B:
            return t[i]
        x0, x1, y0, y1 = s[i - 1], s[i], t[i - 1], t[i]
        return y0 + (y1 - y0) * (size_B - x0) / (x1 - x0)

    def algbw_GBps(self, size_B: float) -> float:
        return size_B / self.time_s(size_B) / 1e9


def sweep_curves(table: dict[str, list[dict]]) -> dict:
    """BW001's curves from its rows (``{op: [{"size_B", "time_us", "busbw_GBps", ...}]}``): ``sizes_B``,
    ``ops``, ``busbw`` and ``times`` curves per op, the α–β ``fit`` per op, and ``all_reduce`` (the
    time curve the recommenders read) when there is one (docs/architecture.md, "Bandwidth payloads")."""

    def curve(points: list[list[float]], unit_y: str) -> dict:
        return {"unit_x": "B", "unit_y": unit_y, "points": points}

    times = {op: curve([[r["size_B"], r["time_us"] / 1e6] for r in rows], "s") for op, rows in table.items()}
    out = {
        "sizes_B": sorted({r["size_B"] for rows in table.values() for r in rows}),
        "ops": table,
        "busbw": {
            op: curve([[r["size_B"], r["busbw_GBps"]] for r in rows], "GB/s") for op, rows in table.items()
        },
        "times": times,
        "fit": {
            op: [f.to_dict() for f in fit_bands([tuple(p) for p in times[op]["points"]])] for op in table
        },
    }
    if "all_reduce" in times:
        out["all_reduce"] = times["all_reduce"]
    return out
