"""A Trainer class in the style of many research repos: self.rank, self.model, early return on
non-zero ranks for saving, evaluation with the unwrapped module, accumulation with no_sync."""
import contextlib
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, model, dataset, cfg):
        self.cfg = cfg
        self.rank = int(os.environ["RANK"])
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        self.device = torch.device(f"cuda:{self.local_rank}")
        self.model = DistributedDataParallel(model.to(self.device), device_ids=[self.local_rank])
        self.sampler = DistributedSampler(dataset, num_replicas=self.world_size, rank=self.rank)
        self.loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=self.sampler, pin_memory=True)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr)

    def log(self, msg):
        if self.rank != 0:
            return
        print(time.strftime("%H:%M:%S"), msg, flush=True)

    def save(self, epoch):
        if self.rank != 0:
            return
        torch.save({"model": self.model.module.state_dict(), "epoch": epoch}, self.cfg.ckpt)

    def reduce_mean(self, value):
        t = torch.tensor([value], device=self.device)
        dist.all_reduce(t)
        return t.item() / self.world_size

    def train_epoch(self, epoch):
        self.sampler.set_epoch(epoch)
        self.model.train()
        total = 0.0
        for step, (x, y) in enumerate(self.loader):
            last = (step + 1) % self.cfg.accum == 0
            ctx = contextlib.nullcontext() if last else self.model.no_sync()
            with ctx:
                loss = torch.nn.functional.mse_loss(self.model(x.to(self.device)), y.to(self.device))
                (loss / self.cfg.accum).backward()
            if last:
                self.opt.step()
                self.opt.zero_grad(set_to_none=True)
            total += loss.item()
        return self.reduce_mean(total)

    def fit(self):
        for epoch in range(self.cfg.epochs):
            loss = self.train_epoch(epoch)
            self.log(f"epoch {epoch} loss {loss:.4f}")
            self.save(epoch)
            dist.barrier()


def main(cfg):
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    try:
        Trainer(build_model(cfg), build_dataset(cfg), cfg).fit()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(parse_config())
