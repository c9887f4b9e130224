"""Small collectives that keep every rank's decisions identical (helpers for BW001 and P2P001).

A check that adapts to what it measures (stop the sweep, confirm a suspect link) must take the same
branch on every rank, or the next collective pairs up wrongly and hangs. Deciding from values that
every rank received through a collective guarantees that.
"""

from __future__ import annotations


def agree_max(ctx, *values: float) -> list[float]:
    """The maximum of each value over all ranks, on every rank."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    with ctx.op("all_reduce(MAX) to agree on the plan"):
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(v) for v in t.tolist()]


def share_rows(ctx, row: list[float | None]) -> list[list[float | None]]:
    """Every rank contributes its row of an n×n matrix (None: no value); every rank gets the matrix."""
    import torch
    import torch.distributed as dist

    n = ctx.world_size
    m = torch.zeros((n, n), dtype=torch.float64, device=ctx.device)
    # Stored as value + 1 so that 0 means "no value" after the sum.
    m[ctx.rank] = torch.tensor([(-1.0 if v is None else float(v)) + 1.0 for v in row], dtype=torch.float64)
    with ctx.op(f"all_reduce of the {n}x{n} matrix"):
        dist.all_reduce(m)
    return [[None if v == 0.0 else v - 1.0 for v in r] for r in m.tolist()]
