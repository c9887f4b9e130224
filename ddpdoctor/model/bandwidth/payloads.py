"""P2P001's and BW001's payloads as typed data (docs/architecture.md, "Bandwidth payloads").

Written by checks/p2p001_p2p_matrix.py and checks/bw001_collective_sweep.py, and by ``ddpdoctor import``
(model/imported/checks.py) with the same codes and a few keys of its own, which are None here when a
payload does not have them and are then left out of ``to_json()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ddpdoctor.core.payload import (
    LabeledMatrix,
    PlotCurve,
    as_dict,
    flag,
    frozen,
    items,
    number,
    obj,
    objects,
    text,
    thawed,
    whole,
)
from ddpdoctor.model.bandwidth.curve import BandFit, sweep_curves


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    """Write an optional key only when the payload has it."""
    if value is not None:
        out[key] = value


@dataclass(frozen=True)
class LinkClass:
    """The pairs of one link class (``intra_node``, ``inter_node``): their median, the reference a slow
    pair is judged against, how many pairs; ``note`` when only two parties were measured."""

    median_GBps: float | None
    pairs: int | None = None
    reference_GBps: float | None = None  # None in imported reports
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"median_GBps": self.median_GBps}
        _put(out, "reference_GBps", self.reference_GBps)
        out["pairs"] = self.pairs
        _put(out, "note", self.note)
        return out

    @classmethod
    def from_json(cls, d: Any) -> LinkClass:
        d = as_dict(d)
        return cls(number(d, "median_GBps"), whole(d, "pairs"), number(d, "reference_GBps"), text(d, "note"))


@dataclass(frozen=True)
class P2PPayload:
    """P2P001's ``data``: the bandwidth matrix (row = sender), how it was measured, the verdicts' figures.
    The keys of a live run that an imported report lacks are None; ``matrices`` ... ``pct_of_expected``
    are the imported report's own."""

    matrix: LabeledMatrix | None = None
    latency: LabeledMatrix | None = None
    size_B: int | None = None
    mode: str | None = None  # pairs | sequential
    plan: str | None = None  # full | rails
    rounds: int | None = None
    target_s: float | None = None
    pairs: tuple[dict, ...] | None = None  # [{"from", "to", "GBps", "latency_us", ...}]
    remeasured_alone: tuple | None = None
    unconfirmed: tuple | None = None
    pairs_measured: int | None = None
    pairs_possible: int | None = None
    ranks: tuple[dict, ...] = ()  # [{"rank", "node_rank", "local_rank", "hostname"}]
    classes: Mapping[str, LinkClass] = field(default_factory=dict)
    outliers: tuple[tuple[int, int], ...] = ()
    asymmetric: tuple[dict, ...] | None = None
    localization: Mapping[str, Any] | None = None
    # ddpdoctor import only
    matrices: Mapping[str, Any] | None = None
    source: Mapping[str, Any] | None = None
    gpus_by_host: Mapping[str, Any] | None = None
    expected_GBps: float | None = None
    pct_of_expected: float | None = None

    def median_GBps(self, link_class: str) -> float | None:
        c = self.classes.get(link_class)
        return c.median_GBps if c is not None else None

    def to_json(self) -> dict[str, Any]:
        """A live run's keys in the order the check writes them, then the imported report's own."""
        out: dict[str, Any] = {}
        _put(out, "matrix", self.matrix.to_json() if self.matrix is not None else None)
        _put(out, "latency", self.latency.to_json() if self.latency is not None else None)
        for key in ("size_B", "mode", "plan", "rounds", "target_s"):
            _put(out, key, getattr(self, key))
        _put(out, "pairs", None if self.pairs is None else list(self.pairs))
        for key in ("remeasured_alone", "unconfirmed"):
            _put(out, key, thawed(getattr(self, key)))
        out["pairs_measured"], out["pairs_possible"] = self.pairs_measured, self.pairs_possible
        out["ranks"] = [dict(r) for r in self.ranks]
        out["classes"] = {k: c.to_json() for k, c in self.classes.items()}
        out["outliers"] = [list(p) for p in self.outliers]
        _put(out, "asymmetric", thawed(self.asymmetric))
        _put(out, "localization", self.localization)
        for key in ("matrices", "source", "gpus_by_host", "expected_GBps", "pct_of_expected"):
            _put(out, key, getattr(self, key))
        return out

    @classmethod
    def from_json(cls, d: Any) -> P2PPayload:
        d = as_dict(d)

        def seq(key: str) -> tuple | None:
            return frozen(d[key]) if isinstance(d.get(key), list) else None

        return cls(
            matrix=LabeledMatrix.from_json(d.get("matrix")),
            latency=LabeledMatrix.from_json(d.get("latency")),
            size_B=whole(d, "size_B"),
            mode=text(d, "mode"),
            plan=text(d, "plan"),
            rounds=whole(d, "rounds"),
            target_s=number(d, "target_s"),
            # one object per measured pair (4 M at 2,048 ranks): kept as they are, not copied
            pairs=tuple(d["pairs"]) if isinstance(d.get("pairs"), list) else None,
            remeasured_alone=seq("remeasured_alone"),
            unconfirmed=seq("unconfirmed"),
            pairs_measured=whole(d, "pairs_measured"),
            pairs_possible=whole(d, "pairs_possible"),
            ranks=objects(d, "ranks"),
            classes={k: LinkClass.from_json(v) for k, v in as_dict(d.get("classes")).items() if isinstance(v, dict)},
            outliers=tuple(
                (o[0], o[1])
                for o in items(d, "outliers")
                if isinstance(o, (list, tuple)) and len(o) == 2 and all(isinstance(i, int) and not isinstance(i, bool) for i in o)
            ),
            asymmetric=seq("asymmetric"),
            localization=obj(d, "localization"),
            matrices=obj(d, "matrices"),
            source=obj(d, "source"),
            gpus_by_host=obj(d, "gpus_by_host"),
            expected_GBps=number(d, "expected_GBps"),
            pct_of_expected=number(d, "pct_of_expected"),
        )


