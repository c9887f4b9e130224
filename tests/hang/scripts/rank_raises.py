"""Rank 1 raises a Python exception in its third step; the others wait in all_reduce #3."""
import torch
import torch.distributed as dist


def step(rank, i, grad):
    if rank == 1 and i == 2:
        raise ValueError("bad batch in step 2")
    dist.all_reduce(grad)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    grad = torch.ones(64)
    for i in range(5):
        step(rank, i, grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
