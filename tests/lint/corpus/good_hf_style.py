"""HF-style script: argparse --local_rank backed by LOCAL_RANK, is_main_process helpers."""
import argparse
import contextlib
import logging
import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, RandomSampler
from torch.utils.data.distributed import DistributedSampler

logger = logging.getLogger(__name__)


def is_main_process(args):
    return args.local_rank in [-1, 0]


def barrier_if_distributed(args):
    if args.local_rank != -1:
        torch.distributed.barrier()


def train(args, model, train_dataset, tokenizer):
    train_sampler = RandomSampler(train_dataset) if args.local_rank == -1 else DistributedSampler(train_dataset)
    train_dataloader = DataLoader(train_dataset, sampler=train_sampler, batch_size=args.train_batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    if args.n_gpu > 1:
        model = torch.nn.DataParallel(model)  # noqa: DDP405 - the one-process fallback, kept on purpose (n_gpu is 1 under DDP)
    if args.local_rank != -1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[args.local_rank], output_device=args.local_rank
        )
    global_step = 0
    for epoch in range(int(args.num_train_epochs)):
        if args.local_rank != -1:
            train_sampler.set_epoch(epoch)
        for step, batch in enumerate(train_dataloader):
            model.train()
            # the forward goes inside no_sync too: DDP arms the all-reduce during the forward
            accumulating = (step + 1) % args.gradient_accumulation_steps != 0 and args.local_rank != -1
            with model.no_sync() if accumulating else contextlib.nullcontext():
                outputs = model(**batch)
                loss = outputs[0]
                if args.gradient_accumulation_steps > 1:
                    loss = loss / args.gradient_accumulation_steps
                loss.backward()
            if accumulating:
                continue
            optimizer.step()
            model.zero_grad()
            global_step += 1
            # the global rank: one writer per job even on several nodes
            if (args.local_rank == -1 or dist.get_rank() == 0) and global_step % args.save_steps == 0:
                output_dir = os.path.join(args.output_dir, f"checkpoint-{global_step}")
                model_to_save = model.module if hasattr(model, "module") else model
                model_to_save.save_pretrained(output_dir)
                torch.save(args, os.path.join(output_dir, "training_args.bin"))
                logger.info("Saving model checkpoint to %s", output_dir)
    return global_step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", -1)))
    parser.add_argument("--output_dir", type=str, required=True)
    args = parser.parse_args()
    if args.local_rank == -1:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        args.n_gpu = torch.cuda.device_count()
    else:
        torch.cuda.set_device(args.local_rank)
        device = torch.device("cuda", args.local_rank)
        torch.distributed.init_process_group(backend="nccl")
        args.n_gpu = 1
    args.device = device
    if not is_main_process(args):
        barrier_if_distributed(args)  # let rank 0 download the model first
    model, tokenizer, train_dataset = load_everything(args)
    if is_main_process(args):
        barrier_if_distributed(args)
    model.to(args.device)
    train(args, model, train_dataset, tokenizer)
    if args.local_rank != -1:
        dist.destroy_process_group()


def load_everything(args):
    raise NotImplementedError


if __name__ == "__main__":
    main()
