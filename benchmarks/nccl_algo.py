"""NCCL_ALGO work: the cost model's speed and what it says, and the A/B launch cost on this machine.

    python benchmarks/nccl_algo.py [--runs 3] [--no-ab]

1. Cost model (pure Python): time to build the model and predict what the recommender asks for (3 node
   counts × 2 job sizes), and a full sweep; then, as a figure of the model itself, the size from which
   NCCL's model prefers Ring over Tree on an H100-like fabric, per node count ("prediction").
2. A/B plumbing (gloo test mode, 2 ranks here): the wall time of `ddpdoctor check --select ALG001
   --option algo_backend=gloo` and the cost of one launch (child processes start, form a group, time
   two sizes), against ALG001's budget for the default NCCL plan (4 arms × 2 repetitions). NCCL itself
   cannot run here: GPU start-up and communicator creation will add to each launch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import describe, machine, time_command
from ddpdoctor.checks import alg001_nccl_algo as alg

from ddpdoctor.model.tuning.nccl_cost import PREDICTION_LABEL, CostModel, Fabric

MiB = 1 << 20
H100 = {"gpus_per_node": 8, "sm": 90, "intra_GBps": 370.8, "inter_GBps": 400.0}


def bench_model(runs: int) -> None:
    def recommender_work() -> None:
        for nn in (2, 4, 8):
            m = CostModel(Fabric(nnodes=nn, **H100))
            for s in (1 * MiB, 25 * MiB):
                m.pick(s)
                m.best_per_algo(s)

    def sweep() -> int:
        n = 0
        for nn in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
            m = CostModel(Fabric(nnodes=nn, nvls=nn == 1, **H100))
            for k in range(6, 32):
                m.pick(1 << k)
                n += 1
        return n

    for name, fn, reps in (("recommender's predictions (3 node counts × 2 sizes)", recommender_work, 200),
                           ("sweep (11 node counts × 26 sizes)", sweep, 5)):  # fmt: skip
        samples = []
        for _ in range(max(runs, 3)):
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            samples.append((time.perf_counter() - t0) / reps)
        print(f"cost model, {name}: median {statistics.median(samples) * 1e3:.3f} ms per call "
              f"(min {min(samples) * 1e3:.3f} ms, {len(samples)} × {reps} calls)")  # fmt: skip

    print(f"{PREDICTION_LABEL}: smallest power-of-two size from which NCCL's model picks Ring over Tree, "
          f"H100-like fabric (8 GPUs/node, 370.8 GB/s NVLink, 400 GB/s network per node):")  # fmt: skip
    for nn in (2, 4, 8, 16, 32, 64):
        m = CostModel(Fabric(nnodes=nn, **H100))
        cross = next((1 << k for k in range(6, 36) if m.pick(1 << k).algo == "Ring"), None)
        small = m.pick(64 * 1024)
        print(f"  {nn:>3} nodes: 64 KiB -> {small.algo}/{small.proto}; Ring from "
              f"{f'{cross / MiB:g} MiB' if cross else 'never (<= 32 GiB)'}")  # fmt: skip


def bench_ab(runs: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        rj = Path(d) / "r.json"
        argv = [sys.executable, "-m", "ddpdoctor", "check", "--select", "ALG001", "-q", "--json", str(rj),
                "--option", "algo_backend=gloo", "--option", "algo_sizes=65536,1048576"]  # fmt: skip
        samples = time_command(argv, runs, timeout=600)
        rep = json.loads(rj.read_text())
    c = next(c for c in rep["checks"] if c["code"] == "ALG001")
    launches = len(c["data"]["order"])
    per_launch = c["duration_s"] / launches
    print(f"A/B plumbing, gloo test mode, {rep['run']['world_size']} ranks: `ddpdoctor check --select ALG001` "
          f"{describe(samples)}")  # fmt: skip
    print(f"  last run: ALG001 {c['duration_s']:.1f} s for {launches} launches = {per_launch:.1f} s per launch "
          f"(status {c['status']}; {c['summary']})")  # fmt: skip
    need = 4 * 2 * per_launch
    print(f"  default NCCL plan (default, Ring, Tree, NVLS × 2 repetitions) at this launch cost: {need:.0f} s "
          f"of ALG001's {alg.BUDGET_S:.0f} s budget (GPU start-up and NCCL init not included)")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--no-ab", action="store_true", help="skip the (slow) A/B plumbing run")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    bench_model(args.runs)
    if not args.no_ab:
        bench_ab(args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
