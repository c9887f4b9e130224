"""One rank of benchmarks/bucket_cap_regret.py: real DDP training steps on gloo at several bucket caps.

Started by the benchmark inside a NetBed namespace, one process per node:
``python benchmarks/_ddp_train.py CONFIG.json RANK``. Rank 0 writes the results to ``config["out"]``.

What it does, in order (both ranks in step, every collective under the process group's timeout):
1. optionally (``own_curve``) times gloo all_reduce over a size sweep: the stop-gap curve for when no
   BW001 report is available;
2. times forward (+ optimizer step) and backward of the plain module on both ranks at once, so the
   compute sees the same CPU contention as training;
3. rank 0 builds the ModelSpec and the bucket_cap_mb recommendation from the BW001 report (or the
   stop-gap curve) and tells rank 1;
4. wraps one copy of the model per cap in DDP, warms each up (DDP rebuilds its buckets after the first
   step), then times training steps round-robin over the caps, so load drifts hit every cap alike.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from ddpdoctor.core.report import CheckResult, Report
from ddpdoctor.core.run_info import RunInfo
from ddpdoctor.recommend.bucket_cap import recommend
from ddpdoctor.recommend.model_spec import ModelSpec, measure_step_times


def build_model(cfg: dict) -> nn.Module:
    torch.manual_seed(0)
    width, layers = cfg["width"], cfg["layers"]
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(layers)])


def loss_of(out: torch.Tensor) -> torch.Tensor:
    return out.pow(2).mean()


def all_reduce_curve(sizes_B: list[int]) -> dict:
    """Stop-gap all_reduce time curve: per size the slowest rank's median seconds per call. The number
    of calls depends on the size only, so both ranks issue the same collectives."""
    points = []
    for size in sizes_B:
        t = torch.ones(size // 4, dtype=torch.float32)
        dist.all_reduce(t)  # warm-up
        times: list[float] = []
        for _ in range(max(3, min(20, (4 << 20) // size))):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - t0)
        med = torch.tensor([statistics.median(times)], dtype=torch.float64)
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        points.append([size, med.item()])
    return {"unit_x": "B", "unit_y": "s", "points": points}


def slowest(values: list[float]) -> list[float]:
    """Elementwise max over the ranks: a DDP step runs at the pace of its slowest rank (as BW001's
    curve takes the slowest rank's median)."""
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def optimizer_step_ms(model: nn.Module, iters: int = 5) -> float:
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=False)
        times.append((time.perf_counter() - t0) * 1e3)
    for p in model.parameters():
        p.grad = None
    return statistics.median(times)


