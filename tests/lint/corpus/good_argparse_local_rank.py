"""Older-style script: --local_rank from argparse with an env fallback, is_main helper from the
same file, metrics gathered with all_gather_object on every rank, rank-0-only tqdm and wandb."""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def get_args():
    p = argparse.ArgumentParser()
    p.add_argument("--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    p.add_argument("--epochs", type=int, default=3)
    return p.parse_args()


def is_main():
    return not dist.is_initialized() or dist.get_rank() == 0


def gather_metrics(metrics):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, metrics)
    return out


def main():
    args = get_args()
    torch.cuda.set_device(args.local_rank)
    dist.init_process_group(backend="nccl", init_method="env://")
    model = DDP(build().cuda(), device_ids=[args.local_rank], output_device=args.local_rank)
    train_set, val_set = datasets()
    sampler = DistributedSampler(train_set)
    loader = DataLoader(train_set, batch_size=16, sampler=sampler)
    val_loader = DataLoader(val_set, batch_size=16, sampler=DistributedSampler(val_set, shuffle=False))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        it = loader
        if is_main():
            import tqdm

            it = tqdm.tqdm(loader)
        for x, y in it:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            acc = sum((model(x.cuda()).argmax(1) == y.cuda()).float().mean().item() for x, y in val_loader)
        all_acc = gather_metrics({"acc": acc})
        if is_main():
            print(epoch, all_acc)
            torch.save(model.module.state_dict(), f"epoch{epoch}.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
