"""Bug: a shuffling DistributedSampler without set_epoch: every epoch has epoch 0's order."""
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("gloo")
    data = TensorDataset(torch.arange(64, dtype=torch.float32))
    sampler = DistributedSampler(data, shuffle=True)
    train_loader = DataLoader(data, batch_size=8, sampler=sampler)
    total = torch.zeros(1)
    for epoch in range(3):
        for (batch,) in train_loader:
            total += batch.sum()
        dist.all_reduce(total)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
