"""Healthy: a small DDP model trained a few steps with a metric all_reduce; exits with code 3."""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        dist.all_reduce(loss.detach())
    req = dist.isend(torch.ones(2), 1) if dist.get_rank() == 0 else dist.irecv(torch.zeros(2), 0)
    req.wait()
    dist.destroy_process_group()
    sys.exit(3)


if __name__ == "__main__":
    main()
