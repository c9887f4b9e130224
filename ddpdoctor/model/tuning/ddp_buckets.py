"""DDP's gradient buckets, replayed, and one backward pass overlapped with their all-reduces, simulated.

Pure (no torch, no I/O). The facts come from torch's sources (checked on torch 2.13:
torch/nn/parallel/distributed.py, torch/csrc/distributed/c10d/reducer.cpp, ProcessGroupGloo.cpp,
ProcessGroupNCCL.cpp); tests/recommend/test_ddp_buckets_vs_torch.py compares the replay with torch's own
``dist._compute_bucket_assignment_by_size`` and with the buckets a real DDP builds.

Assignment (``compute_bucket_assignment_by_size``): tensors are walked in order; each (dtype, device)
has one open bucket; a tensor is added whole and the bucket closes as soon as its size reaches the
current limit (``>=``), after which that dtype moves on to the next limit (the last one repeats). Open
buckets are closed at the end. Without an explicit order the buckets are sorted by their smallest
index.

DDP: with ``find_unused_parameters=False`` or ``static_graph=True`` the first iteration uses one bucket
and the Reducer rebuilds the buckets once, after the first backward, in the order gradients became
ready, with the limits [first bucket, cap]. With ``find_unused_parameters=True`` (and no static graph)
the buckets built at construction stay: registration order, limits [first, cap] (or [cap]), sorted,
then reversed so the parameters registered last come first. The first bucket is 1 MiB
(``dist._DEFAULT_FIRST_BUCKET_BYTES``) when ``bucket_cap_mb`` is left at its default; since
pytorch/pytorch#121640 an explicit ``bucket_cap_mb`` caps the first bucket too (older torch: 1 MiB).

Overlap: the Reducer launches bucket all-reduces strictly in bucket order (bucket i goes once it is
complete and buckets 0..i-1 were launched). How launched all-reduces then run depends on the backend:
NCCL runs every collective of a process group on one stream per device, so they are serialized
(``channels=1``); ProcessGroupGloo pops work from one FIFO queue on ``threads`` worker threads (2 by
default), so two all-reduces are in flight at once over the same connections (``channels=2``). We
model a call as a fixed latency part (α, overlaps freely) plus a bandwidth part that calls in flight
share equally; with one channel that is exactly "one after the other".

Not modelled: what overlap costs the compute. The curve is measured with nothing else running; gloo
training on CPU shares cores between backward and all-reduces (on this 2-core machine a 1 MiB gloo
all_reduce took 1.0 ms alone and 3.5 ms next to a matmul on the same core), so on a fast link with many
small buckets the simulation is optimistic about small caps (benchmarks/bucket_cap_regret.py, unshaped).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

MIB = 1024 * 1024
DEFAULT_BUCKET_CAP_MB = 25  # torch/nn/parallel/distributed.py _DEFAULT_BUCKET_CAP_MB
DEFAULT_FIRST_BUCKET_B = MIB  # dist._DEFAULT_FIRST_BUCKET_BYTES
GLOO_DEFAULT_THREADS = 2  # ProcessGroupGloo::Options threads (ProcessGroupGloo._Options()._threads)

# Gradient dtypes: canonical name -> bytes per element; aliases as users and torch spell them.
DTYPE_BYTES = {"fp64": 8, "fp32": 4, "fp16": 2, "bf16": 2, "complex64": 8, "complex128": 16}
_DTYPE_ALIASES = {
    "float64": "fp64",
    "double": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "cfloat": "complex64",
    "cdouble": "complex128",
}


def canonical_dtype(name: str) -> str:
    """'torch.float32', 'float32', 'fp32' -> 'fp32'; ValueError naming the accepted spellings."""
    key = str(name).strip().lower().removeprefix("torch.")
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        raise ValueError(
            f"unknown gradient dtype {name!r}; expected one of {', '.join(DTYPE_BYTES)} "
            f"(or {', '.join(_DTYPE_ALIASES)})"
        )
    return key


@dataclass(frozen=True)
class GradTensor:
    """One parameter's gradient: element count and dtype (canonical name)."""

    numel: int
    dtype: str = "fp32"
    name: str = ""

    @property
    def size_B(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Bucket:
    indices: tuple[int, ...]  # parameter indices (registration order), in the order they were added
    size_B: int
    dtype: str
    limit_B: int  # the size limit the bucket was built under


def assign_by_size(
    tensors: Sequence[GradTensor], limits_B: Sequence[int], order: Sequence[int] | None = None
) -> list[Bucket]:
    """torch's compute_bucket_assignment_by_size. ``order``: the walk order as tensor indices (the
    gradient-ready order at a rebuild; buckets then stay in walk order); None: registration order,
    buckets sorted by their smallest index."""
    if not limits_B or any(lim <= 0 for lim in limits_B):
        raise ValueError(f"bucket size limits must be positive bytes, got {list(limits_B)}")
    walk = list(range(len(tensors))) if order is None else list(order)
    if sorted(walk) != list(range(len(tensors))):
        raise ValueError("order must name every tensor index exactly once")
    done: list[Bucket] = []
    open_: dict[str, tuple[list[int], int]] = {}  # dtype -> (indices, bytes)
    limit_pos: dict[str, int] = {}
    for i in walk:
        t = tensors[i]
        idx, size = open_.get(t.dtype, ([], 0))
        idx.append(i)
        size += t.size_B
        pos = limit_pos.setdefault(t.dtype, 0)
        if size >= limits_B[pos]:
            done.append(Bucket(tuple(idx), size, t.dtype, limits_B[pos]))
            open_.pop(t.dtype, None)
            limit_pos[t.dtype] = min(pos + 1, len(limits_B) - 1)
        else:
            open_[t.dtype] = (idx, size)
    rank = {i: k for k, i in enumerate(walk)}
    # torch closes leftovers in hash-map order, which is arbitrary for several dtypes; we take the
    # order in which their last gradient arrives (what a well-ordered launch would do).
    leftovers = sorted(open_.items(), key=lambda kv: rank[kv[1][0][-1]])
    done += [Bucket(tuple(idx), size, dt, limits_B[limit_pos[dt]]) for dt, (idx, size) in leftovers]
    if order is None:
        done.sort(key=lambda b: min(b.indices))
    return done


def cap_bytes(cap_mb: float | None) -> int:
    """bucket_cap_mb (MiB, None = DDP's default) in bytes, as DDP computes it (int(cap * 2**20))."""
    if cap_mb is None:
        return DEFAULT_BUCKET_CAP_MB * MIB
    if isinstance(cap_mb, bool) or not isinstance(cap_mb, (int, float)) or not math.isfinite(cap_mb):
        raise ValueError(f"bucket_cap_mb must be a positive number of MiB, got {cap_mb!r}")
    if cap_mb <= 0 or int(cap_mb * MIB) <= 0:
        raise ValueError(f"bucket_cap_mb must be a positive number of MiB, got {cap_mb!r}")
    return int(cap_mb * MIB)


def first_bucket_bytes(cap_mb: float | None, first_follows_cap: bool = True) -> int:
    """The first bucket's limit: 1 MiB for the default cap; an explicit cap's own size on torch with
    pytorch/pytorch#121640 (``first_follows_cap``), 1 MiB on older torch."""
    if cap_mb is None or not first_follows_cap:
        return DEFAULT_FIRST_BUCKET_B
    return cap_bytes(cap_mb)


def ready_order(n: int) -> list[int]:
    """The gradient-ready order we assume: reverse registration (a module used in the order its
    parameters were registered produces their gradients backwards)."""
    return list(range(n - 1, -1, -1))


def ddp_buckets(
    tensors: Sequence[GradTensor],
    cap_mb: float | None = None,
    *,
    first_bucket_B: int | None = None,
    find_unused_parameters: bool = False,
    static_graph: bool = False,
    order: Sequence[int] | None = None,
) -> list[Bucket]:
    """The buckets DDP reduces in steady state (after its one rebuild, if any), in launch order.

    ``first_bucket_B`` None: as torch 2.13 does it (see ``first_bucket_bytes``). ``order``: the
    gradient-ready order (default: reverse registration)."""
    if not tensors:
        raise ValueError("a model needs at least one gradient tensor")
    cap_B = cap_bytes(cap_mb)
    first_B = first_bucket_bytes(cap_mb) if first_bucket_B is None else int(first_bucket_B)
    if first_B <= 0:
        raise ValueError(f"first bucket size must be positive bytes, got {first_bucket_B!r}")
    if static_graph or not find_unused_parameters:
        return assign_by_size(
            tensors, [first_B, cap_B], ready_order(len(tensors)) if order is None else order
        )
    limits = [first_B, cap_B] if first_B < cap_B else [cap_B]
    return list(reversed(assign_by_size(tensors, limits)))


def ready_times(
    tensors: Sequence[GradTensor], backward_s: float, order: Sequence[int] | None = None
) -> list[float]:
    """When each gradient is ready (seconds from the start of backward), by tensor index.

    Backward compute is taken as proportional to parameter count (a dense layer's weight-gradient
    and input-gradient work both scale with its weight's size), spread in ``order``."""
    order = ready_order(len(tensors)) if order is None else list(order)
    total = sum(t.numel for t in tensors) or 1
    out = [0.0] * len(tensors)
    done = 0
    for i in order:
        done += tensors[i].numel
        out[i] = backward_s * done / total
    return out


def run_calls(
    launch_s: Sequence[float], dur_s: Sequence[float], latency_s: Sequence[float], channels: int = 1
) -> list[tuple[float, float]]:
    """(start, end) of each all-reduce, launched in order at ``launch_s`` (non-decreasing), each taking
    ``dur_s`` alone, of which ``latency_s`` is a fixed part that does not share the link. At most
    ``channels`` run at once (FIFO); their bandwidth parts share the link equally."""
    n = len(launch_s)
    if channels < 1:
        raise ValueError(f"channels must be >= 1, got {channels}")
    spans: list[tuple[float, float]] = []
    if channels == 1:
        free = 0.0
        for t, d in zip(launch_s, dur_s):
            start = max(t, free)
            free = start + d
            spans.append((start, free))
        return spans
    start = [0.0] * n
    end = [0.0] * n
    lat_end: dict[int, float] = {}
    work: dict[int, float] = {}  # remaining bandwidth part, in seconds at the whole link
    t, nxt = 0.0, 0
    while nxt < n or work:
        while nxt < n and len(work) < channels and launch_s[nxt] <= t:
            start[nxt] = t
            lat = min(latency_s[nxt], dur_s[nxt])
            lat_end[nxt] = t + lat
            work[nxt] = dur_s[nxt] - lat
            nxt += 1
        if not work:
            t = launch_s[nxt]
            continue
        sharing = [i for i in work if lat_end[i] <= t]
        events = [lat_end[i] - t for i in work if lat_end[i] > t]
        events += [work[i] * len(sharing) for i in sharing]
        if nxt < n and len(work) < channels:
            events.append(launch_s[nxt] - t)
        dt = max(min(events), 0.0)
        for i in sharing:
            work[i] -= dt / len(sharing)
        t += dt
        for i in [i for i in work if lat_end[i] <= t and work[i] <= 1e-12 * max(1.0, dur_s[i])]:
            end[i] = t
            del work[i]
    return list(zip(start, end))


@dataclass
class StepSim:
    """One simulated training step at one bucket cap. Times in seconds from the start of forward."""

    cap_mb: float | None  # None: DDP's default (25 MiB, first bucket 1 MiB)
    step_s: float  # forward + backward + the communication left after backward
    forward_s: float
    backward_s: float
    exposed_comm_s: float  # all-reduce time not hidden behind backward
    comm_s: float  # all-reduce time if every call ran alone, summed
    bucket_sizes_B: list[int] = field(default_factory=list)

    @property
    def buckets(self) -> int:
        return len(self.bucket_sizes_B)


def simulate_step(
    tensors: Sequence[GradTensor],
    cap_mb: float | None,
    time_s: Callable[[float], float],
    backward_s: float,
    *,
    forward_s: float = 0.0,
    channels: int = 1,
    latency_s: float = 0.0,
    first_bucket_B: int | None = None,
    find_unused_parameters: bool = False,
    static_graph: bool = False,
) -> StepSim:
    """Simulate one steady-state step: gradients become ready over ``backward_s``, buckets launch in
    order once complete, each all-reduce takes ``time_s(bucket_bytes)`` (e.g. ``TimeCurve.time_s``)."""
    for label, v in (("backward_s", backward_s), ("forward_s", forward_s), ("latency_s", latency_s)):
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"{label} must be a finite number >= 0, got {v!r}")
    buckets = ddp_buckets(
        tensors,
        cap_mb,
        first_bucket_B=first_bucket_B,
        find_unused_parameters=find_unused_parameters,
        static_graph=static_graph,
    )
    ready = ready_times(tensors, backward_s)
    launch, last = [], 0.0
    for b in buckets:
        last = max(last, max(ready[i] for i in b.indices))
        launch.append(last)
    dur = [time_s(b.size_B) for b in buckets]
    spans = run_calls(launch, dur, [latency_s] * len(dur), channels)
    finish = max(e for _, e in spans)
    exposed = max(0.0, finish - backward_s)
    return StepSim(
        cap_mb=cap_mb,
        step_s=forward_s + backward_s + exposed,
        forward_s=forward_s,
        backward_s=backward_s,
        exposed_comm_s=exposed,
        comm_s=sum(dur),
        bucket_sizes_B=[b.size_B for b in buckets],
    )


def sweep(
    tensors: Sequence[GradTensor],
    caps_mb: Sequence[float | None],
    time_s: Callable[[float], float],
    backward_s: float,
    **kw,
) -> list[StepSim]:
    """``simulate_step`` for each cap (None = DDP's default)."""
    return [simulate_step(tensors, cap, time_s, backward_s, **kw) for cap in caps_mb]
