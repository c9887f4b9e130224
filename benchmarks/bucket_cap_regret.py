"""Does the bucket_cap_mb recommendation pick a good cap on real training? Regret on a shaped 2-node bed.

Two emulated nodes (network namespaces, tests/support/testbed.py NetBed, DESIGN.md §6), one rank each, gloo,
the link shaped with tbf in both directions. First the all-reduce curve is measured on the bed with
``ddpdoctor check --nodes 2 --select BW001`` (or, with ``--own-curve`` / when no BW001 check is
installed, a short gloo all_reduce sweep inside the training worker: a stop-gap). Then the same two
processes train an MLP with real DDP at each cap of the sweep, the recommended cap and DDP's default,
interleaved round-robin, and time every step (median over rounds × steps).

Printed per link rate: one row per cap (real buckets, measured median step, the simulator's step), the
recommended cap, the best measured cap and the regret = recommended step / best step − 1 (target ≤ 5 %).
With several rates (``--rate-mbit 2000,200``) a last line says how the recommendation and the measured
best moved with the link.

    python benchmarks/bucket_cap_regret.py --rate-mbit 400                      # the regret
    python benchmarks/bucket_cap_regret.py --rate-mbit 0,200 --layers 8 \\
        --width 512 --batch 1024 --caps 1,5,25,200                               # direction, compute-bound
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine
from support.testbed import NetBed, netns_available

HERE = Path(__file__).resolve().parent
TARGET_REGRET = 0.05


def bw001_available() -> bool:
    from ddpdoctor.registry import discover

    return any(c.code == "BW001" for c in discover())


def run_training(bed: NetBed, cfg: dict, out: Path, timeout_s: float) -> dict:
    path = out / "train.json"
    cfg_path = out / "cfg.json"
    cfg_path.write_text(json.dumps(cfg))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    argv = [sys.executable, str(HERE / "_ddp_train.py"), str(cfg_path)]
    procs = [
        bed.popen(i, [*argv, str(i)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in (0, 1)
    ]
    try:
        outs = [p.communicate(timeout=timeout_s)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    if any(p.returncode != 0 for p in procs) or not path.exists():
        raise SystemExit("training failed:\n" + "\n---\n".join(o[-3000:] for o in outs))
    return json.loads(path.read_text())


def run_rate(rate: float, args: argparse.Namespace, own: bool, caps: list) -> dict:
    """Curve and training at one link rate, on a fresh bed."""
    with NetBed(2) as bed, tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for i in range(2 if rate else 0):  # rate 0: the veth unshaped
            bed.shape(i, rate_mbit=rate)  # each node's egress: both directions of the link
        report = None
        if not own:
            extra = [
                "--backend",
                "gloo",
                "--select",
                "BW001",
                "--option",
                f"max_size={args.max_size}",
                "--budget-scale",
                str(args.budget_scale),
            ]
            results = bed.run_check(extra, out, timeout=args.timeout)
            if any(code not in (0, 1) for code, _ in results) or not (out / "r0.json").exists():
                raise SystemExit(f"BW001 on the bed failed: {results}")
            report = str(out / "r0.json")
        sizes = [1024 << (2 * k) for k in range(12) if 1024 << (2 * k) <= args.max_size]
        cfg = {
            "master": f"{bed.addr(0)}:29500",
            "world_size": 2,
            "timeout_s": 120,
            "threads": 1,
            "width": args.width,
            "layers": args.layers,
            "batch": args.batch,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "steps_per_round": args.steps_per_round,
            "caps_mb": caps,
            "timing_iters": 8,
            "own_curve": own,
            "curve_sizes_B": sizes,
            "report": report,
            "out": str(out / "train.json"),
        }
        return run_training(bed, cfg, out, args.timeout)


def cap_of(rec: dict):
    return None if rec["value"] == "keep the default" else rec["value"]


def cap_text(cap) -> str:
    return "default" if cap is None else f"{cap:g}"


def simulated(rec: dict) -> dict:
    sim = {c: ms for c, ms in rec["data"].get("points", [])}
    sim[None] = rec["data"].get("default", {}).get("step_ms")
    return sim


def summarize(rate: float, res: dict, args: argparse.Namespace, own: bool) -> dict:
    """Print one rate's table; return the figures the direction line needs."""
    rec, rec_d = res["recommendation"], res["recommendation_during"]
    spec, spec_d = res["spec"], res["spec_during"]
    runs = sorted(res["runs"], key=lambda r: (r["cap_mb"] is None, r["cap_mb"] or 0))
    best = min(runs, key=lambda r: r["median_s"])
    by_cap = {r["cap_mb"]: r for r in runs}
    rec_run = by_cap[cap_of(rec)]
    regret = rec_run["median_s"] / best["median_s"] - 1
    sim, sim_d = simulated(rec), simulated(rec_d)
    ev = rec["evidence"]
    n_params = sum(t[1] for t in spec["tensors"])

    link = f"shaped to {rate:g} Mbit/s (tbf on both nodes' uplinks)" if rate else "unshaped (veth)"
    print(f"— link {link} —")
    print(f"load average before/after: {res['load_before'][0]:.1f}/{res['load_after'][0]:.1f}")
    print(
        f"model: MLP {args.layers} × Linear({args.width}, {args.width}) + ReLU, {n_params / 1e6:.1f}M "
        f"parameters ({ev['gradients_MiB']:.1f} MiB fp32 gradients), batch {args.batch}, "
        f"{res['threads']} thread per rank"
    )
    print(
        f"compute, slowest rank (ms): before the sweep forward+optimizer {spec['forward_ms']:.0f}, backward "
        f"{spec['backward_ms']:.0f}; during it (no_sync steps each round) {spec_d['forward_ms']:.0f}, "
        f"{spec_d['backward_ms']:.0f}"
    )
    src = "stop-gap gloo all_reduce sweep in the worker" if own else "ddpdoctor check --select BW001"
    print(
        f"curve: {src}, up to {args.max_size / 2**20:g} MiB; fit α {ev['alpha_us']} µs, β {ev['beta_GBps']} "
        f"GB/s (algbw, band {ev['fit_band_B']} B)"
    )
    print(
        f"{'bucket_cap_mb':>14} {'buckets':>8} {'measured ms':>12} {'min–max ms':>15} "
        f"{'sim. ms':>8} {'sim.* ms':>9}"
    )
    for r in runs:
        tags = [t for t, hit in (("recommended", r is rec_run), ("best", r is best)) if hit]
        cells = [f"{d[r['cap_mb']]:.0f}" if d.get(r["cap_mb"]) is not None else "—" for d in (sim, sim_d)]
        lo, hi = min(r["times_s"]) * 1e3, max(r["times_s"]) * 1e3
        print(
            f"{cap_text(r['cap_mb']):>14} {len(r['bucket_sizes_B']):>8} {r['median_s'] * 1e3:12.0f} "
            f"{f'{lo:.0f}–{hi:.0f}':>15} {cells[0]:>8} {cells[1]:>9}"
            + (f"  ← {', '.join(tags)}" if tags else "")
        )
    print(
        "sim.: simulated with the compute measured before the sweep; sim.*: with the compute seen during it"
    )
    verdict = "met" if regret <= TARGET_REGRET else "NOT met"
    print(
        f"recommended bucket_cap_mb = {rec['value']} (confidence {rec['confidence']}), best measured "
        f"{cap_text(best['cap_mb'])}: regret {rec_run['median_s'] * 1e3:.0f} / {best['median_s'] * 1e3:.0f} "
        "− 1 = "
        f"{regret * 100:.1f} % (target ≤ {TARGET_REGRET * 100:.0f} %: {verdict})"
    )
    cap_d = cap_of(rec_d)
    if cap_d in by_cap:
        regret_d = by_cap[cap_d]["median_s"] / best["median_s"] - 1
        print(
            f"with the compute seen during the sweep it recommends {rec_d['value']}: "
            f"regret {regret_d * 100:.1f} %"
        )
    else:
        print(f"with the compute seen during the sweep it recommends {rec_d['value']} (not trained)")
    print()
    return {"rate": rate, "rec": cap_of(rec), "best": best["cap_mb"], "regret": regret}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--rate-mbit", default="400", help="tbf rate(s) on both nodes' uplinks, Mbit/s, comma-separated"
    )
    ap.add_argument("--caps", default="1,5,10,25,50,100,200", help="bucket_cap_mb values to train with (MiB)")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=384)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps-per-round", type=int, default=2)
    ap.add_argument("--own-curve", action="store_true", help="measure the curve inside the worker (stop-gap)")
    ap.add_argument("--max-size", type=int, default=16 << 20, help="largest all_reduce size in the curve (B)")
    ap.add_argument("--budget-scale", type=float, default=4.0, help="BW001's time budget multiplier")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds for each phase")
    args = ap.parse_args()

    ok, why = netns_available()
    if not ok:
        print(f"bucket_cap_regret: skipped: {why}")
        return 0
    rates = [float(r) for r in args.rate_mbit.split(",")]
    caps = [float(c) if "." in c else int(c) for c in args.caps.split(",")]
    own = args.own_curve or not bw001_available()
    print("bucket_cap_regret — real DDP training vs the bucket_cap_mb recommendation")
    print(f"machine: {machine()}")
    print(
        f"bed: 2 nodes × 1 rank in network namespaces, gloo; {args.warmup} warm-up steps per cap, then "
        f"{args.rounds} rounds × {args.steps_per_round} steps round-robin over the caps; median of "
        f"{args.rounds * args.steps_per_round} steps (rank 0)"
    )
    print()
    t0 = time.monotonic()
    summary = [summarize(rate, run_rate(rate, args, own, caps), args, own) for rate in rates]
    if len(summary) > 1:
        moves = "; ".join(
            f"{s['rate']:g} Mbit/s: recommended {cap_text(s['rec'])}, best measured {cap_text(s['best'])}"
            for s in summary
        )
        print(f"direction: {moves}")
    print(f"wall {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
