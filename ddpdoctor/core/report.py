"""Findings, check results and the report: plain data, JSON round-trip, no torch.

Everything a check, a lint rule or a recommendation produces ends up here, so the CLI, the TUI and
saved files all read one shape. The JSON form is versioned by SCHEMA_VERSION.
"""

from __future__ import annotations

import enum
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ddpdoctor.core.run_info import RunInfo

SCHEMA_VERSION = 1
_MISSING = object()
_KIND_NAMES = {str: "a string", dict: "an object", list: "a list", float: "a number", int: "a whole number"}


def _field(d: Any, key: str, kind: type, where: str, default: Any = _MISSING) -> Any:
    """d[key] when it has the JSON type ``kind`` (float: any number), else a ValueError naming the field
    (``checks[2].duration_s: expected a number, got 'x'``) so a malformed report is refused, not rendered."""
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected an object, got {type(d).__name__}")
    if key not in d or (d[key] is None and default is not _MISSING):
        if default is _MISSING:
            raise ValueError(f"{where}: {key!r} is missing")
        return default
    v = d[key]
    ok = (isinstance(v, (int, float)) if kind is float else isinstance(v, kind)) and not isinstance(v, bool)
    if not ok:
        shown = repr(v) if len(repr(v)) < 40 else type(v).__name__
        raise ValueError(f"{where}.{key}: expected {_KIND_NAMES[kind]}, got {shown}")
    return v


def _items(d: dict, key: str, where: str) -> list:
    return _field(d, key, list, where, [])


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
    def from_dict(cls, d: dict[str, Any], where: str = "finding") -> Finding:
        loc = _field(d, "location", dict, where, None)
        if loc is not None:
            loc = Location(
                path=_field(loc, "path", str, f"{where}.location"),
                **{k: _field(loc, k, int, f"{where}.location", None) for k in ("line", "col", "end_line", "end_col")
                   if loc.get(k) is not None},
            )
        return cls(
            code=_field(d, "code", str, where),
            severity=Severity.parse(_field(d, "severity", str, where)),
            message=_field(d, "message", str, where),
            where=dict(_field(d, "where", dict, where, {})),
            evidence=dict(_field(d, "evidence", dict, where, {})),
            hint=_field(d, "hint", str, where, None),
            location=loc,
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
    def from_dict(cls, d: dict[str, Any], where: str = "check") -> CheckResult:
        code = _field(d, "code", str, where)
        return cls(
            code=code,
            title=_field(d, "title", str, where, code),
            kind=_field(d, "kind", str, where, "cluster"),
            status=Status(_field(d, "status", str, where, "passed")),
            summary=_field(d, "summary", str, where, ""),
            duration_s=float(_field(d, "duration_s", float, where, 0.0)),
            findings=[Finding.from_dict(f, f"{where}.findings[{i}]") for i, f in enumerate(_items(d, "findings", where))],
            data=dict(_field(d, "data", dict, where, {})),
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
    def from_dict(cls, d: dict[str, Any], where: str = "recommendation") -> Recommendation:
        kinds = {"id": str, "title": str, "evidence": dict, "confidence": str, "rationale": str, "snippet": str,
                 "data": dict}
        known = {k: _field(d, k, kinds[k], where, None) if k in kinds else d[k]
                 for k in cls.__dataclass_fields__ if k in d and d[k] is not None}
        for k in ("id", "title"):
            _field(d, k, str, where)
        return cls(**known)


@dataclass
class Report:
    """A whole run: what ran where, every check's result, recommendations and lint findings."""

    run: RunInfo = field(default_factory=RunInfo)  # what ran where and how it ended (core/run_info.py)
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
            from ddpdoctor.core.version import __version__

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
            "run": self.run.to_json(),
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
        run = _field(d, "run", dict, "report", {})
        _field(run, "duration_s", float, "run", None)
        _field(run, "world_size", int, "run", None)
        if not isinstance(run.get("nodes", []), (list, int)) or isinstance(run.get("nodes"), bool):
            raise ValueError(f"run.nodes: expected a list of host names, got {run['nodes']!r:.40}")
        ranks = _items(d, "ranks", "report")
        for i, r in enumerate(ranks):
            _field({"rank": r}, "rank", dict, f"ranks[{i}]")
        return cls(
            run=RunInfo.from_json(run),
            ranks=list(ranks),
            versions=dict(_field(d, "versions", dict, "report", {})),
            checks=[CheckResult.from_dict(c, f"checks[{i}]") for i, c in enumerate(_items(d, "checks", "report"))],
            recommendations=[Recommendation.from_dict(r, f"recommendations[{i}]")
                             for i, r in enumerate(_items(d, "recommendations", "report"))],
            lint=[Finding.from_dict(f, f"lint[{i}]") for i, f in enumerate(_items(d, "lint", "report"))],
            created=float(_field(d, "created", float, "report", 0.0)),
            schema_version=version,
            tool_version=str(_field(_field(d, "tool", dict, "report", {}), "version", str, "tool", "")),
        )
