"""Plain DDP loop launched with torchrun (env vars)."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def setup():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl")
    return local_rank


def evaluate(model, loader, device):
    model.eval()
    correct = torch.zeros(1, device=device)
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x.to(device)).argmax(1) == y.to(device)).sum()
    dist.all_reduce(correct)
    return correct.item()


def main():
    local_rank = setup()
    rank = dist.get_rank()
    device = torch.device("cuda", local_rank)
    ds = TensorDataset(torch.randn(1024, 10), torch.randint(0, 2, (1024,)))
    sampler = DistributedSampler(ds, shuffle=True)
    loader = DataLoader(ds, batch_size=32, sampler=sampler, num_workers=2)
    val_sampler = DistributedSampler(ds, shuffle=False)
    val_loader = DataLoader(ds, batch_size=64, sampler=val_sampler)
    model = DDP(nn.Linear(10, 2).to(device), device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if os.path.exists("ckpt.pt"):
        state = torch.load("ckpt.pt", map_location=device)
        model.module.load_state_dict(state)
    for epoch in range(10):
        sampler.set_epoch(epoch)
        model.train()
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
        acc = evaluate(model, val_loader, device)
        if rank == 0:
            print(f"epoch {epoch} acc {acc}")
            torch.save(model.module.state_dict(), "ckpt.pt")
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
