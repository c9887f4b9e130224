"""Bug: rank 1 has fewer batches; its loop ends early and its final barrier meets the others' all_reduce."""
import torch
import torch.distributed as dist


def train(batches):
    grad = torch.ones(256)
    for _ in range(batches):
        dist.all_reduce(grad)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    train(3 if rank == 1 else 5)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
