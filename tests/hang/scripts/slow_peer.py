"""Rank 1 sleeps in Python for a minute before a collective that rank 0 already waits in
(the test stops rank 0 with SIGTERM meanwhile, as torchrun or a scheduler would)."""
import time

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    x = torch.ones(4)
    dist.all_reduce(x)
    if dist.get_rank() == 1:
        time.sleep(60)
    print(f"rank {dist.get_rank()} enters all_reduce #2", flush=True)
    dist.all_reduce(x)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
