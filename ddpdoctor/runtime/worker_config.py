"""The worker's config: what `ddpdoctor check` hands every rank (a JSON file, `--write-config` writes one).

One typed object, read and checked once when the worker starts: an unknown key or a value of the wrong
type is an error naming it, not a silent default on every rank.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    pass


@dataclass
class WorkerConfig:
    checks: list[str] | None = None  # the codes to run, in suite order; None: every cluster check
    check_paths: list[str] = field(default_factory=list)  # extra check files or folders (--checks-path)
    budget_scale: float = 1.0
    budgets: dict[str, float] = field(default_factory=dict)  # per-code budget overrides, seconds
    collective_timeout_s: float | None = None  # the process group's timeout; default: longest budget + 10 s
    options: dict[str, Any] = field(default_factory=dict)  # the checks' options, validated before launch
    profile: str | None = None  # a profile name or YAML path; "none": off; None: detect
    recommend: dict[str, Any] = field(default_factory=dict)  # the recommenders' options
    events: str | None = None  # where each rank appends its events
    report: str | None = None  # where rank 0 (and every node's first rank) writes the JSON report
    # where the user finds the report once the command is over (its --json; the command copies it there
    # from ``report``, a scratch file it removes): what the run_end event names. None: no lasting copy
    report_final: str | None = None
    backend: str = "auto"  # auto | nccl | gloo
    rdzv_timeout_s: float = 60.0
    launch_t0: float | None = None  # unix time the CLI launched torchrun (RDZ001's start-up timings)
    endpoint: str | None = None
    rdzv_id: str | None = None

    @classmethod
    def from_dict(cls, d: Any) -> WorkerConfig:
        if not isinstance(d, dict):
            raise ConfigError(f"expected a JSON object, got {type(d).__name__}")
        names = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise ConfigError(f"unknown key(s) {', '.join(unknown)}; expected some of {', '.join(names)}")
        for key, value in d.items():
            if value is None:
                continue
            want = {"checks": list, "check_paths": list, "budgets": dict, "options": dict, "recommend": dict,
                    "budget_scale": (int, float), "collective_timeout_s": (int, float),
                    "rdzv_timeout_s": (int, float), "launch_t0": (int, float)}.get(key, str)
            if not isinstance(value, want) or isinstance(value, bool):
                raise ConfigError(f"{key}: expected {getattr(want, '__name__', 'a number')}, got {value!r:.60}")
        return cls(**{k: v for k, v in d.items() if v is not None or names[k].default is None})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
