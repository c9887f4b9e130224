"""Bug: rank 1 leaves the training loop with sys.exit(0) after 2 steps; the others wait in all_reduce #3."""
import sys

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    grad = torch.ones(64)
    for step in range(5):
        if rank == 1 and step == 2:
            sys.exit(0)
        dist.all_reduce(grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
