"""Findings, check results and the report: plain data, JSON round-trip, no torch.

Everything a check, a lint rule or a recommendation produces ends up here, so the CLI, the TUI and
saved files all read one shape. The JSON form is versioned by SCHEMA_VERSION.
"""

from __future__ import annotations

import enum
import time
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 1


class Severity(str, enum.Enum):
    """How bad a finding is. ERROR fails the run (exit 1)."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return _SEVERITY_ORDER[self]

    @classmethod
    def parse(cls, value: str | Severity) -> Severity:
        if isinstance(value, Severity):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            raise ValueError(f"unknown severity {value!r}; expected one of info, warning, error") from None


_SEVERITY_ORDER = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}


class Status(str, enum.Enum):
    """The outcome of one check."""

    PASSED = "passed"
    WARNING = "warning"
    FAILED = "failed"
    SKIPPED = "skipped"
    TIMED_OUT = "timed_out"
    ERROR = "error"  # the check itself crashed
    NOT_RUN = "not_run"  # the run ended before this check

    @property
    def failing(self) -> bool:
        return self in (Status.FAILED, Status.TIMED_OUT, Status.ERROR)


@dataclass
class Location:
    """Where in a source file (lint findings). Lines and columns are 1-based."""

    path: str
    line: int = 1
    col: int = 1
    end_line: int | None = None
    end_col: int | None = None


@dataclass
class Finding:
    """One verdict with the evidence behind it.

    ``where`` names the place in the cluster: any of node (hostname), node_rank, ranks, gpu, link, ...
    ``evidence`` holds the measured figures, each with its unit in the key or value
    (e.g. ``{"busbw_GBps": 1.9, "expected_GBps": 2.0}``).
    """

    code: str
    severity: Severity
    message: str
    where: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    hint: str | None = None
    location: Location | None = None

    def __post_init__(self) -> None:
        self.severity = Severity.parse(self.severity)
        if isinstance(self.location, dict):
            self.location = Location(**self.location)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["severity"] = self.severity.value
        if self.location is None:
            d.pop("location")
        if self.hint is None:
            d.pop("hint")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(
            code=d["code"],
            severity=Severity.parse(d["severity"]),
            message=d["message"],
            where=dict(d.get("where") or {}),
            evidence=dict(d.get("evidence") or {}),
            hint=d.get("hint"),
            location=Location(**d["location"]) if d.get("location") else None,
        )


def status_from_findings(findings: list[Finding]) -> Status:
    worst = max((f.severity.rank for f in findings), default=-1)
    if worst >= Severity.ERROR.rank:
        return Status.FAILED
    if worst >= Severity.WARNING.rank:
        return Status.WARNING
    return Status.PASSED


@dataclass
class CheckResult:
    """One check's outcome over the whole run, as rank 0 assembled it.

    ``data`` is the check's own machine-readable payload (matrices, curves, topology), documented by
    the check; every figure in it carries its unit in its key or an adjacent ``unit`` field.
    """

    code: str
    title: str
    kind: str = "cluster"
    status: Status = Status.PASSED
    summary: str = ""
    duration_s: float = 0.0
    findings: list[Finding] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.status = Status(self.status)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "title": self.title,
            "kind": self.kind,
            "status": self.status.value,
            "summary": self.summary,
            "duration_s": round(self.duration_s, 6),
            "findings": [f.to_dict() for f in self.findings],
            "data": self.data,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckResult:
        return cls(
            code=d["code"],
            title=d.get("title", d["code"]),
            kind=d.get("kind", "cluster"),
            status=Status(d.get("status", "passed")),
            summary=d.get("summary", ""),
            duration_s=float(d.get("duration_s", 0.0)),
            findings=[Finding.from_dict(f) for f in d.get("findings", [])],
            data=dict(d.get("data") or {}),
        )


@dataclass
class Recommendation:
    """A suggested setting with the evidence measured on this cluster and how sure we are."""

    id: str  # e.g. "bucket_cap_mb", "nccl_algo", "layout"
    title: str
    value: Any  # the recommended value, or "keep the default"
    evidence: dict[str, Any] = field(default_factory=dict)
    confidence: str = "medium"  # low | medium | high
    rationale: str = ""
    snippet: str | None = None  # ready to paste: env vars, DDP kwargs, group code
    data: dict[str, Any] = field(default_factory=dict)  # curves etc. for plots

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Recommendation:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


@dataclass
class Report:
    """A whole run: what ran where, every check's result, recommendations and lint findings."""

    run: dict[str, Any] = field(default_factory=dict)  # backend, world_size, nodes, endpoint, complete, ...
    ranks: list[dict[str, Any]] = field(default_factory=list)  # rank, local_rank, node_rank, hostname
    versions: dict[str, Any] = field(default_factory=dict)
    checks: list[CheckResult] = field(default_factory=list)
    recommendations: list[Recommendation] = field(default_factory=list)
    lint: list[Finding] = field(default_factory=list)
    created: float = field(default_factory=time.time)
    schema_version: int = SCHEMA_VERSION
    tool_version: str = ""

    def __post_init__(self) -> None:
        if not self.tool_version:
            from ddpdoctor import __version__

            self.tool_version = __version__

    # -- queries -------------------------------------------------------------------------------
    def check(self, code: str) -> CheckResult | None:
        return next((c for c in self.checks if c.code == code), None)

    def findings(self) -> list[Finding]:
        out = [f for c in self.checks for f in c.findings]
        return out + list(self.lint)

    @property
    def failed(self) -> bool:
        return any(c.status.failing for c in self.checks) or any(
            f.severity is Severity.ERROR for f in self.findings()
        )

    def exit_code(self) -> int:
        return 1 if self.failed else 0

    # -- JSON ------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "tool": {"name": "ddpdoctor", "version": self.tool_version},
            "created": self.created,
            "run": self.run,
            "ranks": self.ranks,
            "versions": self.versions,
            "checks": [c.to_dict() for c in self.checks],
            "recommendations": [r.to_dict() for r in self.recommendations],
            "lint": [f.to_dict() for f in self.lint],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Report:
        if not isinstance(d, dict) or "schema_version" not in d:
            raise ValueError("not a ddpdoctor report (no schema_version)")
        version = d["schema_version"]
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ValueError(
                f"report schema_version {version!r} is newer than this ddpdoctor understands "
                f"({SCHEMA_VERSION}); upgrade ddpdoctor"
            )
        return cls(
            run=dict(d.get("run") or {}),
            ranks=list(d.get("ranks") or []),
            versions=dict(d.get("versions") or {}),
            checks=[CheckResult.from_dict(c) for c in d.get("checks", [])],
            recommendations=[Recommendation.from_dict(r) for r in d.get("recommendations", [])],
            lint=[Finding.from_dict(f) for f in d.get("lint", [])],
            created=float(d.get("created", 0.0)),
            schema_version=version,
            tool_version=(d.get("tool") or {}).get("version", ""),
        )