def train_step(ddp: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> float:
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss_of(ddp(x)).backward()  # returns once DDP has waited for every bucket's all-reduce
    opt.step()
    return time.perf_counter() - t0


def compute_step(ddp: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> tuple[float, float]:
    """(forward + optimizer, backward) seconds of one step without gradient communication (no_sync)."""
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    with ddp.no_sync():
        loss = loss_of(ddp(x))
        t1 = time.perf_counter()
        loss.backward()
    t2 = time.perf_counter()
    opt.step()
    t3 = time.perf_counter()
    return (t1 - t0) + (t3 - t2), t2 - t1


def broadcast_json(obj, src: int):
    """src's JSON-able object on every rank. Not broadcast_object_list: that one needs numpy, which the CPU
    torch wheel does not bring."""
    data = json.dumps(obj).encode() if dist.get_rank() == src else b""
    size = torch.tensor([len(data)], dtype=torch.int64)
    dist.broadcast(size, src=src)
    buf = torch.tensor(list(data), dtype=torch.uint8) if data else torch.empty(int(size), dtype=torch.uint8)
    dist.broadcast(buf, src=src)
    return json.loads(bytes(buf.tolist()))


def main() -> int:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    rank = int(sys.argv[2])
    torch.set_num_threads(cfg.get("threads", 1))
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{cfg['master']}",
        rank=rank,
        world_size=cfg["world_size"],
        timeout=datetime.timedelta(seconds=cfg["timeout_s"]),
    )
    model = build_model(cfg)
    x = torch.randn(cfg["batch"], cfg["width"], generator=torch.Generator().manual_seed(1 + rank))
    result: dict = {"rank": rank, "threads": torch.get_num_threads(), "load_before": os.getloadavg()}

    curve = all_reduce_curve(cfg["curve_sizes_B"]) if cfg.get("own_curve") else None

    dist.barrier()
    fwd_ms, bwd_ms, notes = measure_step_times(model, x, loss_fn=loss_of, warmup=2, iters=cfg["timing_iters"])
    opt_ms = optimizer_step_ms(model)
    result["compute_ms_this_rank"] = [fwd_ms + opt_ms, bwd_ms]
    rest_ms, bwd_ms = slowest([fwd_ms + opt_ms, bwd_ms])
    spec = ModelSpec.from_module(
        model, backward_ms=bwd_ms, forward_ms=rest_ms, timing="measured", notes=notes, name="MLP"
    )

    rec = None
    report = None
    if rank == 0:
        if curve is not None:
            data = {"all_reduce": curve, "world_size": cfg["world_size"], "backend": "gloo"}
            report = Report(
                run=RunInfo(backend="gloo", world_size=cfg["world_size"]),
                versions={"torch": torch.__version__},
                checks=[CheckResult("BW001", "gloo all_reduce sweep (stop-gap)", data=data)],
            )
        else:
            report = Report.from_dict(json.loads(Path(cfg["report"]).read_text()))
        rec = recommend(report, spec)[0].to_dict()
    rec = broadcast_json(rec, src=0)
    rec_cap = None if rec["value"] == "keep the default" else rec["value"]

    configs: list = list(cfg["caps_mb"])
    if rec_cap not in configs:
        configs.append(rec_cap)
    if None not in configs:
        configs.append(None)  # DDP's default: 25 MiB with a 1 MiB first bucket
    runs = {}
    for cap in configs:
        m = copy.deepcopy(model)
        kw = {} if cap is None else {"bucket_cap_mb": cap}
        ddp = nn.parallel.DistributedDataParallel(m, **kw)
        opt = torch.optim.SGD(m.parameters(), lr=1e-6)
        for _ in range(cfg["warmup"]):
            train_step(ddp, opt, x)
        runs[cap] = {"ddp": ddp, "opt": opt, "times": []}
    # Compute-only steps (no_sync) in every round: the compute the sweep really saw, to check the simulator.
    probe = runs[None]
    compute: list[tuple[float, float]] = []
    for r in range(cfg["rounds"]):
        order = configs[r % len(configs) :] + configs[: r % len(configs)]
        for cap in order:
            for _ in range(cfg["steps_per_round"]):
                runs[cap]["times"].append(train_step(runs[cap]["ddp"], runs[cap]["opt"], x))
        compute += [compute_step(probe["ddp"], probe["opt"], x) for _ in range(cfg["steps_per_round"])]
    dist.barrier()
    for v in runs.values():  # DDP shows its rebuilt buckets from the third step on
        logged = v["ddp"]._get_ddp_logging_data()
        sizes = str(logged.get("rebuilt_bucket_sizes") or logged.get("bucket_sizes") or "")
        v["bucket_sizes_B"] = [int(s) for s in sizes.split(",") if s]
    fwd_during, bwd_during = slowest([statistics.median(c[i] for c in compute) * 1e3 for i in (0, 1)])
    spec_during = ModelSpec.from_dict({**spec.to_dict(), "forward_ms": fwd_during, "backward_ms": bwd_during})
    rec_during = recommend(report, spec_during)[0].to_dict() if rank == 0 else None

    result.update(
        load_after=os.getloadavg(),
        spec=spec.to_dict(),
        recommendation=rec,
        spec_during=spec_during.to_dict(),
        recommendation_during=rec_during,
        curve=curve,
        runs=[
            {
                "cap_mb": cap,
                "times_s": v["times"],
                "median_s": statistics.median(v["times"]),
                "bucket_sizes_B": v["bucket_sizes_B"],
            }
            for cap, v in runs.items()
        ],
    )
    if rank == 0:
        with open(cfg["out"], "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
