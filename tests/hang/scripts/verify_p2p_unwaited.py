"""Bug: rank 0 sends with isend and never waits on the request (rank 1 receives and waits)."""
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.all_reduce(torch.ones(1))
    if rank == 0:
        dist.isend(torch.ones(4), 1)
    else:
        dist.irecv(torch.zeros(4), 0).wait()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
