"""ClusterContext: what a cluster check's ``run(ctx)`` gets on every rank.

Kept free of a torch import at module level; the worker fills it in after the process group exists.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ddpdoctor.core.events import Event, parse_event
from ddpdoctor.core.world import WorldInfo


@dataclass
class ClusterContext:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    nnodes: int
    hostname: str
    backend: str  # "gloo" or "nccl"
    device: Any  # torch.device: cuda:<local_rank> on nccl, cpu on gloo
    world: WorldInfo
    options: dict[str, Any] = field(default_factory=dict)
    budget_s: float = 30.0
    started: float = field(default_factory=time.monotonic)
    store: Any = None  # a torch PrefixStore private to this check on this run
    # Where that store lives: (host, port, key prefix). A check that starts processes of its own (a
    # fresh NCCL communicator per NCCL_ALGO, say) hands them this so they meet through the same store.
    store_endpoint: tuple[str, int, str] | None = None
    group: Any = None  # the default process group (torch.distributed.group.WORLD)
    emit_fn: Callable[[Event], None] | None = None
    check_code: str = ""
    startup: dict[str, Any] = field(default_factory=dict)  # this rank's launch timings (RDZ001 reads them)
    op_count: int = 0  # how many ops this rank entered: who is behind whom when a collective hangs
    # The operation in progress, read by the watchdog to say where a rank was stuck.
    _op: str = ""
    _op_since: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- time ------------------------------------------------------------------------------------
    @property
    def deadline(self) -> float:
        return self.started + self.budget_s

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    # -- where we are, for the watchdog --------------------------------------------------------------
    @contextlib.contextmanager
    def op(self, name: str) -> Iterator[None]:
        """Mark a blocking operation (``with ctx.op("all_reduce 64 MiB"): ...``)."""
        with self._lock:
            prev, prev_since = self._op, self._op_since
            self._op, self._op_since = name, time.monotonic()
            self.op_count += 1
        try:
            yield
        finally:
            with self._lock:
                self._op, self._op_since = prev, prev_since

    def current_op(self) -> tuple[str, float]:
        with self._lock:
            return self._op, (time.monotonic() - self._op_since) if self._op else 0.0

    # -- progress ----------------------------------------------------------------------------------
    def emit(self, event: str, **fields: Any) -> None:
        """A progress event (JSON line) for the CLI and the TUI: ``ctx.emit("progress", done=3, total=9)``."""
        if self.emit_fn is not None:
            self.emit_fn(parse_event({"event": event, "code": self.check_code, "rank": self.rank, **fields}))

    # -- conveniences --------------------------------------------------------------------------------
    @property
    def is_node_leader(self) -> bool:
        return self.local_rank == 0

    @property
    def on_gpu(self) -> bool:
        return self.backend == "nccl"

    def barrier(self) -> None:
        import torch.distributed as dist

        with self.op("barrier"):
            if self.backend == "nccl":
                dist.barrier(device_ids=[self.device.index])
            else:
                dist.barrier()
