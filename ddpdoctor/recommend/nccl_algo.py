"""The ``nccl_algo`` recommendation: override NCCL_ALGO only when the A/B measurement says so, clearly.

NCCL_ALGO is documented as a debugging knob: NCCL picks an algorithm per call from its cost model and
is usually right. So the rule is conservative. An override is recommended only when one algorithm
beat NCCL's own choice (the ALG001 arm with no NCCL_ALGO) by at least the margin (default 10 %) at
every one of the job's message sizes in every repetition, each pair of arms measured back to back in
fresh processes. Anything less — a win at some sizes, in some repetitions, or by a few per cent —
keeps the default, with the numbers that show why. On gloo NCCL_ALGO does not apply.

The override is written in NCCL's per-collective syntax (``NCCL_ALGO=allreduce:tree``), which leaves
every other collective to NCCL; NCCL 2.20's parser (tuning.cc ``parseList``) takes only a plain list,
so for 2.20 and older the value is the plain name, which then applies to every collective.

Predictions for node counts that were not measured come from :mod:`ddpdoctor.model.tuning.nccl_cost` and are
labelled as such: they say what NCCL's model would pick, not what a measurement would find. Pure: reads
a Report, no torch.
"""

from __future__ import annotations

import statistics
from typing import Any

from ddpdoctor.core.report import Recommendation, Report, Severity
from ddpdoctor.model.bandwidth.curve import TimeCurve
from ddpdoctor.model.bandwidth.payloads import P2PPayload
from ddpdoctor.model.bandwidth.sizes import format_size
from ddpdoctor.model.tuning.algo_ab import AlgAbPayload
from ddpdoctor.model.tuning.nccl_cost import PREDICTION_LABEL, CostModel, Fabric

ID = "nccl_algo"
TITLE = "NCCL_ALGO (all_reduce algorithm)"
DEFAULT_MARGIN = 0.10
MIN_REPS = 2
# NCCL 2.20.3's parseList has no "collective:" prefixes (verified in tuning.cc at that release).
PLAIN_SYNTAX_UP_TO = (2, 20)
DEBUG_KNOB_WARNING = (
    "NCCL_ALGO is a debugging knob: this result holds for the NCCL version and the cluster shape it was "
    "measured on; re-run ALG001 after an NCCL upgrade or a change in node count, and drop the override "
    "when it no longer wins."
)


def _version_tuple(text: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in str(text).split(".")[:3])
    except (TypeError, ValueError):
        return None


def override_value(arm: str, nccl_version: str | None) -> str:
    """``NCCL_ALGO=allreduce:tree``; the plain name where NCCL's parser predates per-collective lists."""
    v = _version_tuple(nccl_version)
    if v is not None and v[:2] <= PLAIN_SYNTAX_UP_TO:
        return f"NCCL_ALGO={arm}"
    return f"NCCL_ALGO=allreduce:{arm.lower()}"


def _margin(options: dict) -> float:
    m = options.get("nccl_algo_margin", DEFAULT_MARGIN)
    if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 < m < 1:
        raise ValueError(f"nccl_algo_margin={m!r}: expected a fraction between 0 and 1 (0.10 = 10 %)")
    return float(m)


def _job_sizes(options: dict, data: AlgAbPayload) -> list[int]:
    sizes = options.get("job_sizes_B", list(data.job_sizes_B or data.sizes_B))
    if (
        not isinstance(sizes, list)
        or not sizes
        or any(isinstance(s, bool) or not isinstance(s, int) or s <= 0 for s in sizes)
    ):
        raise ValueError(f"job_sizes_B={sizes!r}: expected a non-empty list of message sizes in bytes")
    return sorted(set(sizes))


# -- the measured comparison ---------------------------------------------------------------------------


