"""Bug under srun: a checkpoint barrier reached by task 0 only (DDP301); the process group is set up
from Slurm's variables, as a script started by `srun python train.py` does. With HEALTHY_PAUSE_S set,
no barrier: every task pauses that long instead, and the job finishes."""

import os
import subprocess
import time

import torch
import torch.distributed as dist


def init_from_slurm():
    first = subprocess.run(
        ["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[0]
    os.environ.setdefault("MASTER_ADDR", first)
    os.environ.setdefault("MASTER_PORT", str(20000 + int(os.environ["SLURM_JOB_ID"]) % 20000))
    dist.init_process_group(
        "gloo", rank=int(os.environ["SLURM_PROCID"]), world_size=int(os.environ["SLURM_NTASKS"])
    )


def save_checkpoint(step):
    dist.barrier()  # only task 0 gets here


def main():
    init_from_slurm()
    rank = dist.get_rank()
    grad = torch.ones(1000)
    for step in range(int(os.environ.get("STEPS", "5"))):
        dist.all_reduce(grad)
        if rank == 0 and step == 2 and not os.environ.get("HEALTHY_PAUSE_S"):
            save_checkpoint(step)
        if step == 2:  # healthy: every task pauses (longer than --hang-after) outside any collective
            time.sleep(float(os.environ.get("HEALTHY_PAUSE_S", "0")))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
