"""Divergent collectives and a p2p deadlock reached through calls, methods and helpers."""
import torch
import torch.distributed as dist
from utils import is_main_process


def exchange(t):
    rank = dist.get_rank()
    other = 1 - rank
    buf = torch.empty_like(t)
    dist.recv(buf, src=other)  # expect: DDP201
    dist.send(t, dst=other)


def finish(model):
    if dist.get_rank() != 0:
        return
    print("saving")
    dist.barrier()  # expect: DDP301


class Runner:
    def __init__(self):
        self.local_rank = int(__import__("os").environ["LOCAL_RANK"])

    def sync(self, t):
        dist.all_reduce(t)

    def step(self, t):
        if self.local_rank == 0:
            self.sync(t)  # expect: DDP301


def report(t):
    if is_main_process():
        dist.all_reduce(t)  # expect: DDP301


def main():
    dist.init_process_group("gloo")
    exchange(torch.ones(1))
    finish(None)
    Runner().step(torch.ones(1))
    report(torch.ones(1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
