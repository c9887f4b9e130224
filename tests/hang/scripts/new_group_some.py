"""Bug: rank 0 builds a new group (which every rank must call) while the others go on to all_reduce."""
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    grad = torch.ones(64)
    dist.all_reduce(grad)
    if rank == 0:
        dist.new_group([0, 1])
    dist.all_reduce(grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
