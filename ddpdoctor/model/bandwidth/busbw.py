"""Bus bandwidth as nccl-tests defines it (doc/PERFORMANCE.md), so our figures compare with theirs.

algbw = S / t, with S the whole array in bytes (for all_gather and reduce_scatter: the full output /
input, not one rank's chunk). busbw = algbw × a factor that makes every collective comparable with the
link's unidirectional bandwidth: all_reduce 2(n−1)/n; all_gather, reduce_scatter, all_to_all (n−1)/n;
broadcast, reduce, send/recv 1. Units: bytes, seconds in, GB/s (1e9 B/s) out. Pure.
"""

from __future__ import annotations

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "reduce", "send_recv")


def busbw_factor(op: str, n: int) -> float:
    """The factor from algbw to busbw for ``op`` over ``n`` ranks."""
    if n < 1:
        raise ValueError(f"world size must be >= 1, got {n}")
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "reduce", "send_recv"):
        return 1.0
    raise ValueError(f"unknown collective {op!r}; expected one of {', '.join(COLLECTIVES)}")


def algbw_GBps(size_B: float, seconds: float) -> float:
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds}")
    return size_B / seconds / 1e9


def busbw_GBps(op: str, n: int, size_B: float, seconds: float) -> float:
    return algbw_GBps(size_B, seconds) * busbw_factor(op, n)


def bytes_on_wire_per_rank(op: str, n: int, size_B: float) -> float:
    """What one rank sends in a ring implementation: busbw's definition read backwards."""
    return size_B * busbw_factor(op, n)
