"""Collective bandwidth sweep: all_reduce, all_gather, reduce_scatter and broadcast from 1 KiB up.

What it does: for each message size from 1 KiB to ``--max-size`` (default 16 MiB on gloo, 256 MiB on
NCCL; ×4 steps), every collective is warmed up, then timed call by call; each rank keeps the median,
and the slowest rank's median is the collective's time (a collective is as fast as its last rank).
All ranks agree on the iteration count from the slowest first call, so a size takes about the same
wall time however fast the link is. The last call's result is verified exactly (known per-rank values).
Sizes follow nccl-tests: S is the whole array (all_gather's output, reduce_scatter's input); algbw =
S / t, busbw = algbw × 2(n−1)/n for all_reduce, (n−1)/n for all_gather and reduce_scatter, 1 for
broadcast. A latency–bandwidth (α–β) fit per size band is kept for the recommendations.

When a slow link makes the next size too expensive for the budget the sweep stops there and says so.

Findings: wrong data at some size (error, naming the ranks); the sweep stopped early (info).
Payload: see docs/architecture.md, "Bandwidth payloads".
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Mapping

from ddpdoctor import check_options as opt
from ddpdoctor.core.report import Finding, Severity, Status
from ddpdoctor.core.summary import Summary
from ddpdoctor.core.world import WorldInfo
from ddpdoctor.model.bandwidth.busbw import busbw_factor
from ddpdoctor.model.bandwidth.curve import BandFit
from ddpdoctor.model.bandwidth.payloads import BwSweepPayload
from ddpdoctor.model.bandwidth.sizes import format_size, parse_size, size_ladder

from ._agree import agree_max

CODE = "BW001"
TITLE = "Collective bandwidth sweep"
KIND = "cluster"
ORDER = 40
BUDGET_S = 30.0
SUITES = ("quick", "full")
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
OPTIONS = (
    opt.Option("max_size", "largest collective size in the sweep (--max-size)", opt.size),
    opt.Option("bw_ops", "collectives to sweep (all_reduce,broadcast)", opt.names(OPS)),
)
MIN_SIZE_B = 1024
DEFAULT_MAX_SIZE_B = {"gloo": 16 * 2**20, "nccl": 256 * 2**20}
MIN_ITERS, MAX_ITERS = 3, 50
# Share of the budget the sweep plans to use; the rest is slack for the watchdog.
BUDGET_SHARE = 0.7


def _sizes(ctx) -> list[int]:
    hi = parse_size(
        ctx.options.get("max_size") or DEFAULT_MAX_SIZE_B.get(ctx.backend, DEFAULT_MAX_SIZE_B["gloo"])
    )
    # Whole float32 elements that split evenly over the ranks (all_gather, reduce_scatter).
    unit = 4 * ctx.world_size
    return sorted({max(unit, s // unit * unit) for s in size_ladder(MIN_SIZE_B, max(hi, MIN_SIZE_B))})


class _Timer:
    """Wall time of one blocking call: host clock on gloo, CUDA events on NCCL."""

    def __init__(self, ctx) -> None:
        import torch

        self.cuda = ctx.on_gpu
        self.torch = torch

    def __call__(self, fn) -> float:
        if self.cuda:
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0


def _collective(op: str, size_B: int, ctx):
    """(prepare, call, verify) for one op at one size; prepare() refills inputs outside the timing."""
    import torch
    import torch.distributed as dist

    n, r, dev = ctx.world_size, ctx.rank, ctx.device
    count = size_B // 4
    chunk = count // n
    if op == "all_reduce":
        t = torch.empty(count, device=dev)
        return (lambda: t.fill_(r + 1), lambda: dist.all_reduce(t), lambda: bool(t.eq(n * (n + 1) / 2).all()))
    if op == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        mine = torch.full((chunk,), float(r + 1), device=dev)
        out = torch.empty(chunk * n, device=dev)
        expected = torch.arange(1, n + 1, device=dev, dtype=torch.float32).repeat_interleave(chunk)
        return (lambda: out.zero_(), lambda: gather(out, mine), lambda: bool(out.eq(expected).all()))
    if op == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        inp = torch.full((chunk * n,), float(r + 1), device=dev)
        out = torch.empty(chunk, device=dev)
        return (lambda: out.zero_(), lambda: scatter(out, inp), lambda: bool(out.eq(n * (n + 1) / 2).all()))
    if op == "broadcast":
        t = torch.empty(count, device=dev)
        return (
            lambda: t.fill_(7.0 if r == 0 else -1.0),
            lambda: dist.broadcast(t, src=0),
            lambda: bool(t.eq(7.0).all()),
        )
    raise ValueError(op)


ONE_RANK = "one rank: no link between ranks to measure (busbw is 0 by definition); run on 2 or more GPUs or nodes"


def run(ctx) -> dict:
    if ctx.world_size < 2:
        return {"one_rank": True}  # a collective of one rank moves nothing (seen on a one-GPU machine)
    ops = list(ctx.options.get("bw_ops") or OPS)
    for o in ops:
        if o not in OPS:
            raise ValueError(f"bw_ops: unknown collective {o!r}; expected some of {', '.join(OPS)}")
    sizes = _sizes(ctx)
    timer = _Timer(ctx)
    plan_s = ctx.budget_s * BUDGET_SHARE
    target_s = max(0.004, min(0.06, plan_s / 2 / (len(ops) * len(sizes))))
    started = time.monotonic()
    results: dict[str, list[dict]] = {op: [] for op in ops}
    stopped = None
    last_call_s = 0.0  # the slowest single call at the previous size (all ranks agree on it)
    prev_size = None
    for k, size in enumerate(sizes):
        # Cheapest call we will make at this size, at least MIN_ITERS + 2 times per op.
        est = last_call_s * (size / prev_size) * (MIN_ITERS + 2) * len(ops) if prev_size else 0.0
        est, elapsed = agree_max(ctx, est, time.monotonic() - started)
        if k > 0 and elapsed + est > plan_s:
            stopped = {"at_size_B": size, "elapsed_s": round(elapsed, 3), "estimated_s": round(est, 3)}
            break
        slowest = 0.0
        for op in ops:
            prepare, call, verify = _collective(op, size, ctx)
            label = f"{op} {format_size(size)}"
            for _ in range(2 if k == 0 else 1):  # warm-up: connections, allocator, NCCL channels
                prepare()
                with ctx.op(label + " (warm-up)"):
                    call()
            prepare()
            with ctx.op(label):
                first = timer(call)
            (first,) = agree_max(ctx, first)
            slowest = max(slowest, first)
            iters = int(min(MAX_ITERS, max(MIN_ITERS, math.ceil(target_s / max(first, 1e-7)))))
            times = []
            for _ in range(iters):
                prepare()
                with ctx.op(label):
                    times.append(timer(call))
            ok = verify()
            results[op].append(
                {
                    "size_B": size,
                    "median_s": statistics.median(times),
                    "min_s": min(times),
                    "iters": iters,
                    "verified": ok,
                }
            )
        last_call_s, prev_size = slowest, size
        ctx.emit("progress", done=k + 1, total=len(sizes), message=f"{format_size(size)} done")
    return {"ops": results, "stopped": stopped, "sizes_B": sizes, "device": str(ctx.device)}


def summarize(results: dict[int, dict | None], world: WorldInfo) -> Summary:
    if world.world_size < 2:
        return Summary(status=Status.SKIPPED, summary=ONE_RANK)
    got = {r: d for r, d in results.items() if d}
    if not got:
        return Summary(summary="no rank returned measurements")
    n = world.world_size
    first = got[min(got)]
    ops = list(first.get("ops") or {})
    table: dict[str, list[dict]] = {}
    findings: list[Finding] = []
    for op in ops:
        rows = []
        by_size: dict[int, dict[int, dict]] = {}
        for r, d in got.items():
            for row in (d.get("ops") or {}).get(op, []):
                by_size.setdefault(int(row["size_B"]), {})[r] = row
        for size in sorted(by_size):
            per_rank = by_size[size]
            t = max(row["median_s"] for row in per_rank.values())
            bad = sorted(r for r, row in per_rank.items() if not row.get("verified", False))
            algbw = size / t / 1e9
            rows.append(
                {
                    "size_B": size,
                    "time_us": round(t * 1e6, 3),
                    "algbw_GBps": round(algbw, 6),
                    "busbw_GBps": round(algbw * busbw_factor(op, n), 6),
                    "iters": max(row["iters"] for row in per_rank.values()),
                    "verified": not bad and len(per_rank) == len(got),
                    "slowest_rank": max(per_rank, key=lambda r: per_rank[r]["median_s"]),
                }
            )
            if bad:
                findings.append(
                    Finding(
                        CODE,
                        Severity.ERROR,
                        f"{op} of {format_size(size)}: wrong data on ranks {bad}",
                        where={"ranks": bad, "nodes": sorted({world.host_of(r) for r in bad})},
                        evidence={"op": op, "size_B": size},
                        hint="wrong results without an error point at faulty hardware or a broken NCCL/driver install",
                    )
                )
        table[op] = rows
    stopped = first.get("stopped")
    if stopped:
        findings.append(
            Finding(
                CODE,
                Severity.INFO,
                f"the sweep stopped before {format_size(stopped['at_size_B'])}: the larger sizes would not fit the "
                f"budget ({stopped['elapsed_s']:.1f} s spent, about {stopped['estimated_s']:.1f} s more needed)",
                evidence=dict(stopped),
                hint="raise --budget-scale or lower --max-size to measure up to the size you want",
            )
        )
    payload = BwSweepPayload.from_rows(
        table, world_size=n, nnodes=len(world.nodes), backend=world.backend, device=first.get("device"),
        stopped=stopped,
    )  # fmt: skip
    return Summary(findings=findings, data=payload.to_json(), summary=_headline(table, payload.fit))


def _headline(table: dict[str, list[dict]], fits: Mapping[str, tuple[BandFit, ...]]) -> str:
    op = "all_reduce" if table.get("all_reduce") else next((o for o in table if table[o]), None)
    if op is None:
        return "no sizes measured"
    peak = max(table[op], key=lambda r: r["busbw_GBps"])
    alpha = fits[op][0].alpha_us if fits.get(op) else None
    text = f"{op} busbw {peak['busbw_GBps']:.3g} GB/s at {format_size(peak['size_B'])} (peak)"
    if alpha is not None:
        text += f", latency α ≈ {alpha:.0f} µs"
    n_sizes = len({r["size_B"] for rows in table.values() for r in rows})
    return text + f"; {len(table)} collectives × {n_sizes} sizes"
