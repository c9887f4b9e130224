"""Jobs for benchmarks/hang_*.py (one rank each, under torchrun on gloo).

``python _hang_jobs.py hang MARK``: a few healthy steps, then rank 0 writes the wall time to MARK and
enters a barrier no other rank reaches (the hang starts there).
``python _hang_jobs.py CASE MARK`` for CASE in mismatch (rank 0 in a barrier, the others in all_reduce),
ring (every rank sends to the next, 64 MiB: a p2p cycle), newgroup (rank 0 alone in new_group, the
others in all_reduce): the certain deadlocks of benchmarks/hang_certain_time.py; rank 0 writes the
wall time to MARK just before the deadlock starts.
``python _hang_jobs.py train OUT STEPS``: a small DDP model trained for STEPS steps after a warm-up;
rank 0 writes the steps per second of the timed part to OUT.
"""

import json
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch import nn


def hang(mark: str) -> None:
    dist.init_process_group("gloo")
    x = torch.ones(1000)
    for _ in range(3):
        dist.all_reduce(x)
    if dist.get_rank() == 0:
        with open(mark, "w") as f:
            f.write(str(time.time()))
        dist.barrier()
    dist.all_reduce(x)


def certain(case: str, mark: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.ones(1000)
    for _ in range(3):
        dist.all_reduce(x)
    dist.barrier()
    if rank == 0:
        with open(mark, "w") as f:
            f.write(str(time.time()))
    if case == "mismatch":
        dist.barrier() if rank == 0 else dist.all_reduce(x)
    elif case == "ring":
        dist.send(torch.ones(16 * 1024 * 1024), (rank + 1) % world)
    elif case == "newgroup":
        dist.new_group(list(range(world))) if rank == 0 else dist.all_reduce(x)
    dist.all_reduce(x)


def allreduce(out: str, steps: int) -> None:
    """A loop of all_reduce(65536 floats) + a little compute, no DDP: what `watch --verify` costs per
    collective (torch 2.13's TORCH_DISTRIBUTED_DEBUG=DETAIL crashes DDP's constructor on CPU, see README)."""
    dist.init_process_group("gloo")
    x = torch.randn(256, 256)
    for _ in range(20):
        dist.all_reduce(x)
    dist.barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        y = x @ x
        dist.all_reduce(y)
    dist.barrier()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"steps": steps, "seconds": elapsed, "steps_per_s": steps / elapsed,
                       "cpu_ms_per_step": 1000 * cpu / steps, "helper_cpu_s": helper_cpu_s(),
                       "process_cpu_s": time.process_time()}, f)
    dist.destroy_process_group()


def helper_cpu_s() -> float | None:
    """CPU seconds the watch helper's thread has used in this process (None: not running under watch)."""
    t = next((t for t in threading.enumerate() if t.name == "ddpdoctor-watch"), None)
    if t is None:
        return None
    with open(f"/proc/self/task/{t.native_id}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9  # ns on a CPU


def train(out: str, steps: int) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(64, 256)

    def step():
        opt.zero_grad()
        model(data).pow(2).mean().backward()
        opt.step()

    for _ in range(20):  # warm-up (DDP rebuilds its buckets after the first step)
        step()
    dist.barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    dist.barrier()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    # CPU time of the whole process (every thread: ours, gloo's, the helper's) per step: what the
    # helper adds shows here even when other users' load makes wall time noisy
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"steps": steps, "seconds": elapsed, "steps_per_s": steps / elapsed,
                       "cpu_ms_per_step": 1000 * cpu / steps, "helper_cpu_s": helper_cpu_s(),
                       "process_cpu_s": time.process_time()}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "hang":
        hang(sys.argv[2])
    elif sys.argv[1] in ("mismatch", "ring", "newgroup"):
        certain(sys.argv[1], sys.argv[2])
    elif sys.argv[1] == "allreduce":
        allreduce(sys.argv[2], int(sys.argv[3]))
    else:
        train(sys.argv[2], int(sys.argv[3]))
