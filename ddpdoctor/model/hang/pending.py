"""Is this rank waiting inside a collective or p2p operation, and for how long? (pure)

`ddpdoctor watch` calls a rank hung only when it has waited inside an operation longer than
`--hang-after`, never for mere silence: a rank computing for an hour between collectives is healthy.
Two sources say where a rank waits:

- Flight Recorder entries (JSON form): an entry not yet retired (and, on NCCL, not "completed") is an
  operation the rank has issued and not seen finish; its age is now - ``time_created_ns``. On gloo
  ``state`` stays "scheduled" and ``retired`` turns true when the work finishes (seen on torch 2.13).
- The main thread's innermost frame, for operations Flight Recorder does not record (gloo ``send`` /
  ``recv`` in torch 2.13): a frame inside ``torch/distributed/distributed_c10d.py`` that has not moved.
"""

from __future__ import annotations

from dataclasses import dataclass

# c10d's Python functions whose frames mean "this thread waits in the backend" (DDP's all_reduce in
# backward waits in autograd, where Flight Recorder sees it instead).
C10D_FILE_SUFFIX = "torch/distributed/distributed_c10d.py"
C10D_WAITS = frozenset({
    "send", "recv", "isend", "irecv", "batch_isend_irecv", "barrier", "monitored_barrier", "all_reduce",
    "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "broadcast",
    "reduce", "gather", "scatter", "all_to_all", "all_to_all_single", "all_gather_object",
    "broadcast_object_list", "gather_object", "scatter_object_list", "wait",
    # every rank of the world must call these (unless use_local_synchronization): a rank can sit in one
    "new_group", "new_subgroups", "new_subgroups_by_enumeration",
})


@dataclass(frozen=True)
class Pending:
    """The oldest operation this rank has been waiting in."""

    operation: str  # "gloo:all_reduce", or "send" when only the stack says so
    seq: int | None  # collective_seq_id or p2p_seq_id from Flight Recorder; None from the stack
    is_p2p: bool
    since_ns: int
    source: str  # "flight_recorder" | "stack"

    def waiting_s(self, now_ns: int) -> float:
        return max(0.0, (now_ns - self.since_ns) / 1e9)

    def to_dict(self, now_ns: int) -> dict:
        return {"operation": self.operation, "seq": self.seq, "is_p2p": self.is_p2p,
                "since_ns": self.since_ns, "waiting_s": round(self.waiting_s(now_ns), 3),
                "source": self.source}


def entry_pending(entry: dict) -> bool:
    return not entry.get("retired", False) and entry.get("state") != "completed"


def oldest_pending_entry(entries: list[dict]) -> dict | None:
    """The oldest unfinished Flight Recorder entry, or None when the rank waits in nothing."""
    best = None
    for e in entries:
        if not entry_pending(e):
            continue
        t = int(e.get("time_created_ns") or 0)
        if t <= 0:
            continue
        if best is None or t < int(best["time_created_ns"]):
            best = e
    return best


def pending_of(entry: dict) -> Pending:
    p2p = bool(entry.get("is_p2p"))
    seq = entry.get("p2p_seq_id") if p2p else entry.get("collective_seq_id")
    return Pending(operation=str(entry.get("profiling_name") or "?"), seq=None if seq is None else int(seq),
                   is_p2p=p2p, since_ns=int(entry["time_created_ns"]), source="flight_recorder")


def oldest_pending(entries: list[dict]) -> Pending | None:
    """The oldest unfinished Flight Recorder entry as a Pending, or None."""
    best = oldest_pending_entry(entries)
    return None if best is None else pending_of(best)


def c10d_wait(frames: list[tuple[str, str]]) -> str | None:
    """The c10d operation a stack (outermost first, (file, function) pairs) is blocked in, if any.

    The outermost c10d frame names the operation the user called (``send`` calls ``wait``)."""
    for filename, function in frames:
        if filename.replace("\\", "/").endswith(C10D_FILE_SUFFIX) and function in C10D_WAITS:
            return function
    return None