def compare_arms(data: AlgAbPayload, job_sizes: list[int], margin: float) -> dict[str, Any]:
    """Every arm against the default at the job's sizes, repetition by repetition.

    Times at a job size come from each (arm, repetition)'s measured curve through TimeCurve, so sizes
    between measured points are interpolated; sizes outside the measured range are left out and listed.
    """
    rows = data.results
    curves: dict[tuple[str, int], TimeCurve] = {}
    for arm, rep in {(r.arm, r.rep) for r in rows}:
        pts = [(r.size_B, r.time_us * 1e-6) for r in rows if r.arm == arm and r.rep == rep]
        curves[(arm, rep)] = TimeCurve(pts)
    measured = sorted({r.size_B for r in rows})
    inside = [s for s in job_sizes if measured and measured[0] <= s <= measured[-1]]
    out: dict[str, Any] = {
        "margin_pct": round(margin * 100, 1),
        "job_sizes_B": inside,
        "outside_measured_B": [s for s in job_sizes if s not in inside],
        "arms": {},
    }
    default_reps = sorted(rep for a, rep in curves if a == "default")
    for arm in data.arms:
        if arm == "default":
            continue
        reps = [rep for rep in default_reps if (arm, rep) in curves]
        per_size = []
        for size in inside:
            d = [curves[("default", rep)].time_s(size) * 1e6 for rep in reps]
            a = [curves[(arm, rep)].time_s(size) * 1e6 for rep in reps]
            gains = [round((1 - ta / td) * 100, 2) for ta, td in zip(a, d)]
            per_size.append(
                {
                    "size_B": size,
                    "default_time_us": [round(x, 3) for x in d],
                    "candidate_time_us": [round(x, 3) for x in a],
                    "gain_pct": gains,
                }
            )
        all_gains = [g for p in per_size for g in p["gain_pct"]]
        clear = bool(per_size) and len(reps) >= MIN_REPS and min(all_gains) >= margin * 100
        out["arms"][arm] = {
            "paired_reps": len(reps),
            "per_size": per_size,
            "min_gain_pct": min(all_gains) if all_gains else None,
            "clear_and_consistent": clear,
            "why_not": None if clear else _why_not(per_size, len(reps), margin),
        }
    return out


def _why_not(per_size: list[dict], reps: int, margin: float) -> str:
    if not per_size:
        return "no job size inside the measured range"
    if reps < MIN_REPS:
        return f"only {reps} repetition(s) paired with the default (need {MIN_REPS})"
    worst = min(per_size, key=lambda p: min(p["gain_pct"]))
    gains = "/".join(f"{g:+.1f} %" for g in worst["gain_pct"])
    size = format_size(worst["size_B"])
    if max(worst["gain_pct"]) >= margin * 100:
        return f"won by {margin * 100:g} % only in some repetitions at {size} ({gains} per repetition)"
    if min(worst["gain_pct"]) < 0:
        return f"slower than the default at {size} ({gains} per repetition)"
    return f"within {margin * 100:g} % of the default at {size} ({gains} per repetition)"


# -- predictions ---------------------------------------------------------------------------------------


def _ring_busbw(data: AlgAbPayload) -> float | None:
    """Ring's bus bandwidth at the largest measured size (median over repetitions)."""
    rows = [r for r in data.results if r.arm == "Ring"]
    if not rows:
        return None
    top = max(r.size_B for r in rows)
    return statistics.median(r.busbw_GBps for r in rows if r.size_B == top)


def _first(*candidates: tuple[Any, str]) -> tuple[Any, str | None]:
    """The first (value, where it came from) whose value is known."""
    return next(((v, src) for v, src in candidates if v is not None), (None, None))


def fabric_for(report: Report, data: AlgAbPayload, options: dict) -> tuple[Fabric | None, dict[str, str]]:
    """The machine to predict for, and where each figure came from (or why there is none)."""
    given = options.get("nccl_fabric") or {}
    if not isinstance(given, dict):
        raise TypeError(f"nccl_fabric={given!r}: expected a mapping such as {{'inter_GBps': 400}}")
    gpu_sm, gpu_nvlinks = (data.gpu.sm, data.gpu.nvlinks) if data.gpu is not None else (None, None)
    nnodes, per_node = data.nnodes or 1, data.gpus_per_node or 1
    sm = given.get("sm", gpu_sm)
    if not sm:
        return None, {"reason": "the GPUs' compute capability is unknown"}
    if nnodes * per_node < 2:
        return None, {"reason": "one rank: NCCL has no algorithm to choose"}
    p2p_check = report.check("P2P001")
    p2p = P2PPayload.from_json(p2p_check.data) if p2p_check else P2PPayload()
    p2p_intra, p2p_inter = p2p.median_GBps("intra_node"), p2p.median_GBps("inter_node")
    ring = _ring_busbw(data)
    intra, intra_src = _first(
        (given.get("intra_GBps"), "option nccl_fabric"),
        (p2p_intra, "P2P001 intra-node median"),
        (
            ring,
            "ALG001 Ring busbw at the largest size" + (" (a lower bound across nodes)" if nnodes > 1 else ""),
        ),
    )
    inter, inter_src = _first(
        (given.get("inter_GBps"), "option nccl_fabric"),
        (ring if nnodes > 1 else None, "ALG001 Ring busbw at the largest size"),
        (
            p2p_inter * per_node if p2p_inter else None,
            "P2P001 inter-node pair median × GPUs per node (a NIC per GPU)",
        ),
    )
    source = {
        "intra_GBps": intra_src or "unknown",
        "inter_GBps": inter_src or "unknown: pass nccl_fabric={'inter_GBps': ...} or measure across nodes",
        "intra_link": "option nccl_fabric"
        if given.get("intra_link")
        else "NVML NVLink count"
        if gpu_nvlinks is not None
        else "assumed PCIe (NVLink count unknown)",
        "cpu_vendor": "option nccl_fabric" if "cpu_vendor" in given else "assumed intel",
    }
    if intra is None:
        return None, {**source, "reason": "no intra-node bandwidth (no P2P001, no Ring measurement)"}
    fabric = Fabric(
        nnodes=nnodes, gpus_per_node=per_node, sm=int(sm), intra_GBps=float(intra),
        inter_GBps=None if inter is None else float(inter),
        intra_link=given.get("intra_link") or ("nvlink" if gpu_nvlinks else "pci"),
        nvls=bool(given.get("nvls", data.nvls_capable)), cpu_vendor=given.get("cpu_vendor", "intel"),
    )  # fmt: skip
    return fabric, source


