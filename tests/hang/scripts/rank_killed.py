"""A rank is killed (SIGKILL, as by the OOM killer) in the middle of training."""
import os
import signal
import time

import torch
import torch.distributed as dist


def step(rank, i, grad):
    if rank == 1 and i == 3:
        time.sleep(1)  # the others are waiting in all_reduce #4 by now
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(grad)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    grad = torch.ones(64)
    for i in range(6):
        time.sleep(0.2)
        step(rank, i, grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
