"""Rank 1 raises right after init_process_group, before any collective; rank 0 waits in a barrier."""
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise RuntimeError("config file missing")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
