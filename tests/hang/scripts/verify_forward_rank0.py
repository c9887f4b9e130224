"""Bug: rank 0 alone runs an extra forward of the DDP model (an evaluation under rank == 0)."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(8, 2))
    for step in range(3):
        model(torch.randn(4, 8)).sum().backward()
        if dist.get_rank() == 0 and step == 1:
            with torch.no_grad():
                model(torch.randn(2, 8))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