@dataclass(frozen=True)
class SweepRow:
    """One collective at one size: the slowest rank's median time and the bandwidths it gives. A live
    run adds ``slowest_rank``; ``ddpdoctor import`` adds ``dtype``, ``line`` and ``in_place`` (``time_us``,
    ``busbw_GBps`` of the in-place run) and has no ``iters``."""

    size_B: int
    time_us: float
    algbw_GBps: float | None = None
    busbw_GBps: float | None = None
    iters: int | None = None
    verified: bool | None = None
    slowest_rank: int | None = None
    dtype: str | None = None
    line: int | None = None
    in_place: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "size_B": self.size_B, "time_us": self.time_us, "algbw_GBps": self.algbw_GBps,
            "busbw_GBps": self.busbw_GBps, "iters": self.iters, "verified": self.verified,
        }  # fmt: skip
        for key in ("slowest_rank", "dtype", "line", "in_place"):
            _put(out, key, getattr(self, key))
        return out

    @classmethod
    def from_json(cls, d: Any) -> SweepRow | None:
        """None for a row without its size and time."""
        if not isinstance(d, dict) or whole(d, "size_B") is None or number(d, "time_us") is None:
            return None
        return cls(
            d["size_B"], d["time_us"], number(d, "algbw_GBps"), number(d, "busbw_GBps"), whole(d, "iters"),
            flag(d, "verified"), whole(d, "slowest_rank"), text(d, "dtype"), whole(d, "line"), obj(d, "in_place"),
        )  # fmt: skip


@dataclass(frozen=True)
class ProfileComparison:
    """BW001's all_reduce busbw against a hardware profile's reference (model/profiles/judge.py)."""

    name: str | None
    link_class: str | None = None  # all_reduce_busbw_intra_node | all_reduce_busbw_inter_node
    measured_GBps: float | None = None
    size_B: int | None = None
    pct_of_expected: float | None = None
    scaling: str | None = None  # how the reference was scaled to this run's shape

    def to_json(self) -> dict[str, Any]:
        out = {
            "name": self.name, "link_class": self.link_class, "measured_GBps": self.measured_GBps,
            "size_B": self.size_B, "pct_of_expected": self.pct_of_expected,
        }  # fmt: skip
        _put(out, "scaling", self.scaling)
        return out

    @classmethod
    def from_json(cls, d: Any) -> ProfileComparison | None:
        if not isinstance(d, dict):
            return None
        return cls(
            text(d, "name"), text(d, "link_class"), number(d, "measured_GBps"), whole(d, "size_B"),
            number(d, "pct_of_expected"), text(d, "scaling"),
        )  # fmt: skip


