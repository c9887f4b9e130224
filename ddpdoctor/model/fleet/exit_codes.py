"""Exit code schemes (pure). ``default``: 0 nothing failed, 1 a check failed, 2 ddpdoctor could not run.
``nagios`` (Nagios plugins, Meta's GCM health checks): 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN."""

from __future__ import annotations

from collections.abc import Iterable

from ddpdoctor.core.report import CheckResult, Severity, Status

SCHEMES = ("default", "nagios")
OK, FAILED, TOOL_ERROR = 0, 1, 2
NAGIOS_OK, NAGIOS_WARNING, NAGIOS_CRITICAL, NAGIOS_UNKNOWN = 0, 1, 2, 3


def outcome(checks: Iterable[CheckResult], extra_errors: bool = False) -> str:
    """"critical", "warning" or "ok" for a set of check results (lint errors count via extra_errors)."""
    checks = list(checks)
    if extra_errors or any(c.status.failing for c in checks) or any(
            f.severity is Severity.ERROR for c in checks for f in c.findings):
        return "critical"
    if any(c.status in (Status.WARNING, Status.NOT_RUN) for c in checks) or any(
            f.severity is Severity.WARNING for c in checks for f in c.findings):
        return "warning"
    return "ok"


def exit_code(result: str, scheme: str = "default") -> int:
    """``result``: "ok", "warning", "critical" or "unknown" (the tool could not run)."""
    if scheme == "nagios":
        return {"ok": NAGIOS_OK, "warning": NAGIOS_WARNING, "critical": NAGIOS_CRITICAL}.get(result, NAGIOS_UNKNOWN)
    if scheme != "default":
        raise ValueError(f"unknown exit-code scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    return {"ok": OK, "warning": OK, "critical": FAILED}.get(result, TOOL_ERROR)


def translate(code: int, scheme: str, warned: bool = False) -> int:
    """A default-scheme exit code (0/1/2, 130 for Ctrl-C) in ``scheme``; ``warned``: 0 came with warnings."""
    if scheme == "default" or code not in (OK, FAILED, TOOL_ERROR):
        return code
    return exit_code({OK: "warning" if warned else "ok", FAILED: "critical"}.get(code, "unknown"), scheme)
