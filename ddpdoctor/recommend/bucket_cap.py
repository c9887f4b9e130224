"""The DDP ``bucket_cap_mb`` recommendation, from the all-reduce curve measured by BW001 and a ModelSpec.

For every cap in a sweep (and DDP's default) ``ddpdoctor.model.tuning.ddp_buckets`` replays the buckets DDP
would build and simulates one step: gradients become ready over the backward pass, each bucket's
all-reduce starts once it is complete and the earlier ones were launched, and takes what the measured
curve says for its size. We recommend the smallest cap whose simulated step is within ``MARGIN`` of the
best one ("keep the default" when the default is), since smaller buckets start communicating sooner
and leave the least behind when the backward time turns out longer than assumed.

With no backward time we cannot tell compute- from communication-bound, so we simulate three assumed
backward times (``ASSUMED_BACKWARD_X`` times the all-reduce time of all gradients at the default cap)
and take the cap with the smallest worst-case regret, at lower confidence. An unknown forward time is
half the backward (backward costs about twice the forward's FLOPs: Kaplan et al. 2020, "Scaling laws
for neural language models", C ≈ 6N per token = 2N forward + 4N backward). Pure: no torch, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ddpdoctor.core.report import Recommendation, Report
from ddpdoctor.model.bandwidth.curve import TimeCurve
from ddpdoctor.model.tuning.ddp_buckets import (
    DEFAULT_BUCKET_CAP_MB,
    GLOO_DEFAULT_THREADS,
    MIB,
    StepSim,
    ddp_buckets,
    first_bucket_bytes,
    simulate_step,
)
from ddpdoctor.recommend.model_spec import SPLIT_MAX_TENSORS, SPLIT_MIN_NUMEL, ModelSpec

RID = "bucket_cap_mb"
TITLE = "DDP gradient bucket size (bucket_cap_mb)"
CAPS_MB = (1, 2, 5, 10, 15, 25, 35, 50, 75, 100, 150, 200, 300, 500)
MARGIN = 0.03  # "within 3 % of the best simulated step"
ASSUMED_BACKWARD_X = (0.25, 1.0, 4.0)  # communication-bound, balanced, compute-bound
FORWARD_PER_BACKWARD = 0.5
# pytorch/pytorch#121640 (an explicit bucket_cap_mb also caps the first bucket) was still in review in
# late May 2024, so no release before 2.4 has it; checked present on 2.13.
FIRST_BUCKET_FOLLOWS_CAP_SINCE = (2, 4)
HOW_TO_MEASURE = "run `ddpdoctor check --select BW001` on the cluster (same nodes and ranks as the job)"
HOW_TO_GIVE_MODEL = (
    "give it to `ddpdoctor check` or `ddpdoctor recommend REPORT` as --model-params 124M --backward-ms 180 "
    "(its parameter count and one backward pass in ms) or --model-spec FILE (its exact tensors: the JSON "
    "of ddpdoctor.recommend.model_spec.ModelSpec.from_module(model).to_dict())"
)


@dataclass
class _Scenario:
    backward_s: float
    forward_s: float
    sims: dict[float | None, StepSim]  # cap (None = default) -> simulated step

    @property
    def best_s(self) -> float:
        return min(s.step_s for s in self.sims.values())


def recommend(
    report: Report, spec: ModelSpec | dict | None = None, *, caps_mb=CAPS_MB, margin: float = MARGIN
) -> list[Recommendation]:
    """One ``bucket_cap_mb`` Recommendation (also when BW001 or the model is missing: it then says
    what to provide). ``spec`` may be ``ModelSpec.to_dict()`` output."""
    caps = sorted({float(c) for c in caps_mb})
    if not caps or caps[0] <= 0:
        raise ValueError(f"caps_mb must be positive MiB values, got {list(caps_mb)}")
    if not 0 < margin < 1:
        raise ValueError(f"margin must be a fraction between 0 and 1, got {margin}")
    curve, data, curve_problem = _curve(report)
    problems = [curve_problem] if curve_problem else []
    if isinstance(spec, dict):
        try:
            spec = ModelSpec.from_dict(spec)
        except ValueError as e:
            problems.append(f"the model spec is invalid ({e}); {HOW_TO_GIVE_MODEL}")
            spec = None
    elif spec is None:
        problems.append(f"no model was given: {HOW_TO_GIVE_MODEL}")
    if problems or curve is None or spec is None:
        return [_cannot_tell(problems)]
    return [_recommend(report, spec, curve, data, caps, margin)]


def _curve(report: Report) -> tuple[TimeCurve | None, dict, str]:
    check = report.check("BW001")
    if check is None:
        return None, {}, f"the report has no all-reduce curve (check BW001 did not run); {HOW_TO_MEASURE}"
    data = check.data or {}
    raw = data.get("all_reduce") or (data.get("times") or {}).get("all_reduce")
    if not raw or not raw.get("points"):
        return None, data, (f"BW001 ({check.status.value}) measured no all_reduce times; {HOW_TO_MEASURE}")
    try:
        return TimeCurve.from_curve(raw), data, ""
    except (ValueError, TypeError, IndexError) as e:
        return None, data, f"BW001's all_reduce curve is unusable ({e}); {HOW_TO_MEASURE}"


def _cannot_tell(problems: list[str]) -> Recommendation:
    return Recommendation(
        id=RID,
        title=TITLE,
        value="keep the default",
        evidence={"missing": problems},
        confidence="low",
        rationale="Cannot simulate DDP's buckets: " + "; ".join(problems) + ".",
        snippet=None,
        data={},
    )


def _first_follows_cap(report: Report) -> bool:
    m = re.match(r"(\d+)\.(\d+)", str(report.versions.get("torch") or ""))
    return not m or (int(m[1]), int(m[2])) >= FIRST_BUCKET_FOLLOWS_CAP_SINCE


def _recommend(
    report: Report, spec: ModelSpec, curve: TimeCurve, data: dict, caps: list[float], margin: float
) -> Recommendation:
    backend = str(data.get("backend") or report.run.backend or "nccl").lower()
    channels = GLOO_DEFAULT_THREADS if backend == "gloo" else 1
    latency_s = min(curve.times[0], curve.fits[0].alpha_us * 1e-6) if curve.fits else curve.times[0]
    follows = _first_follows_cap(report)
    sim_kw = {"channels": channels, "latency_s": latency_s, **_flags(spec)}
    default_buckets = ddp_buckets(spec.tensors, None, **_flags(spec))
    comm_default_s = sum(curve.time_s(b.size_B) for b in default_buckets)

    if spec.backward_ms is not None:
        backward = [spec.backward_ms / 1e3]
    else:
        backward = [x * comm_default_s for x in ASSUMED_BACKWARD_X]
    scenarios = []
    for b in backward:
        f = spec.forward_ms / 1e3 if spec.forward_ms is not None else FORWARD_PER_BACKWARD * b
        sims = {
            cap: simulate_step(
                spec.tensors,
                cap,
                curve.time_s,
                b,
                forward_s=f,
                first_bucket_B=first_bucket_bytes(cap, follows),
                **sim_kw,
            )
            for cap in [None, *caps]
        }
        scenarios.append(_Scenario(b, f, sims))

    # Worst regret over the scenarios (one scenario when the backward time is known).
    worst = {c: max(s.sims[c].step_s / s.best_s - 1 for s in scenarios) for c in [None, *caps]}
    within = [c for c in caps if worst[c] <= margin]
    if worst[None] <= margin:
        choice = None
    else:
        choice = within[0] if within else min(caps, key=lambda c: worst[c])
    sw = _Sweep(
        spec=spec,
        curve=curve,
        caps=caps,
        margin=margin,
        backend=backend,
        world=data.get("world_size") or report.run.world_size,
        channels=channels,
        follows=follows,
        comm_default_s=comm_default_s,
        scenarios=scenarios,
        worst=worst,
        choice=choice,
    )
    sharp = len(within) < 2
    score = 3 - (not spec.exact) - (spec.backward_ms is None) - sharp - sw.cpu_timing_for_gpus
    return Recommendation(
        id=RID,
        title=TITLE,
        value="keep the default" if choice is None else _cap_value(choice),
        evidence=_evidence(sw),
        confidence="high" if score >= 3 else "medium" if score == 2 else "low",
        rationale=_rationale(sw),
        snippet=_snippet(spec, choice, backend),
        data=_plot_data(sw),
    )


@dataclass
class _Sweep:
    """A finished sweep: what the evidence, the plot data and the rationale are written from."""

    spec: ModelSpec
    curve: TimeCurve
    caps: list[float]
    margin: float
    backend: str
    world: int | None
    channels: int
    follows: bool  # an explicit cap also caps the first bucket on this torch
    comm_default_s: float  # all gradients all-reduced in the default buckets, one call after another
    scenarios: list[_Scenario]
    worst: dict[float | None, float]  # cap -> worst regret over the scenarios
    choice: float | None  # None: keep the default

    @property
    def main(self) -> _Scenario:
        return self.scenarios[len(self.scenarios) // 2]

    @property
    def rec(self) -> StepSim:
        return self.main.sims[self.choice]

    @property
    def best_cap(self) -> float | None:
        sims = self.main.sims
        return min(sims, key=lambda c: (sims[c].step_s, c or DEFAULT_BUCKET_CAP_MB))

    @property
    def comm_bound(self) -> bool:
        return self.rec.comm_s > self.main.backward_s

    @property
    def cpu_timing_for_gpus(self) -> bool:
        device = (self.spec.notes or {}).get("device")
        return self.spec.timing == "measured" and device == "cpu" and self.backend == "nccl"


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def _evidence(sw: _Sweep) -> dict[str, Any]:
    main, rec, dflt, spec = sw.main, sw.rec, sw.main.sims[None], sw.spec
    fit = _fit_for(sw.curve, max(rec.bucket_sizes_B))
    ev: dict[str, Any] = {
        "recommended_cap_MiB": _cap_value(sw.choice),
        "default_step_ms": _ms(dflt.step_s),
        "recommended_step_ms": _ms(rec.step_s),
        "best_step_ms": _ms(main.best_s),
        "best_cap_MiB": _cap_value(sw.best_cap),
        "default_exposed_comm_ms": _ms(dflt.exposed_comm_s),
        "recommended_exposed_comm_ms": _ms(rec.exposed_comm_s),
        "default_buckets": dflt.buckets,
        "recommended_buckets": rec.buckets,
        "largest_bucket_MiB": round(max(rec.bucket_sizes_B) / MIB, 3),
        "all_reduce_alone_ms": _ms(rec.comm_s),
        "backward_ms": _ms(main.backward_s),
        "forward_ms": _ms(main.forward_s),
        "backward_time": spec.timing or "assumed",
        "alpha_us": fit.alpha_us if fit else None,
        "beta_GBps": fit.beta_GBps if fit else None,
        "fit_band_B": [fit.lo_B, fit.hi_B] if fit else None,
        "fit_r2": fit.r2 if fit else None,
        "curve_max_B": int(sw.curve.sizes[-1]),
        "gradients_MiB": round(spec.grad_bytes / MIB, 3),
        "gradient_tensors": len(spec.tensors),
        "world_size": sw.world,
        "backend": sw.backend,
        "concurrent_all_reduces": sw.channels,
        "margin_pct": round(sw.margin * 100, 2),
        "default_regret_pct": round(sw.worst[None] * 100, 2),
        "recommended_regret_pct": round(sw.worst[sw.choice] * 100, 2),
    }
    if spec.backward_ms is None:
        ev["assumed_backward_ms"] = [_ms(s.backward_s) for s in sw.scenarios]
    return ev


def _plot_data(sw: _Sweep) -> dict[str, Any]:
    main, caps = sw.main, sw.caps
    out: dict[str, Any] = {
        "unit_x": "MiB",
        "unit_y": "ms",
        "points": [[c, _ms(main.sims[c].step_s)] for c in caps],
        "default": {
            "cap_MiB": DEFAULT_BUCKET_CAP_MB,
            "first_bucket_MiB": 1,
            "step_ms": _ms(main.sims[None].step_s),
        },
        "recommended_cap_MiB": _cap_value(sw.choice),
        "exposed_comm_ms": [[c, _ms(main.sims[c].exposed_comm_s)] for c in caps],
        "buckets": [[c, main.sims[c].buckets] for c in caps],
    }
    if len(sw.scenarios) > 1:
        out["scenarios"] = [
            {"backward_ms": _ms(s.backward_s), "points": [[c, _ms(s.sims[c].step_s)] for c in caps]}
            for s in sw.scenarios
        ]
    return out


def _flags(spec: ModelSpec) -> dict:
    return {"find_unused_parameters": spec.find_unused_parameters, "static_graph": spec.static_graph}


def _cap_value(cap: float | None) -> int | float:
    if cap is None:
        return DEFAULT_BUCKET_CAP_MB
    return int(cap) if float(cap).is_integer() else cap


def _fit_for(curve: TimeCurve, size_B: float):
    """The α–β band that covers ``size_B`` (the nearest one outside the measured range)."""
    if not curve.fits:
        return None
    return next((f for f in reversed(curve.fits) if f.lo_B <= size_B), curve.fits[0])


def _snippet(spec: ModelSpec, cap: float | None, backend: str) -> str:
    args = ["model"]
    if backend == "nccl":
        args.append("device_ids=[local_rank]")
    if cap is not None:
        args.append(f"bucket_cap_mb={_cap_value(cap)}")
    for flag in ("find_unused_parameters", "static_graph", "gradient_as_bucket_view"):
        if getattr(spec, flag):
            args.append(f"{flag}=True")
    line = f"model = DDP({', '.join(args)})"
    if cap is None:
        line += f"  # bucket_cap_mb left at its default ({DEFAULT_BUCKET_CAP_MB} MiB)"
    return "from torch.nn.parallel import DistributedDataParallel as DDP\n" + line


def _rationale(sw: _Sweep) -> str:
    spec, main, rec = sw.spec, sw.main, sw.rec
    pct = f"{sw.margin * 100:g} %"
    ranks = f"{sw.world} ranks" if sw.world else "the measured ranks"
    bwd_ms, best_ms = main.backward_s * 1e3, main.best_s * 1e3
    if sw.channels == 1:
        how = "one after another (NCCL runs a process group's collectives on one stream)"
    else:
        how = f"{sw.channels} at a time (ProcessGroupGloo's worker threads), sharing the link"
    intro = (
        f"Simulated one DDP step of {spec.describe()} for each cap, with the all_reduce times BW001 measured "
        f"on {ranks} ({sw.backend}): gradients ready over the backward pass in reverse registration order, "
        f"buckets launched in order as DDP's Reducer does, all-reduces running {how}."
    )
    out = [intro]
    best = f"{_cap_value(sw.best_cap)} MiB" if sw.best_cap is not None else "the default"
    if sw.choice is None:
        out.append(
            f"The default (25 MiB, first bucket 1 MiB) is within {pct} of the best simulated step "
            f"({best_ms:.1f} ms at {best}): changing it buys little."
        )
    else:
        dflt_ms = main.sims[None].step_s * 1e3
        out.append(
            f"bucket_cap_mb={_cap_value(sw.choice)} is the smallest cap within {pct} of the best simulated "
            f"step ({best_ms:.1f} ms at {best}); the default takes {dflt_ms:.1f} ms "
            + (f"(+{sw.worst[None] * 100:.1f} %)." if len(sw.scenarios) == 1
               else f"(+{dflt_ms / best_ms * 100 - 100:.1f} %; up to +{sw.worst[None] * 100:.1f} % over the "
               "assumed backward times below).")
        )
    comm = f"{rec.comm_s * 1e3:.0f} ms of all-reduce"
    if sw.comm_bound:
        out.append(
            f"The step is communication-bound ({comm} against {bwd_ms:.0f} ms of backward): the link sets "
            "most of the step; small buckets start sending sooner, large ones pay the per-call latency α "
            "fewer times."
        )
    else:
        out.append(
            f"The step is compute-bound ({comm} within {bwd_ms:.0f} ms of backward): what is left is the "
            "last bucket's all-reduce, so small buckets win until α per bucket makes communication fall "
            "behind."
        )
    if spec.backward_ms is None:
        xs = ", ".join(f"{s.backward_s * 1e3:.0f}" for s in sw.scenarios)
        factors = ", ".join(f"{x:g}" for x in ASSUMED_BACKWARD_X)
        out.append(
            f"No backward time was given: assumed {xs} ms ({factors}× the {sw.comm_default_s * 1e3:.0f} ms "
            "all-reduce of all gradients), forward half of that, and chose the cap with the least worst-case "
            "regret; give backward_ms (or ModelSpec.from_module(model, sample_input=...)) for a sharper "
            "answer."
        )
    elif sw.cpu_timing_for_gpus:
        out.append("The backward time was measured on this machine's CPU, not on the training GPUs.")
    if not spec.exact:
        out.append(
            f"The model is a bare parameter count, split into equal tensors of at least {SPLIT_MIN_NUMEL} "
            f"elements (at most {SPLIT_MAX_TENSORS}); real tensors are larger, so real buckets overshoot the "
            "cap more."
        )
    largest = max(rec.bucket_sizes_B)
    if largest > 2 * sw.curve.sizes[-1]:
        out.append(
            f"Buckets reach {largest / MIB:.0f} MiB, beyond the largest measured size "
            f"({sw.curve.sizes[-1] / MIB:.0f} MiB): their times are extrapolated."
        )
    if sw.backend == "gloo":
        out.append(
            "gloo: if training runs on CPU, all-reduces compete with the backward for cores, which the "
            "curve (measured alone) does not show; on a fast link prefer the larger end of the caps within "
            "the margin."
        )
    if spec.find_unused_parameters and not spec.static_graph:
        out.append(
            "find_unused_parameters=True: DDP never rebuilds the buckets in gradient-ready order and walks "
            "the autograd graph every step; set static_graph=True if the graph does not change (the answer "
            "then follows the rebuilt buckets)."
        )
    if sw.choice is not None and sw.follows:
        out.append(
            "An explicit bucket_cap_mb also caps the first bucket (torch >= 2.4); the default keeps 1 MiB."
        )
    out.append(
        f"What changes the answer: the world size (this curve is for {ranks}), the backward time (compute- "
        "vs communication-bound), find_unused_parameters and static_graph (bucket order), a different "
        "gradient dtype (bucket bytes); gradient_as_bucket_view=True saves the gradient copies and memory "
        "but does not change the buckets."
    )
    return " ".join(out)