def predict(fabric: Fabric, node_counts: list[int], job_sizes: list[int]) -> list[dict]:
    """NCCL's predicted pick per node count and size; counts that need an unknown network are skipped."""
    rows = []
    for nn in node_counts:
        if nn > 1 and fabric.inter_GBps is None:
            continue
        model = CostModel(fabric.with_nodes(nn))
        for size in job_sizes:
            pick = model.pick(size)
            rows.append({
                "nnodes": nn, "size_B": size, "algo": pick.algo, "proto": pick.proto,
                "time_us": round(pick.time_us, 2), "busbw_GBps": round(pick.busbw_GBps, 2),
                "per_algo": {a: {"proto": p.proto, "time_us": round(p.time_us, 2)}
                             for a, p in model.best_per_algo(size).items()},
            })  # fmt: skip
    return rows


# -- the recommendation --------------------------------------------------------------------------------


def _rec(value: str, confidence: str, rationale: str, **kw: Any) -> Recommendation:
    return Recommendation(id=ID, title=TITLE, value=value, confidence=confidence, rationale=rationale, **kw)


def recommend(report: Report, options: dict | None = None) -> list[Recommendation]:
    """One ``nccl_algo`` Recommendation from the report's ALG001 data (options: ``nccl_algo_margin``,
    ``job_sizes_B``, ``nccl_fabric`` = {intra_GBps, inter_GBps, intra_link, nvls, sm, cpu_vendor})."""
    options = options or {}
    margin = _margin(options)
    backend = report.run.backend
    alg = report.check("ALG001")
    data = AlgAbPayload.from_json(alg.data) if alg is not None else AlgAbPayload()
    if backend != "nccl" or data.applies is False or data.backend not in (None, "nccl"):
        used = backend if backend != "nccl" else data.backend
        where = f"this run used {used}" if backend != "nccl" else f"ALG001 ran its A/B on {used} (test mode)"
        return [_rec("not applicable", "high", f"NCCL_ALGO only changes NCCL; {where}.",
                     evidence={"backend": used})]  # fmt: skip
    if not data.results:
        why = (
            "ALG001 did not run (it is in the full suite: --suite full or --select ALG001)"
            if alg is None
            else f"ALG001 measured nothing ({alg.summary})"
        )
        return [_rec("keep the default", "low", f"{why}; without an A/B measurement at the job's sizes NCCL's "
                     "own choice stands.", evidence={"measured": False})]  # fmt: skip

    errors = [f.message for f in alg.findings if f.severity is Severity.ERROR] if alg is not None else []
    if errors:
        return [_rec("keep the default", "low", "ALG001's A/B is not valid, so it cannot support an override: "
                     + "; ".join(errors) + ".", evidence={"measured": True, "alg001_errors": errors})]  # fmt: skip

    cmp = compare_arms(data, _job_sizes(options, data), margin)
    fabric, source = fabric_for(report, data, options)
    nodes = data.nnodes or 1
    rows = predict(fabric, [nodes * k for k in (2, 4, 8)], cmp["job_sizes_B"]) if fabric else []
    plots = {
        "comparison": cmp,
        "predictions": {"label": PREDICTION_LABEL, "source": source,
                        "fabric": fabric.to_dict() if fabric else None, "rows": rows},
        "busbw": {arm: c.to_json() for arm, c in data.busbw.items()} or None,
    }  # fmt: skip
    facts = {
        "version": data.nccl_version,
        "shape": f"{nodes} node(s) × {data.gpus_per_node} GPU(s)",
        "sizes": ", ".join(format_size(s) for s in cmp["job_sizes_B"]) or "none",
        "predicted": _prediction_text(rows, source),
    }
    evidence: dict[str, Any] = {
        "nccl_version": facts["version"], "measured_on": facts["shape"], "margin_pct": cmp["margin_pct"],
        "reps": data.reps, "job_sizes_B": cmp["job_sizes_B"],
        "job_sizes_outside_measured_B": cmp["outside_measured_B"],
        "arms_min_gain_pct": {a: v["min_gain_pct"] for a, v in cmp["arms"].items()},
    }  # fmt: skip
    winners = {a: v for a, v in cmp["arms"].items() if v["clear_and_consistent"]}
    if winners:
        arm = max(winners, key=lambda a: winners[a]["min_gain_pct"])
        return [_override(arm, winners[arm], data, facts, evidence, plots, margin)]
    return [_keep_default(cmp, data, facts, evidence, plots, margin)]


