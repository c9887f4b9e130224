"""Healthy: rank 0 writes a long checkpoint (CKPT_S seconds) and every rank then meets in a barrier."""
import os
import time

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    grad = torch.ones(64)
    dist.all_reduce(grad)
    if rank == 0:
        time.sleep(float(os.environ.get("CKPT_S", "8")))
    dist.barrier()
    dist.all_reduce(grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
