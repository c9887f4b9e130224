"""Bug: a checkpoint barrier reached by rank 0 only, through a chain of calls (DDP301)."""
import torch
import torch.distributed as dist


def save_checkpoint(step):
    dist.barrier()  # only rank 0 gets here


def maybe_save(rank, step):
    if rank == 0 and step == 2:
        save_checkpoint(step)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    grad = torch.ones(1000)
    for step in range(5):
        dist.all_reduce(grad)
        maybe_save(rank, step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
