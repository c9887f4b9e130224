"""Bug: rank 0 broadcasts its weights while the other ranks average theirs: different collectives."""
import torch
import torch.distributed as dist


def sync(weights, rank):
    if rank == 0:
        dist.broadcast(weights, 0)
    else:
        dist.all_reduce(weights)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    w = torch.ones(16)
    for _ in range(2):
        dist.all_reduce(w)
    sync(w, rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
