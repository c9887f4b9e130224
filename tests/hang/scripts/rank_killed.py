"""A rank is killed (SIGKILL, as by the OOM killer) in the middle of training."""
import os
import signal
import time

import torch
import torch.distributed as dist


def step(rank, i, grad, store):
    if i == 3:
        arrive(rank, store)
    # the others wait here in all_reduce #4 when rank 1 dies
    dist.all_reduce(grad)


def arrive(rank, store):
    """Rank 1 dies once every other rank is about to wait in all_reduce #4: ordered through the store,
    not by a sleep that a loaded machine can outlast (the others would wait --hang-after first)."""
    if rank != 1:
        store.set(f"at4/{rank}", "1")
        return
    store.wait([f"at4/{r}" for r in range(dist.get_world_size()) if r != 1])
    time.sleep(0.5)  # they are blocked in it by now (one that enters it later fails the same way)
    os.kill(os.getpid(), signal.SIGKILL)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    store = dist.distributed_c10d._get_default_store()
    grad = torch.ones(64)
    for i in range(6):
        time.sleep(0.2)
        step(rank, i, grad, store)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
