"""Bug: every rank sends a large tensor to the next before receiving from the previous: a cycle."""
import torch
import torch.distributed as dist


def exchange(rank, world, t):
    dist.send(t, (rank + 1) % world)  # blocks: 64 MiB does not fit the socket buffers
    dist.recv(t, (rank - 1) % world)


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.all_reduce(torch.ones(4))
    exchange(rank, world, torch.ones(16 * 1024 * 1024))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
