"""Bug: each rank posts irecv from the other and waits on it before sending: a cycle of waits."""
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.all_reduce(torch.ones(1))
    buf = torch.zeros(4)
    req = dist.irecv(buf, (rank - 1) % world)
    req.wait()
    dist.send(torch.ones(4), (rank + 1) % world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
