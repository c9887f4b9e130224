"""ALG001 — NCCL algorithm A/B: all_reduce under NCCL's default choice, NCCL_ALGO=Ring and =Tree (and
NVLS where every GPU supports NVLink SHARP), each in fresh processes, at the job's message sizes.

How: NCCL reads NCCL_ALGO when a communicator is created, so for every arm and repetition each rank
starts a child (``python -m ddpdoctor.checks._algo_probe``) with that NCCL_ALGO — or none, for the
default — and the children form a process group of their own through the check's TCP store. They time
warm all_reduce calls at each size; the arms alternate (default, Ring, Tree, default, Ring, Tree, ...)
and the whole round runs at least twice, so drift shows up as disagreement between repetitions. A
child that fails or overruns is stopped, reported with the tail of its log, and the other arms go on.

Options (``--option KEY=VALUE``): ``algo_sizes`` (bytes, or ``1MiB,25MiB``; default 1, 4, 16, 25, 64
and 256 MiB, taken as the job's sizes when given; otherwise the DDP bucket sizes 1 MiB and 25 MiB
are the job's), ``algo_reps`` (>= 2, default 2), ``algo_iters`` and ``algo_warmup`` (timed and untimed
calls per size), ``algo_candidates`` (default ``Ring,Tree``), ``algo_launch_timeout_s`` (default
90). ``algo_backend=gloo`` is for tests: it runs the same fresh-process A/B on gloo, where NCCL_ALGO
changes nothing, to prove the plumbing without a GPU.

On gloo the check does not apply (skipped). Findings: an arm whose children failed (warning, with the
log tail), children that did not see the NCCL_ALGO they were given or got a wrong sum (error), no arm
measured at all (error). The verdict — override or keep the default — is the ``nccl_algo``
recommendation, built from this check's data (typed: ``ddpdoctor.model.tuning.algo_ab.AlgAbPayload``):

| key | shape |
|---|---|
| ``applies``, ``backend``, ``test_mode`` | False/"gloo" when skipped; ``test_mode``: children ran gloo |
| ``nccl_version``, ``gpu`` (``name``, ``sm``, ``nvlinks``), ``nvls_capable`` | rank 0's, NCCL runs only |
| ``world_size``, ``nnodes``, ``gpus_per_node`` | the measured shape |
| ``arms``, ``sizes_B``, ``job_sizes_B``, ``reps``, ``iters``, ``order`` | what ran, in order |
| ``results`` | ``[{"arm", "rep", "size_B", "time_us", "algbw_GBps", "busbw_GBps"}]``, slowest rank |
| ``busbw`` | ``{arm: curve}`` (median over repetitions), for plots |
| ``failures`` | ``[{"arm", "rep", "rank", "error", "log_tail", "errors": {rank: error}}]`` |
| ``nccl_read_algo`` | ``{arm: value}`` NCCL's own log line "NCCL_ALGO set by environment to ..." |
| ``children_saw``, ``child_processes`` | ``{arm: [NCCL_ALGO values]}`` the children had; distinct child pids |
| ``inherited_nccl_algo`` | NCCL_ALGO in the job's environment (the default arm ran without it) |
| ``stopped_early`` | why fewer launches ran than planned, or null |
"""

from __future__ import annotations

import os
import re
import statistics

from ddpdoctor.check_options import Option, choice, seconds, whole
from ddpdoctor.core.payload import PlotCurve
from ddpdoctor.core.report import Finding, Severity, Status
from ddpdoctor.core.summary import Summary
from ddpdoctor.core.world import WorldInfo
from ddpdoctor.model.bandwidth.busbw import algbw_GBps, busbw_GBps
from ddpdoctor.model.tuning.algo_ab import AbFailure, AbRow, AlgAbPayload, GpuFacts

CODE = "ALG001"
TITLE = "NCCL algorithm A/B"
KIND = "cluster"
ORDER = 60
# Each launch starts Python, torch and a communicator on every rank (~10-20 s on GPU nodes); 3-4 arms
# × 2 repetitions fit, and the runner stops early, with a note, when the next launch would not.
BUDGET_S = 300.0
SUITES = ("full",)
OPTIONS = (
    Option("algo_backend", "nccl, or gloo (test mode)", choice("nccl", "gloo")),
    # lambdas: the parsers are defined below
    Option("algo_sizes", "message sizes of the A/B runs (1MiB,25MiB)", lambda v: parse_sizes(v)),
    Option("algo_candidates", "NCCL_ALGO values to try (Ring,Tree)", lambda v: parse_candidates(v)),
    Option("algo_launch_timeout_s", "seconds one A/B launch may take", seconds),
    Option("algo_reps", "A/B repetitions per arm", whole(2, 20)),
    Option("algo_iters", "timed iterations per size", whole(1, 100_000)),
    Option("algo_warmup", "warm-up iterations per size", whole(0, 100_000)),
)

