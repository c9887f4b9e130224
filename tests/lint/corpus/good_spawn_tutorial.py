"""mp.spawn style, as the PyTorch DDP tutorial, with p2p warm-up and rank-0 logging."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "12355")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()


def ping(rank, world_size):
    t = torch.zeros(1)
    if rank == 0:
        for peer in range(1, world_size):
            dist.send(t + peer, dst=peer)
    else:
        dist.recv(t, src=0)
    return t


def exchange(rank, world_size):
    send_buf = torch.ones(1) * rank
    recv_buf = torch.zeros(1)
    right = (rank + 1) % world_size
    left = (rank - 1) % world_size
    if rank % 2 == 0:
        dist.send(send_buf, dst=right)
        dist.recv(recv_buf, src=left)
    else:
        dist.recv(recv_buf, src=left)
        dist.send(send_buf, dst=right)
    return recv_buf


def demo_basic(rank, world_size):
    setup(rank, world_size)
    ping(rank, world_size)
    model = nn.Linear(10, 5)
    ddp_model = DDP(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    for step in range(5):
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(20, 10))
        loss_fn(outputs, torch.randn(20, 5)).backward()
        optimizer.step()
        if rank == 0:
            print("step", step)
    CHECKPOINT_PATH = "/tmp/model.checkpoint"
    if rank == 0:
        torch.save(ddp_model.module.state_dict(), CHECKPOINT_PATH)
    dist.barrier()
    map_location = {"cuda:%d" % 0: "cuda:%d" % rank}
    ddp_model.module.load_state_dict(torch.load(CHECKPOINT_PATH, map_location=map_location))
    cleanup()


if __name__ == "__main__":
    world_size = 4
    mp.spawn(demo_basic, args=(world_size,), nprocs=world_size, join=True)