@dataclass(frozen=True)
class BwSweepPayload:
    """BW001's ``data``: per collective the measured rows, the busbw and time curves, the α–β fits.
    Read back, a ``busbw`` that is one curve (a user's check) is all_reduce's, and a unit the map of
    curves states once is each curve's.

    ``expected_busbw_GBps`` and ``profile`` are set when a hardware profile gives a reference."""

    sizes_B: tuple[int, ...] = ()
    ops: Mapping[str, tuple[SweepRow, ...]] = field(default_factory=dict)
    busbw: Mapping[str, PlotCurve] = field(default_factory=dict)
    times: Mapping[str, PlotCurve] = field(default_factory=dict)
    fit: Mapping[str, tuple[BandFit, ...]] = field(default_factory=dict)  # α–β per size band
    all_reduce: PlotCurve | None = None  # the all_reduce time curve, when all_reduce ran
    world_size: int | None = None
    nnodes: int | None = None
    backend: str | None = None
    device: str | None = None
    stopped: Mapping[str, Any] | None = None  # {"at_size_B", "elapsed_s", "estimated_s"}: cut by the budget
    # ddpdoctor import only
    source: Mapping[str, Any] | None = None
    gpus_by_host: Mapping[str, Any] | None = None
    hosts: tuple[str, ...] | None = None
    avg_busbw_GBps: Mapping[str, Any] | None = None
    # a hardware profile's reference (model/profiles/judge.py)
    expected_busbw_GBps: float | None = None
    profile: ProfileComparison | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "sizes_B": list(self.sizes_B),
            "ops": {op: [r.to_json() for r in rows] for op, rows in self.ops.items()},
            "busbw": {op: c.to_json() for op, c in self.busbw.items()},
            "times": {op: c.to_json() for op, c in self.times.items()},
            "fit": {op: [f.to_dict() for f in fits] for op, fits in self.fit.items()},
        }
        _put(out, "all_reduce", self.all_reduce.to_json() if self.all_reduce is not None else None)
        out.update(world_size=self.world_size, nnodes=self.nnodes, backend=self.backend, device=self.device,
                   stopped=self.stopped)  # fmt: skip
        _put(out, "source", self.source)
        _put(out, "gpus_by_host", self.gpus_by_host)
        _put(out, "hosts", None if self.hosts is None else list(self.hosts))
        _put(out, "avg_busbw_GBps", self.avg_busbw_GBps)
        _put(out, "expected_busbw_GBps", self.expected_busbw_GBps)
        _put(out, "profile", self.profile.to_json() if self.profile is not None else None)
        return out

    @classmethod
    def from_rows(cls, table: Mapping[str, list[dict]], **shape: Any) -> BwSweepPayload:
        """The payload of measured rows ``{op: [row, ...]}`` (curves and fits from ``sweep_curves``), with
        the run's ``shape`` (``world_size``, ``nnodes``, ``backend``, ``device``, ``stopped``, ...)."""
        return replace(cls.from_json(sweep_curves(dict(table))), **shape)

    @classmethod
    def from_json(cls, d: Any) -> BwSweepPayload:
        d = as_dict(d)

        def curves(key: str) -> dict[str, PlotCurve]:
            raw = as_dict(d.get(key))
            if (one := PlotCurve.from_json(raw)) is not None:  # one curve (a user's check): all_reduce's
                return {"all_reduce": one}
            unit_y = text(raw, "unit_y", "")  # {"unit_y": ..., op: curve}: said once for every curve
            return {k: c for k, v in raw.items() if (c := PlotCurve.from_json(v, unit_y)) is not None}

        def rows(key: str, read) -> dict[str, tuple]:
            return {k: tuple(x for x in map(read, v) if x is not None) for k, v in as_dict(d.get(key)).items()
                    if isinstance(v, list)}  # fmt: skip

        hosts = d.get("hosts")
        return cls(
            sizes_B=items(d, "sizes_B"),
            ops=rows("ops", SweepRow.from_json),
            busbw=curves("busbw"),
            times=curves("times"),
            fit=rows("fit", BandFit.from_dict),
            all_reduce=PlotCurve.from_json(d.get("all_reduce")),
            world_size=whole(d, "world_size"),
            nnodes=whole(d, "nnodes"),
            backend=text(d, "backend"),
            device=text(d, "device"),
            stopped=obj(d, "stopped"),
            source=obj(d, "source"),
            gpus_by_host=obj(d, "gpus_by_host"),
            hosts=tuple(hosts) if isinstance(hosts, list) else None,
            avg_busbw_GBps=obj(d, "avg_busbw_GBps"),
            expected_busbw_GBps=number(d, "expected_busbw_GBps"),
            profile=ProfileComparison.from_json(d.get("profile")),
        )
