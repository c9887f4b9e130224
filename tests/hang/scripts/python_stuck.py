"""Bug: rank 1 spins in a Python loop (waiting for a file that never comes) before a collective."""
import os

import torch
import torch.distributed as dist


def wait_for_data(rank):
    n = 0
    while rank == 1 and not os.path.exists("/nonexistent/ddpdoctor-ready"):
        n += 1  # busy: holds the GIL between checks


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = torch.ones(8)
    dist.all_reduce(x)
    wait_for_data(rank)
    dist.all_reduce(x)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
