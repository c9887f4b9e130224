"""Bug: ranks all_gather tensors of different lengths (each rank's own number of samples)."""
import torch
import torch.distributed as dist


def gather_counts(rank, world):
    mine = torch.ones(100 + rank)  # the length differs per rank
    out = [torch.empty(100) for _ in range(world)]
    dist.all_gather(out, mine)
    return out


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.ones(8)
    dist.all_reduce(x)
    gather_counts(rank, world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
