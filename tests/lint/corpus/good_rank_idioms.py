"""Rank idioms that must stay quiet: HF barrier dance, per-rank printing in turn, object broadcast, gather."""
import torch
import torch.distributed as dist


def main(args):
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    torch.cuda.set_device(args.local_rank)
    if args.local_rank not in [-1, 0]:
        torch.distributed.barrier()
    model = load_pretrained()
    if args.local_rank == 0:
        torch.distributed.barrier()
    for i in range(world_size):
        if rank == i:
            print("hello from", rank)
        dist.barrier()
    obj = [cfg] if rank == 0 else [None]
    dist.broadcast_object_list(obj, src=0)
    t = torch.ones(1)
    gather_list = [torch.zeros(1) for _ in range(world_size)] if rank == 0 else None
    dist.gather(t, gather_list=gather_list, dst=0)
    if rank == 0:
        objs = [None] * world_size
        dist.gather_object(rank, objs, dst=0)
    else:
        dist.gather_object(rank, None, dst=0)
    log("done")
    dist.destroy_process_group()


def log(msg):
    if dist.get_rank() != 0:
        return
    print(msg)


if __name__ == "__main__":
    main(parse())
