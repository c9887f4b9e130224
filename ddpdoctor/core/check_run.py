"""What one `ddpdoctor check` run is asked to do: the command builds it from its flags (validated there,
exit 2 before anything starts) and the runtime runs it; the runtime never reads a command line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CheckRun:
    # launch (torchrun semantics; None: the default or Slurm's)
    nodes: int | None = None
    nproc_per_node: int | None = None
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    rdzv_timeout_s: float = 60.0
    local_addr: str | None = None
    backend: str = "auto"  # auto | nccl | gloo
    # what to run
    select: tuple[str, ...] | None = None  # codes or prefixes; None: the suite
    skip: tuple[str, ...] | None = None
    suite: str = "quick"
    checks_path: tuple[str, ...] = ()
    budget_scale: float = 1.0
    script: str | None = None  # a training script (or folder) to lint into the report
    # the checks' options (validated against their OPTIONS), the profile, the recommenders' options
    options: dict[str, Any] = field(default_factory=dict)
    profile: str | None = None
    recommend: dict[str, Any] = field(default_factory=dict)
    # the flags that steer what the checks measure, as given: a `--drain` confirmation run repeats them
    check_flags: tuple[str, ...] = ()
    # files (paths checked by the command before the run; None: not asked for)
    json: str | None = None
    junit: str | None = None
    bad_nodes: str | None = None
    events: str | None = None  # "-": stdout
    write_config: str | None = None
    metrics: str | None = None
    k8s_labels: tuple[str, ...] = ()
    valid_for_s: float = 24 * 3600.0
    history: str | None = None
    # the terminal and the fleet
    quiet: bool = False
    verbose: bool = False
    drain: bool = False
    confirm_delay_s: float = 0.0
