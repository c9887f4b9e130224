"""Healthy: rank 1 computes LAG_S seconds longer than the others in every step; every all_reduce
completes, the others just wait for it each time."""
import os
import time

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    lag = float(os.environ.get("LAG_S", "4"))
    grad = torch.ones(64)
    for _ in range(int(os.environ.get("STEPS", "3"))):
        if rank == 1:
            time.sleep(lag)
        dist.all_reduce(grad)
    dist.destroy_process_group()
    raise SystemExit(int(os.environ.get("EXIT_CODE", "0")))


if __name__ == "__main__":
    main()
