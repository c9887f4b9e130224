"""Healthy: every rank computes for COMPUTE_S seconds (longer than --hang-after) between collectives."""
import os
import time

import torch
import torch.distributed as dist


def compute(seconds):
    a = torch.rand(64, 64)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        a = (a @ a).clamp_(-1, 1)
        time.sleep(0.01)
    return a


def main():
    dist.init_process_group("gloo")
    seconds = float(os.environ.get("COMPUTE_S", "5"))
    for _ in range(int(os.environ.get("STEPS", "2"))):
        x = compute(seconds).sum().reshape(1)
        dist.all_reduce(x)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