def _override(arm: str, won: dict, data: AlgAbPayload, facts: dict, evidence: dict, plots: dict, margin: float):
    gain, version = won["min_gain_pct"], facts["version"]
    value = override_value(arm, version)
    evidence.update(winner=arm, min_gain_pct=gain, per_size=won["per_size"])
    scope = (
        "all_reduce only; other collectives keep NCCL's choice"
        if "allreduce:" in value
        else "every collective (NCCL 2.20 and older have no per-collective syntax)"
    )
    rationale = (
        f"{arm} beat NCCL's default choice by at least {gain:.1f} % (margin {margin * 100:g} %) at every job "
        f"size ({facts['sizes']}) in all {won['paired_reps']} repetitions, each arm in fresh processes, on "
        f"NCCL {version}, {facts['shape']}. The value applies to {scope}. If NCCL_PROTO is also set, NCCL 2.31 "
        "leaves unnamed collectives without an algorithm (vllm-project/vllm#58179): then write "
        f'NCCL_ALGO="ring,tree;allreduce:{arm.lower()}". {DEBUG_KNOB_WARNING}{facts["predicted"]}'
    )
    high = (data.reps or 0) >= 3 and gain >= 2 * margin * 100
    snippet = (
        f"export {value}  # ddpdoctor ALG001 on NCCL {version}: {arm} >= {gain:.0f} % faster; "
        "re-check after NCCL upgrades"
    )
    return _rec(
        value, "high" if high else "medium", rationale, evidence=evidence, snippet=snippet, data=plots
    )


def _keep_default(cmp: dict, data: AlgAbPayload, facts: dict, evidence: dict, plots: dict, margin: float):
    arms = cmp["arms"]
    reasons = "; ".join(f"{a}: {v['why_not']}" for a, v in arms.items()) or "no other arm was measured"
    scored = {a: v for a, v in arms.items() if v["min_gain_pct"] is not None}
    if scored:
        closest = max(scored, key=lambda a: scored[a]["min_gain_pct"])
        evidence["closest"] = {"arm": closest, "per_size": scored[closest]["per_size"]}
    inherited = data.inherited_nccl_algo
    rationale = (
        f"No algorithm beat NCCL's default choice by {margin * 100:g} % at every job size ({facts['sizes']}) in "
        f"every repetition on NCCL {facts['version']}, {facts['shape']} — {reasons}."
        + (
            f" Your environment sets NCCL_ALGO={inherited}; the default arm ran without it."
            if inherited
            else ""
        )
        + " NCCL_ALGO is a debugging knob; NCCL's own per-call choice stands."
        + facts["predicted"]
    )
    measured = bool(arms) and all(v["paired_reps"] >= MIN_REPS for v in arms.values())
    snippet = f"unset NCCL_ALGO  # ddpdoctor ALG001: {inherited} did not win clearly" if inherited else None
    return _rec("keep the default", "medium" if measured else "low", rationale, evidence=evidence,
                snippet=snippet, data=plots)  # fmt: skip


def _prediction_text(rows: list[dict], source: dict) -> str:
    if not rows:
        return f" No predictions for other node counts: {source.get('reason') or source.get('inter_GBps')}."
    by_nodes: dict[int, list[str]] = {}
    for r in rows:
        by_nodes.setdefault(r["nnodes"], []).append(f"{r['algo']}/{r['proto']} at {format_size(r['size_B'])}")
    parts = "; ".join(f"{nn} nodes: {', '.join(v)}" for nn, v in by_nodes.items())
    return f" {PREDICTION_LABEL[0].upper()}{PREDICTION_LABEL[1:]}, what NCCL would pick by default — {parts}."
