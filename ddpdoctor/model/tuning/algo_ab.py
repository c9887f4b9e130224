"""ALG001's payload (the NCCL_ALGO A/B) as typed data: written by checks/alg001_nccl_algo.py, read by
the ``nccl_algo`` recommendation. The keys and their meaning are in the check's docstring."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.core.payload import (
    PlotCurve,
    as_dict,
    flag,
    frozen,
    items,
    number,
    objects,
    text,
    thawed,
    whole,
)


@dataclass(frozen=True)
class GpuFacts:
    """Rank 0's GPU: name, compute capability ×10 (as NCCL writes it), active NVLinks (None: unknown)."""

    name: str | None = None
    sm: int | None = None
    nvlinks: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "sm": self.sm, "nvlinks": self.nvlinks}

    @classmethod
    def from_json(cls, d: Any) -> GpuFacts | None:
        if not isinstance(d, dict):
            return None
        return cls(text(d, "name"), whole(d, "sm"), whole(d, "nvlinks"))


@dataclass(frozen=True)
class AbRow:
    """One arm, repetition and size: the slowest rank's time and the bandwidths it gives."""

    arm: str
    rep: int
    size_B: int
    time_us: float
    algbw_GBps: float | None = None
    busbw_GBps: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "arm": self.arm, "rep": self.rep, "size_B": self.size_B, "time_us": self.time_us,
            "algbw_GBps": self.algbw_GBps, "busbw_GBps": self.busbw_GBps,
        }  # fmt: skip

    @classmethod
    def from_json(cls, d: dict) -> AbRow | None:
        """None for a row without its arm, repetition, size and time (nothing to compare)."""
        arm, rep, size, t = text(d, "arm"), whole(d, "rep"), whole(d, "size_B"), number(d, "time_us")
        if arm is None or rep is None or size is None or t is None:
            return None
        return cls(arm, rep, size, t, number(d, "algbw_GBps"), number(d, "busbw_GBps"))


@dataclass(frozen=True)
class AbFailure:
    """A launch (arm, repetition) whose children failed: the root-cause rank, its error and log tail."""

    arm: str | None
    rep: int | None
    rank: int | None
    error: str | None
    log_tail: str = ""
    errors: Mapping[str, Any] = field(default_factory=dict)  # {rank: error}

    def to_json(self) -> dict[str, Any]:
        return {
            "arm": self.arm, "rep": self.rep, "rank": self.rank, "error": self.error,
            "log_tail": self.log_tail, "errors": dict(self.errors),
        }  # fmt: skip

    @classmethod
    def from_json(cls, d: dict) -> AbFailure:
        return cls(
            text(d, "arm"), whole(d, "rep"), whole(d, "rank"), text(d, "error"),
            text(d, "log_tail", ""), as_dict(d.get("errors")),
        )  # fmt: skip


@dataclass(frozen=True)
class AlgAbPayload:
    """ALG001's ``data``. ``applies`` False (with ``backend`` and ``reason``): skipped on gloo; None: the
    report does not say (an older or partial payload)."""

    applies: bool | None = None
    backend: str | None = None
    reason: str | None = None  # why it did not apply (skipped payloads only)
    test_mode: bool = False
    nccl_version: str | None = None
    gpu: GpuFacts | None = None
    nvls_capable: bool | None = None
    world_size: int | None = None
    nnodes: int | None = None
    gpus_per_node: int | None = None
    arms: tuple[str, ...] = ()
    sizes_B: tuple[int, ...] = ()
    job_sizes_B: tuple[int, ...] | None = None
    reps: int | None = None
    iters: int | None = None
    order: tuple[tuple[str, int], ...] = ()
    results: tuple[AbRow, ...] = ()
    busbw: Mapping[str, PlotCurve] = field(default_factory=dict)  # {arm: median busbw curve}
    failures: tuple[AbFailure, ...] = ()
    nccl_read_algo: Mapping[str, str | None] = field(default_factory=dict)
    children_saw: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    child_processes: int = 0
    inherited_nccl_algo: str | None = None
    stopped_early: str | None = None

    @classmethod
    def not_applicable(cls, backend: str | None, reason: str) -> AlgAbPayload:
        return cls(applies=False, backend=backend, reason=reason)

    def to_json(self) -> dict[str, Any]:
        if self.applies is False:
            return {"applies": False, "backend": self.backend, "reason": self.reason}
        return {
            "applies": self.applies,
            "backend": self.backend,
            "test_mode": self.test_mode,
            "nccl_version": self.nccl_version,
            "gpu": self.gpu.to_json() if self.gpu is not None else None,
            "nvls_capable": self.nvls_capable,
            "world_size": self.world_size,
            "nnodes": self.nnodes,
            "gpus_per_node": self.gpus_per_node,
            "arms": list(self.arms),
            "sizes_B": list(self.sizes_B),
            "job_sizes_B": None if self.job_sizes_B is None else list(self.job_sizes_B),
            "reps": self.reps,
            "iters": self.iters,
            "order": [list(x) for x in self.order],
            "results": [r.to_json() for r in self.results],
            "busbw": {arm: c.to_json() for arm, c in self.busbw.items()},
            "failures": [f.to_json() for f in self.failures],
            "nccl_read_algo": dict(self.nccl_read_algo),
            "children_saw": {arm: thawed(v) for arm, v in self.children_saw.items()},
            "child_processes": self.child_processes,
            "inherited_nccl_algo": self.inherited_nccl_algo,
            "stopped_early": self.stopped_early,
        }

    @classmethod
    def from_json(cls, d: Any) -> AlgAbPayload:
        d = as_dict(d)
        job = d.get("job_sizes_B")
        return cls(
            applies=flag(d, "applies"),
            backend=text(d, "backend"),
            reason=text(d, "reason"),
            test_mode=bool(flag(d, "test_mode", False)),
            nccl_version=text(d, "nccl_version"),
            gpu=GpuFacts.from_json(d.get("gpu")),
            nvls_capable=flag(d, "nvls_capable"),
            world_size=whole(d, "world_size"),
            nnodes=whole(d, "nnodes"),
            gpus_per_node=whole(d, "gpus_per_node"),
            arms=tuple(a for a in items(d, "arms") if isinstance(a, str)),
            sizes_B=items(d, "sizes_B"),
            job_sizes_B=frozen(job) if isinstance(job, list) else None,
            reps=whole(d, "reps"),
            iters=whole(d, "iters"),
            order=frozen(items(d, "order")),
            results=tuple(r for r in map(AbRow.from_json, objects(d, "results")) if r is not None),
            busbw={
                arm: c for arm, v in as_dict(d.get("busbw")).items() if (c := PlotCurve.from_json(v)) is not None
            },
            failures=tuple(AbFailure.from_json(f) for f in objects(d, "failures")),
            nccl_read_algo=as_dict(d.get("nccl_read_algo")),
            children_saw={arm: frozen(v) for arm, v in as_dict(d.get("children_saw")).items()},
            child_processes=whole(d, "child_processes", 0),
            inherited_nccl_algo=text(d, "inherited_nccl_algo"),
            stopped_early=text(d, "stopped_early"),
        )
