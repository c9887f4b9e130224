"""Measure gloo on this machine, to set the numbers of profiles/cpu-gloo.yaml.

What it measures, as BW001 and P2P001 do (nccl-tests conventions, GB/s = 1e9 B/s):
- p2p: rank 0 sends S bytes to rank 1 (send/recv, unidirectional), S / t;
- all_reduce busbw: S / t × 2(n−1)/n, for n = 2 and 4 ranks;
each on one node (loopback) and, where network namespaces are allowed (root), across emulated nodes (a
NetBed: veth pairs through a bridge, no shaping). Every figure is the median over ``--iters`` timed
calls after 2 warm-up calls, in each of ``--repeats`` fresh process groups; the script prints the
median and the range over the repeats.

    python benchmarks/gloo_baseline.py                    # 16 MiB and 64 MiB, 3 repeats
    python benchmarks/gloo_baseline.py --sizes-mib 64 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

STEP_TIMEOUT_S = 120  # one process group's whole measurement


def _worker(args: argparse.Namespace) -> None:
    """One rank: measure, and rank 0 writes the figures as JSON to ``args.out``."""
    import time
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from ddpdoctor.model.bandwidth.busbw import busbw_GBps

    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank, n = dist.get_rank(), dist.get_world_size()
    out: dict[str, dict[int, float]] = {"p2p": {}, "all_reduce": {}}
    for mib in args.sizes_mib:
        size = mib * 2**20
        t = torch.ones(size // 4, dtype=torch.float32)
        times = []
        for i in range(args.iters + 2):
            dist.barrier()
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(t, 1)
            elif rank == 1:
                dist.recv(t, 0)
            if i >= 2 and rank in (0, 1):
                times.append(time.perf_counter() - t0)
        if rank == 1:
            dist.send(torch.tensor([statistics.median(times)], dtype=torch.float64), 0)
        if rank == 0:
            recv_t = torch.zeros(1, dtype=torch.float64)
            dist.recv(recv_t, 1)
            out["p2p"][size] = size / float(recv_t.item()) / 1e9  # the receiver saw the data arrive
        times = []
        for i in range(args.iters + 2):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            if i >= 2:
                times.append(time.perf_counter() - t0)
        slowest = torch.tensor([statistics.median(times)], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # the slowest rank's median, as BW001 reports it
        out["all_reduce"][size] = busbw_GBps("all_reduce", n, size, float(slowest.item()))
    if rank == 0:
        Path(args.out).write_text(json.dumps(out))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_argv(args, out: str) -> list[str]:
    sizes = [str(m) for m in args.sizes_mib]
    return [
        sys.executable,
        __file__,
        "--worker",
        "--out",
        out,
        "--iters",
        str(args.iters),
        "--sizes-mib",
        *sizes,
    ]


def _wait(procs: list[subprocess.Popen]) -> None:
    try:
        for p in procs:
            if p.wait(timeout=STEP_TIMEOUT_S) != 0:
                raise SystemExit(
                    f"a rank exited {p.returncode}: {p.stderr.read()[-800:] if p.stderr else ''}"
                )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def _env(master: str, port: int, rank: int, world: int) -> dict:
    return {
        **os.environ,
        "MASTER_ADDR": master,
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "OMP_NUM_THREADS": "1",
    }


def run_loopback(args, world: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out, port = f"{d}/r.json", _free_port()
        procs = [
            subprocess.Popen(
                _worker_argv(args, out),
                env=_env("127.0.0.1", port, r, world),
                stderr=subprocess.PIPE,
                text=True,
            )
            for r in range(world)
        ]
        _wait(procs)
        return json.loads(Path(out).read_text())


def run_netbed(args, nodes: int, per_node: int) -> dict:
    """Ranks 0..per_node-1 on node 0, and so on: p2p rank 0 -> 1 crosses nodes only when per_node == 1."""
    from support.testbed import NetBed

    world = nodes * per_node
    with tempfile.TemporaryDirectory() as d, NetBed(nodes) as bed:
        out, port = f"{d}/r.json", 29400 + os.getpid() % 500
        procs = []
        for r in range(world):
            node = r // per_node
            env = _env(bed.addr(0), port, r, world)
            procs.append(bed.popen(node, _worker_argv(args, out), env=env, stderr=subprocess.PIPE, text=True))
        _wait(procs)
        return json.loads(Path(out).read_text())


def _summary(runs: list[dict], kind: str) -> str:
    parts = []
    for size in sorted({int(s) for r in runs for s in r[kind]}):
        vals = [r[kind][str(size)] if str(size) in r[kind] else r[kind][size] for r in runs]
        parts.append(
            f"{size // 2**20} MiB: median {statistics.median(vals):.3f} GB/s "
            f"(min {min(vals):.3f}, max {max(vals):.3f})"
        )
    return "; ".join(parts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--sizes-mib", type=int, nargs="+", default=[16, 64])
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    if args.worker:
        _worker(args)
        return
    print(f"machine: {machine()}")
    print(
        f"gloo over TCP, sizes {args.sizes_mib} MiB, median of {args.iters} calls, "
        f"{args.repeats} fresh group(s)"
    )
    cases = [
        ("1 node, 2 ranks (loopback)", lambda: run_loopback(args, 2)),
        ("1 node, 4 ranks (loopback)", lambda: run_loopback(args, 4)),
    ]
    from support.testbed import netns_available

    ok, why = netns_available()
    if ok:
        cases += [
            ("2 nodes x 1 rank (netns veth)", lambda: run_netbed(args, 2, 1)),
            ("2 nodes x 2 ranks (netns veth)", lambda: run_netbed(args, 2, 2)),
        ]
    else:
        print(f"emulated nodes skipped: {why}")
    for name, fn in cases:
        runs = [fn() for _ in range(args.repeats)]
        print(
            f"{name}\n  p2p r0->r1:       {_summary(runs, 'p2p')}\n"
            f"  all_reduce busbw: {_summary(runs, 'all_reduce')}"
        )


if __name__ == "__main__":
    main()