MiB = 1 << 20
DEFAULT_SIZES_B = (1 * MiB, 4 * MiB, 16 * MiB, 25 * MiB, 64 * MiB, 256 * MiB)
DDP_BUCKETS_B = (1 * MiB, 25 * MiB)  # DDP's first bucket and bucket_cap_mb default
TEST_SIZES_B = (64 * 1024, 1 * MiB)  # gloo test mode: quick
KNOWN_ALGOS = ("Ring", "Tree", "NVLS", "NVLSTree", "CollnetDirect", "CollnetChain")
SKIP_TEXT = "skipped: NCCL_ALGO does not apply to gloo"

_SIZE_RE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB)?\s*$")
_UNITS = {None: 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def _one_size(item) -> int:
    if isinstance(item, int) and not isinstance(item, bool):
        size = item
    else:
        m = _SIZE_RE.match(str(item))
        size = int(m.group(1)) * _UNITS[m.group(2)] if m else -1
    if size < 4:
        raise ValueError(f"algo_sizes: {item!r} is not a size of at least 4 bytes (e.g. 1048576 or 25MiB)")
    return size - size % 4  # whole float32 elements


def parse_sizes(value) -> list[int]:
    """``[1048576, 26214400]``, ``1048576`` or ``"1MiB,25MiB"`` -> sorted unique byte counts."""
    items = value if isinstance(value, list) else str(value).split(",")
    if not items:
        raise ValueError("algo_sizes: no sizes given")
    return sorted({_one_size(item) for item in items})


def parse_candidates(value) -> list[str]:
    """``"Ring,Tree"`` or ``["Ring", "Tree"]`` -> the NCCL_ALGO names, as NCCL spells them, each once."""
    items = value if isinstance(value, list) else value.split(",") if isinstance(value, str) else None
    if items is None:
        raise TypeError(f"algo_candidates={value!r}: expected a comma-separated list such as Ring,Tree")
    canon = {a.lower(): a for a in KNOWN_ALGOS}
    candidates: list[str] = []
    for c in filter(None, (str(c).strip() for c in items)):
        if c.lower() not in canon:
            raise ValueError(
                f"algo_candidates: unknown algorithm {c!r}; expected some of {', '.join(KNOWN_ALGOS)}"
            )
        if canon[c.lower()] not in candidates:
            candidates.append(canon[c.lower()])
    if not candidates:
        raise ValueError("algo_candidates: name at least one algorithm (e.g. Ring,Tree)")
    return candidates


def _int_option(options: dict, key: str, default: int, lo: int, hi: int) -> int:
    v = options.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ValueError(f"{key}={v!r}: expected a whole number from {lo} to {hi}")
    return v


def plan_options(options: dict, backend: str) -> dict | None:
    """The A/B plan from the run's options, validated; None when NCCL_ALGO does not apply."""
    want = options.get("algo_backend")
    if want not in (None, "nccl", "gloo"):
        raise ValueError(f"algo_backend={want!r}: expected nccl, or gloo (test mode)")
    child = want or backend
    if child == "nccl" and backend != "nccl":
        raise ValueError("algo_backend=nccl needs the NCCL backend (a run on GPUs)")
    if child != "nccl" and want is None:
        return None
    nccl = child == "nccl"
    given = options.get("algo_sizes")
    sizes = parse_sizes(given) if given is not None else list(DEFAULT_SIZES_B if nccl else TEST_SIZES_B)
    candidates = parse_candidates(options.get("algo_candidates", "Ring,Tree"))
    timeout = options.get("algo_launch_timeout_s", 90.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"algo_launch_timeout_s={timeout!r}: expected a positive number of seconds")
    plan = {
        "backend": child,
        "candidates": candidates,
        "sizes": sizes,
        "reps": _int_option(options, "algo_reps", 2, 2, 20),
        "iters": _int_option(options, "algo_iters", 20 if nccl else 3, 1, 100_000),
        "warmup": _int_option(options, "algo_warmup", 5 if nccl else 1, 0, 100_000),
        "launch_timeout_s": float(timeout),
    }
    # The job's sizes: the ones asked for, else DDP's default buckets where the sweep has them.
    job = sizes if given is not None else [s for s in DDP_BUCKETS_B if s in sizes] or sizes
    return {"plan": plan, "job_sizes_B": job}


def run(ctx) -> dict:
    opts = plan_options(ctx.options, ctx.backend)
    if opts is None:
        return {"applies": False, "backend": ctx.backend}
    from ddpdoctor.checks._algo_ab import AbPlan, AbRunner, gpu_facts, multicast_supported, nccl_version

    plan = AbPlan(**opts["plan"])
    on_gpu = plan.backend == "nccl"
    runner = AbRunner(ctx, plan)
    nvls_here = on_gpu and multicast_supported(runner.device_index)
    arms = runner.agree_arms(nvls_here)
    out = runner.run(arms)
    return {
        "applies": True,
        "backend": plan.backend,
        "test_mode": not on_gpu,
        "arms": arms,
        "sizes_B": plan.sizes,
        "job_sizes_B": opts["job_sizes_B"],
        "reps": plan.reps,
        "iters": plan.iters,
        "nccl_version": nccl_version() if on_gpu else None,
        "gpu": gpu_facts(runner.device_index) if on_gpu else None,
        "nvls_capable": nvls_here if on_gpu else None,
        "inherited_nccl_algo": os.environ.get("NCCL_ALGO"),
        "local_world_size": ctx.local_world_size,
        **out,
    }


# -- rank 0: pure ---------------------------------------------------------------------------------------


def _root_cause(entries: dict[int, dict]) -> tuple[int, dict]:
    """The failing rank to show: one whose own child failed, not one stopped because another did."""
    own = {r: e for r, e in entries.items() if not str(e.get("error", "")).startswith("stopped:")}
    pool = own or entries
    r = min(pool)
    return r, pool[r]


def _nccl_log_findings(read_algo: dict[str, str | None]) -> list[Finding]:
    """NCCL's own word on what it read: another value means the arm did not run what it says (NCCL
    also reads NCCL_ALGO from /etc/nccl.conf and ~/.nccl.conf)."""
    out = []
    for arm, read in read_algo.items():
        if read is None or (arm != "default" and read.lower() == arm.lower()):
            continue
        what = "the default arm (no NCCL_ALGO)" if arm == "default" else f"the NCCL_ALGO={arm} arm"
        out.append(Finding(
            CODE, Severity.ERROR if arm != "default" else Severity.WARNING,
            f"NCCL reports NCCL_ALGO={read} for {what}: that arm did not measure what it says",
            evidence={"arm": arm, "nccl_read": read},
            hint="look for NCCL_ALGO in /etc/nccl.conf, ~/.nccl.conf or NCCL_CONF_FILE",
        ))  # fmt: skip
    return out


def summarize(results: dict[int, dict | None], world: WorldInfo) -> Summary:
    datas = {r: d for r, d in results.items() if d}
    if not datas:
        return Summary(
            findings=[Finding(CODE, Severity.ERROR, "no rank returned ALG001 data")], summary="no data"
        )
    if all(d.get("applies") is False for d in datas.values()):
        return Summary(
            status=Status.SKIPPED,
            summary=SKIP_TEXT,
            data=AlgAbPayload.not_applicable(
                world.backend, "NCCL_ALGO only changes NCCL; this run used gloo"
            ).to_json(),
        )
    r0 = datas[min(datas)]
    arms, order, sizes = r0["arms"], r0["order"], r0["sizes_B"]
    n = world.world_size
    findings: list[Finding] = []
    missing = sorted(r for r in results if not results[r])
    if missing:
        findings.append(
            Finding(CODE, Severity.ERROR, f"ranks {missing} returned no A/B data", where={"ranks": missing})
        )

    rows: list[AbRow] = []
    failures: list[AbFailure] = []
    read_algo: dict[str, str | None] = {}
    wrong_env: dict[str, list[int]] = {}
    inexact: dict[str, list[int]] = {}
    seen_env: dict[str, set] = {}
    pids: set = set()
    for k, (arm, rep) in enumerate(order):
        entries = {r: d["launches"][k] for r, d in datas.items() if k < len(d.get("launches") or [])}
        if not entries:
            continue  # stopped early: said below
        failed = {r: e for r, e in entries.items() if not e.get("ok")}
        if failed or len(entries) < n:
            r, e = _root_cause(failed) if failed else (None, {"error": "some ranks did not run it"})
            failures.append(AbFailure(
                arm=arm, rep=rep, rank=r, error=e.get("error"), log_tail=e.get("log_tail", ""),
                errors={str(q): x.get("error") for q, x in sorted(failed.items())},
            ))  # fmt: skip
            continue
        expected = None if arm == "default" else arm
        for r, e in entries.items():
            if e.get("nccl_algo_env") != expected:
                wrong_env.setdefault(arm, []).append(r)
        read_algo.setdefault(arm, entries[min(entries)].get("nccl_read_algo"))
        for e in entries.values():
            seen_env.setdefault(arm, set()).add(e.get("nccl_algo_env"))
            pids.add(e.get("pid"))
        for i, size in enumerate(sizes):
            per_rank = [e["sizes"][i] for e in entries.values()]
            t_us = max(p["time_us"] for p in per_rank)
            if not all(p.get("exact", True) for p in per_rank):
                inexact.setdefault(arm, []).extend(
                    r for r, e in entries.items() if not e["sizes"][i].get("exact", True)
                )
            seconds = max(t_us, 1e-3) * 1e-6
            rows.append(AbRow(
                arm=arm, rep=rep, size_B=size, time_us=t_us,
                algbw_GBps=round(algbw_GBps(size, seconds), 4),
                busbw_GBps=round(busbw_GBps("all_reduce", n, size, seconds), 4),
            ))  # fmt: skip

    for arm in arms:
        mine = [f for f in failures if f.arm == arm]
        if not mine:
            continue
        first = mine[0]
        what = "NCCL's default choice" if arm == "default" else f"NCCL_ALGO={arm}"
        findings.append(
            Finding(
                CODE,
                Severity.WARNING,
                f"{what} failed in {len(mine)} of {r0['reps']} repetitions (rank {first.rank}: {first.error})",
                where={"ranks": sorted({f.rank for f in mine if f.rank is not None})},
                evidence={"arm": arm, "reps": [f.rep for f in mine], "log_tail": first.log_tail},
                hint="NVLS needs NVSwitch multicast and a running fabric manager"
                if arm.startswith("NVLS")
                else "the log tail in the evidence says why the child processes ended",
            )
        )
    for arm, ranks in wrong_env.items():
        findings.append(
            Finding(
                CODE,
                Severity.ERROR,
                f"the children of ranks {sorted(set(ranks))} did not see "
                f"NCCL_ALGO={arm if arm != 'default' else '(unset)'}: the A/B is not valid",
                where={"ranks": sorted(set(ranks))},
                evidence={"arm": arm},
            )
        )
    findings += _nccl_log_findings(read_algo)
    for arm, ranks in inexact.items():
        findings.append(
            Finding(
                CODE,
                Severity.ERROR,
                f"all_reduce under {arm} returned a wrong sum on ranks {sorted(set(ranks))}",
                where={"ranks": sorted(set(ranks))},
                evidence={"arm": arm},
                hint="wrong results with no error point at faulty hardware or a broken NCCL install",
            )
        )
    stopped = r0.get("stopped_early")
    if stopped:
        findings.append(
            Finding(CODE, Severity.WARNING, f"the A/B stopped early: {stopped}", evidence={"reason": stopped})
        )
    if not rows:
        findings.append(
            Finding(
                CODE,
                Severity.ERROR,
                "no NCCL_ALGO arm could be measured",
                evidence={"failures": len(failures)},
            )
        )

    curves = {}
    for arm in arms:
        pts = []
        for size in sizes:
            vals = [x.busbw_GBps for x in rows if x.arm == arm and x.size_B == size]
            if vals:
                pts.append((size, round(statistics.median(vals), 4)))
        if pts:
            curves[arm] = PlotCurve(tuple(pts), unit_x="B", unit_y="GB/s")

    test_mode = bool(r0.get("test_mode"))
    gpu = r0.get("gpu")
    data = AlgAbPayload(
        applies=True,
        backend=r0.get("backend"),
        test_mode=test_mode,
        nccl_version=r0.get("nccl_version"),
        gpu=GpuFacts(gpu.get("name"), gpu.get("sm"), gpu.get("nvlinks")) if isinstance(gpu, dict) else None,
        nvls_capable=r0.get("nvls_capable"),
        world_size=n,
        nnodes=len(world.nodes),
        gpus_per_node=r0.get("local_world_size"),
        arms=tuple(arms),
        sizes_B=tuple(sizes),
        job_sizes_B=None if r0.get("job_sizes_B") is None else tuple(r0["job_sizes_B"]),
        reps=r0.get("reps"),
        iters=r0.get("iters"),
        order=tuple((arm, rep) for arm, rep in order),
        results=tuple(rows),
        busbw=curves,
        failures=tuple(failures),
        nccl_read_algo=read_algo,
        children_saw={arm: tuple(sorted(v, key=str)) for arm, v in seen_env.items()},
        child_processes=len(pids - {None}),
        inherited_nccl_algo=r0.get("inherited_nccl_algo"),
        stopped_early=stopped,
    ).to_json()
    where = "gloo test mode: NCCL_ALGO changes nothing" if test_mode else f"NCCL {r0.get('nccl_version')}"
    measured = sorted({x.arm for x in rows}, key=arms.index)
    text = (
        f"{' vs '.join(measured)} at {len(sizes)} sizes × {r0.get('reps')} repetitions, fresh processes ({where})"
        if rows
        else "no arm measured"
    )
    return Summary(findings=findings, data=data, summary=text)
