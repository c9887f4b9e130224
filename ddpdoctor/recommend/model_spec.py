"""What the bucket recommendation needs to know about a model: gradients, backward time, DDP flags.

``ModelSpec`` holds the gradient tensors in registration order (element count and dtype of every
parameter that requires grad), the backward time when known, and the DDP flags that change the
bucketing. Three ways to make one:

- ``ModelSpec.from_module(model)`` reads ``named_parameters()`` of an nn.Module (exact tensors);
  with ``sample_input=`` it also times forward and backward on this machine.
- ``ModelSpec.from_params("124M")`` from a bare parameter count (or ``grad_bytes=``). The real tensor
  sizes are unknown then, so the count is split into equal tensors of
  ``max(SPLIT_MIN_NUMEL, ceil(count / SPLIT_MAX_TENSORS))`` elements (the last one takes the rest):
  1 MiB of fp32 each for models up to ~1B parameters, and never more than 4096 tensors. Real models
  have larger matrices (GPT-2's embedding is 38.6M elements), so their buckets overshoot the cap
  more than simulated; the recommendation lowers its confidence for a bare count.
- ``ModelSpec.from_dict(d)``: the JSON form (``to_dict()``) that goes into the report's options.

Pure at import: torch is only imported inside ``measure_step_times``.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.model.bandwidth.sizes import parse_size
from ddpdoctor.model.tuning.ddp_buckets import DTYPE_BYTES, GradTensor, canonical_dtype

SPLIT_MIN_NUMEL = 1 << 18  # 256 Ki elements: 1 MiB of fp32, the smallest bucket DDP makes by default
SPLIT_MAX_TENSORS = 4096
SPEC_VERSION = 1

_SUFFIX = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_COUNT_RE = re.compile(r"^\s*([0-9][0-9_,]*\.?[0-9]*(?:e[+-]?[0-9]+)?)\s*([KMBGT]?)\s*$", re.IGNORECASE)


def parse_count(text: str | float) -> int:
    """'124M', '1.3B', '7e9', '350_000', 1_000_000 -> a positive count (K=1e3, M=1e6, B/G=1e9, T=1e12)."""
    if isinstance(text, bool):
        raise ValueError(f"parameter count must be a number, got {text!r}")  # noqa: TRY004
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = _COUNT_RE.match(str(text))
        if not m:
            raise ValueError(
                f"cannot read parameter count {text!r}: expected a number with an optional K, M, B or T "
                "suffix, e.g. 124M, 1.3B, 7e9"
            )
        value = float(m.group(1).replace("_", "").replace(",", "")) * _SUFFIX[m.group(2).upper()]
    if not math.isfinite(value) or value < 1:
        raise ValueError(f"parameter count must be at least 1, got {text!r}")
    return round(value)


def split_count(count: int, dtype: str = "fp32") -> list[GradTensor]:
    """A bare parameter count as equal tensors (see the module docstring for the rule)."""
    piece = max(SPLIT_MIN_NUMEL, math.ceil(count / SPLIT_MAX_TENSORS))
    full, rest = divmod(count, piece)
    sizes = [piece] * full + ([rest] if rest else [])
    return [GradTensor(n, dtype, f"part{i}") for i, n in enumerate(sizes)]


def _opt_ms(value: Any, label: str) -> float | None:
    if value is None:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (number and math.isfinite(value) and value >= 0):
        raise ValueError(f"{label} must be a number of milliseconds >= 0, got {value!r}")
    return float(value)


def _flag(value: Any, label: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{label} must be true or false, got {value!r}")  # noqa: TRY004
    return value


@dataclass(frozen=True)
class ModelSpec:
    tensors: tuple[GradTensor, ...]  # gradients in registration order
    source: str = "tensors"  # "module" | "tensors" (exact sizes) | "count" (a bare count, split)
    count: int | None = None  # the bare count, when source == "count"
    backward_ms: float | None = None
    forward_ms: float | None = None  # forward + optimizer + anything else in a step that comm cannot hide
    timing: str | None = None  # "measured" (on this machine, by measure_step_times) | "given" | None
    find_unused_parameters: bool = False
    static_graph: bool = False
    gradient_as_bucket_view: bool = False
    name: str = ""
    notes: dict[str, Any] = field(default_factory=dict)  # how the timing was measured, etc.

    def __post_init__(self) -> None:
        if not self.tensors:
            raise ValueError("a model spec needs at least one gradient tensor (no parameter requires grad?)")
        if self.source not in ("module", "tensors", "count"):
            raise ValueError(f"source must be module, tensors or count, got {self.source!r}")
        object.__setattr__(self, "backward_ms", _opt_ms(self.backward_ms, "backward_ms"))
        object.__setattr__(self, "forward_ms", _opt_ms(self.forward_ms, "forward_ms"))
        if self.timing not in (None, "measured", "given"):
            raise ValueError(f"timing must be measured, given or null, got {self.timing!r}")
        if self.backward_ms is None and self.timing is not None:
            object.__setattr__(self, "timing", None)
        if self.backward_ms is not None and self.timing is None:
            object.__setattr__(self, "timing", "given")
        for flag in ("find_unused_parameters", "static_graph", "gradient_as_bucket_view"):
            _flag(getattr(self, flag), flag)

    # -- what the recommender reads -------------------------------------------------------------
    @property
    def exact(self) -> bool:
        """Real tensor sizes (not a split bare count)."""
        return self.source != "count"

    @property
    def numel(self) -> int:
        return sum(t.numel for t in self.tensors)

    @property
    def grad_bytes(self) -> int:
        return sum(t.size_B for t in self.tensors)

    def describe(self) -> str:
        kinds = sorted({t.dtype for t in self.tensors})
        how = "a bare count" if self.source == "count" else f"{len(self.tensors)} tensors"
        label = f"{self.name}: " if self.name else ""
        size = f"{'/'.join(kinds)}, {self.grad_bytes / 2**20:.0f} MiB, {how}"
        return f"{label}{self.numel / 1e6:.1f}M parameters ({size})"

    # -- constructors ---------------------------------------------------------------------------
    @classmethod
    def from_params(
        cls,
        count: float | str | None = None,
        dtype: str = "fp32",
        *,
        grad_bytes: int | str | None = None,
        **kw: Any,
    ) -> ModelSpec:
        """From a parameter count ("124M") or the gradients' total size (``grad_bytes="500MiB"``, binary
        suffixes as ``ddpdoctor.model.bandwidth.sizes.parse_size`` reads them)."""
        if (count is None) == (grad_bytes is None):
            raise ValueError("give either a parameter count or grad_bytes, not both or neither")
        dt = canonical_dtype(dtype)
        n = parse_count(count) if count is not None else max(1, parse_size(grad_bytes) // DTYPE_BYTES[dt])
        return cls(tuple(split_count(n, dt)), source="count", count=n, **kw)

    @classmethod
    def from_module(
        cls,
        module: Any,
        *,
        sample_input: Any = None,
        loss_fn: Callable | None = None,
        dtype: str | None = None,
        **kw: Any,
    ) -> ModelSpec:
        """From an nn.Module's parameters that require grad, in registration order (shared parameters
        once, as DDP sees them). ``dtype`` overrides the gradients' dtype (e.g. the module will be cast
        before training). With ``sample_input`` the forward and backward are timed here
        (``measure_step_times``); say ``backward_ms=`` instead to give times from the real hardware."""
        if not hasattr(module, "named_parameters"):
            raise ValueError(f"expected a torch.nn.Module, got {type(module).__name__}")
        tensors = tuple(
            GradTensor(int(p.numel()), canonical_dtype(dtype or str(p.dtype)), name)
            for name, p in module.named_parameters()
            if p.requires_grad
        )
        if sample_input is not None:
            if "backward_ms" in kw:
                raise ValueError("give backward_ms or sample_input (to measure it), not both")
            fwd, bwd, notes = measure_step_times(module, sample_input, loss_fn=loss_fn)
            kw.setdefault("forward_ms", fwd)
            kw.update(backward_ms=bwd, timing="measured", notes={**kw.get("notes", {}), **notes})
        kw.setdefault("name", type(module).__name__)
        return cls(tensors, source="module", **kw)

    # -- JSON -----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"version": SPEC_VERSION, "source": self.source, "name": self.name}
        if self.source == "count":
            d.update(count=self.count, dtype=self.tensors[0].dtype)
        else:
            d["tensors"] = [[t.name, t.numel, t.dtype] for t in self.tensors]
        d.update(
            backward_ms=self.backward_ms,
            forward_ms=self.forward_ms,
            timing=self.timing,
            find_unused_parameters=self.find_unused_parameters,
            static_graph=self.static_graph,
            gradient_as_bucket_view=self.gradient_as_bucket_view,
        )
        if self.notes:
            d["notes"] = self.notes
        return d

    @classmethod
    def from_dict(cls, d: Any) -> ModelSpec:
        if not isinstance(d, dict):
            raise ValueError(f"model spec must be a JSON object, got {type(d).__name__}")  # noqa: TRY004
        version = d.get("version", SPEC_VERSION)
        if version != SPEC_VERSION:
            raise ValueError(f"model spec version {version!r} is not supported (expected {SPEC_VERSION})")
        unknown = set(d) - {
            "version",
            "source",
            "name",
            "count",
            "dtype",
            "tensors",
            "backward_ms",
            "forward_ms",
            "timing",
            "find_unused_parameters",
            "static_graph",
            "gradient_as_bucket_view",
            "notes",
        }
        if unknown:
            raise ValueError(f"model spec: unknown key(s) {', '.join(sorted(unknown))}")
        kw = {k: d[k] for k in ("backward_ms", "forward_ms", "timing", "name", "notes") if k in d}
        for flag in ("find_unused_parameters", "static_graph", "gradient_as_bucket_view"):
            if flag in d:
                kw[flag] = _flag(d[flag], f"model.{flag}")
        source = d.get("source", "tensors" if "tensors" in d else "count")
        if source == "count":
            if "count" not in d:
                raise ValueError("model spec with source 'count' needs 'count' (a parameter count)")
            return cls.from_params(d["count"], d.get("dtype", "fp32"), **kw)
        rows = d.get("tensors")
        if not isinstance(rows, list) or not rows:
            raise ValueError("model spec needs 'tensors': a non-empty list of [name, numel, dtype]")
        tensors = []
        for i, row in enumerate(rows):
            if not (isinstance(row, (list, tuple)) and len(row) == 3):
                raise ValueError(f"model.tensors[{i}]: expected [name, numel, dtype], got {row!r}")
            name, numel, dtype = row
            if isinstance(numel, bool) or not isinstance(numel, int) or numel < 1:
                raise ValueError(f"model.tensors[{i}].numel: expected a positive integer, got {numel!r}")
            try:
                tensors.append(GradTensor(numel, canonical_dtype(dtype), str(name)))
            except ValueError as e:
                raise ValueError(f"model.tensors[{i}]: {e}") from None
        return cls(tuple(tensors), source=source, **kw)


def measure_step_times(
    module: Any,
    sample_input: Any,
    *,
    loss_fn: Callable | None = None,
    warmup: int = 2,
    iters: int = 5,
    budget_s: float = 60.0,
) -> tuple[float, float, dict[str, Any]]:
    """Median forward and backward time (ms) of ``module`` on ``sample_input`` on this machine.

    ``loss_fn(output) -> scalar`` (default: the sum of the output). Stops early once ``budget_s`` is
    spent (after at least one timed iteration), so a slow model cannot hang the caller. CUDA work is
    synchronized around each phase. Gradients are zeroed afterwards."""
    import torch

    if iters < 1 or warmup < 0:
        raise ValueError("iters must be >= 1 and warmup >= 0")
    params = [p for p in module.parameters() if p.requires_grad]
    on_cuda = any(p.is_cuda for p in params)

    def sync() -> None:
        if on_cuda:
            torch.cuda.synchronize()

    loss_fn = loss_fn or (lambda out: out.float().sum())
    args = sample_input if isinstance(sample_input, tuple) else (sample_input,)
    fwd: list[float] = []
    bwd: list[float] = []
    t_end = time.monotonic() + budget_s
    for i in range(warmup + iters):
        sync()
        t0 = time.perf_counter()
        loss = loss_fn(module(*args))
        sync()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        if i >= warmup:
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
        if bwd and time.monotonic() > t_end:
            break
    for p in params:
        p.grad = None
    notes = {
        "timed_iters": len(bwd),
        "device": "cuda" if on_cuda else "cpu",
        "threads": torch.get_num_threads(),
    }
    return round(statistics.median(fwd), 3), round(statistics.median(bwd), 3), notes
