# A training script with DDP bugs, for the lint view's source context (never run).
# fmt: off
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


def main(dataset, model, epochs=3):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(model,
                find_unused_parameters=True)
    train_sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, sampler=train_sampler, batch_size=32)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    for epoch in range(epochs):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if rank == 0:
                dist.all_reduce(loss.detach())
                print(epoch, loss.item())