class StackWaitTracker:
    """Remembers since when the main thread has sat in the same c10d call, for operations that Flight
    Recorder does not see. The key must name one call, not one place: the caller passes the frame
    object itself (kept alive by the key, so a later call at the same line, whose frame may reuse
    the same address, is a new key) -- one continuous wait, never waits summed across calls."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._since_ns = 0

    def update(self, key: tuple | None, operation: str | None, now_ns: int) -> Pending | None:
        if key is None or operation is None:
            self._key = None
            return None
        if key != self._key:
            self._key, self._since_ns = key, now_ns
        p2p = operation in ("send", "recv", "isend", "irecv", "batch_isend_irecv")
        return Pending(operation=operation, seq=None, is_p2p=p2p, since_ns=self._since_ns, source="stack")


class ProgressTracker:
    """From Flight Recorder's per-group status (``last_enqueued_collective`` /
    ``last_completed_collective``): how long some group has had work enqueued without completing any.
    Cheap to read every poll, unlike the entries; a rank can only have waited in one operation for S
    seconds if its group has made no progress for S seconds."""

    def __init__(self) -> None:
        self._since: dict[str, tuple[int, int]] = {}  # group -> (last completed, since when stalled)

    def stalled_s(self, pg_status: dict, now_ns: int) -> float:
        worst = 0.0
        seen = set()
        for pg, st in pg_status.items():
            try:
                enq = int(st.get("last_enqueued_collective", -1))
                done = int(st.get("last_completed_collective", -1))
            except (TypeError, ValueError):
                continue
            if enq <= done:
                continue
            seen.add(pg)
            prev = self._since.get(pg)
            if prev is None or prev[0] != done:
                self._since[pg] = (done, now_ns)
            worst = max(worst, (now_ns - self._since[pg][1]) / 1e9)
        for pg in set(self._since) - seen:
            del self._since[pg]
        return worst


def poll_interval(hang_after_s: float) -> float:
    """How often a rank looks at itself: often enough to call a hang within a few seconds of
    --hang-after and to publish a wait within half a second for the certainty check, rarely enough to
    cost nothing measurable (the per-group status is a few microseconds; a full dump ~0.3 ms)."""
    return min(0.5, max(0.25, hang_after_s / 10.0))


class Rhythm:
    """The job's own rhythm, for --hang-after auto: how often this rank completes an operation (any
    group's ``last_completed_collective`` moving) and the longest it has gone without one, seen at
    poll resolution. The threshold is never below a floor: a job that has shown no rhythm yet (its
    first long checkpoint) is judged by the floor alone."""

    def __init__(self) -> None:
        self._done: int | None = None
        self._first_ns: int | None = None
        self._last_ns: int | None = None
        self.completed = 0
        self.longest_gap_s = 0.0

    def update(self, pg_status: dict, now_ns: int) -> None:
        done = 0
        for st in pg_status.values():
            try:
                done += max(0, int(st.get("last_completed_collective", -1)))
            except (TypeError, ValueError, AttributeError):
                continue
        if self._done is None or done < self._done:
            self._done = done
            return
        if done == self._done:
            return
        if self._last_ns is None:
            self._first_ns = now_ns
        else:
            self.longest_gap_s = max(self.longest_gap_s, (now_ns - self._last_ns) / 1e9)
            self.completed += done - self._done
        self._done, self._last_ns = done, now_ns

    def usual_s(self) -> float | None:
        """Seconds per completed operation so far (None before two completions were seen)."""
        if not self.completed or self._first_ns is None or self._last_ns is None:
            return None
        return (self._last_ns - self._first_ns) / 1e9 / self.completed

    def threshold_s(self, floor_s: float, factor: float) -> float:
        return max(floor_s, factor * self.longest_gap_s)

    def to_dict(self, floor_s: float, factor: float) -> dict:
        return {"threshold_s": round(self.threshold_s(floor_s, factor), 1), "floor_s": floor_s,
                "usual_s": None if self.usual_s() is None else round(self.usual_s(), 3),  # type: ignore[arg-type]
                "longest_gap_s": round(self.longest_gap_s, 1), "completed": self.completed}
