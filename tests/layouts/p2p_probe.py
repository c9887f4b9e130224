"""A bare point-to-point measurement for the layout tests, run as one rank of a gloo world:

    python p2p_probe.py RANK WORLD NODE_RANK LOCAL_RANK HOST:PORT OUT.json SIZE_B

Not P2P001 (which owns the real check): ordered pairs one at a time, the receiver's best of two
timings, rank 0 writes {"values": [[GB/s, row = sender]], "ranks": [...]} to OUT.json.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    rank, world, node_rank, local_rank = (int(a) for a in sys.argv[1:5])
    endpoint, out, size = sys.argv[5], sys.argv[6], int(sys.argv[7])
    dist.init_process_group(
        "gloo", init_method=f"tcp://{endpoint}", rank=rank, world_size=world, timeout=timedelta(seconds=30)
    )
    buf = torch.ones(size // 4, dtype=torch.float32)
    received: list[float | None] = [None] * world  # GB/s from each sender
    for src in range(world):
        for dst in range(world):
            if src == dst:
                continue
            for _ in range(2):
                dist.barrier()
                if rank == src:
                    dist.send(buf, dst)
                elif rank == dst:
                    t = time.perf_counter()
                    dist.recv(buf, src)
                    gbps = size / (time.perf_counter() - t) / 1e9
                    received[src] = max(received[src] or 0.0, gbps)
    me = {"rank": rank, "node_rank": node_rank, "local_rank": local_rank, "hostname": socket.gethostname()}
    rows: list = [None] * world
    infos: list = [None] * world
    dist.all_gather_object(rows, received)
    dist.all_gather_object(infos, me)
    if rank == 0:
        values = [[rows[dst][src] for dst in range(world)] for src in range(world)]
        with open(out, "w") as f:
            json.dump({"values": values, "ranks": infos}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
