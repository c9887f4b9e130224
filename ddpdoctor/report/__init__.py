"""Findings, results and reports (pure data) and their renderers."""

from ddpdoctor.report.model import (
    SCHEMA_VERSION,
    CheckResult,
    Finding,
    Location,
    Recommendation,
    Report,
    Severity,
    Status,
    status_from_findings,
)

__all__ = [
    "SCHEMA_VERSION",
    "CheckResult",
    "Finding",
    "Location",
    "Recommendation",
    "Report",
    "Severity",
    "Status",
    "status_from_findings",
]
