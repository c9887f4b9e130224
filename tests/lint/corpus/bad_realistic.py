"""A plausible script with the bugs people hit; each expected finding is marked."""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


def validate(model, loader):
    correct = torch.zeros(1).cuda()
    for x, y in loader:
        correct += (model(x.cuda()).argmax(1) == y.cuda()).sum()
    dist.all_reduce(correct)
    return correct.item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)  # expect: DDP401
    args = parser.parse_args()
    os.environ["MASTER_PORT"] = "29501"  # expect: DDP406
    dist.init_process_group("nccl")  # expect: DDP404
    rank = dist.get_rank()
    model = DDP(build().to(rank), device_ids=[rank], find_unused_parameters=True)  # expect: DDP402, DDP602
    ds = dataset()
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, batch_size=32, sampler=sampler)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if os.path.exists("last.pt"):
        model.load_state_dict(torch.load("last.pt"))  # expect: DDP503
    for epoch in range(10):  # expect: DDP101
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
            loss.backward()
            opt.step()
            opt.zero_grad()
        if rank == 0:
            acc = validate(model, loader)  # expect: DDP301
            print(epoch, acc)
        # the wrapper's keys: fine here, since the resume above loads them back into the wrapper
        torch.save(model.state_dict(), "last.pt")  # expect: DDP501
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
