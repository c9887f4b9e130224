"""Output formats: text (ruff's ``path:line:col: CODE message``), json, sarif (2.1.0), github."""

from __future__ import annotations

import json

from ddpdoctor.core.report import Finding, Severity
from ddpdoctor.lint.rules import PARSE_CODE, confidence

FORMATS = ("text", "json", "sarif", "github")


def _loc(f: Finding) -> tuple[str, int, int]:
    loc = f.location
    return (loc.path, loc.line, loc.col) if loc else ("-", 1, 1)


def render_text(findings: list[Finding], show_hints: bool = True) -> str:
    lines = []
    for f in findings:
        path, line, col = _loc(f)
        lines.append(f"{path}:{line}:{col}: {f.code} {f.message}")
        if show_hints and f.hint:
            lines.append(f"    help: {f.hint}")
    n = len(findings)
    lines.append(f"Found {n} problem{'s' if n != 1 else ''}." if n else "All checks passed!")
    return "\n".join(lines) + "\n"


def _confidences(rules) -> dict[str, str]:
    """Each rule's confidence by code (the engine's own DDP000 is certain: the file did not parse)."""
    return {PARSE_CODE: "high", **{s.code: confidence(s) for s in rules}}


def render_json(findings: list[Finding], rules=()) -> str:
    conf = _confidences(rules)
    out = []
    for f in findings:
        d = f.to_dict()
        d["confidence"] = conf.get(f.code, confidence(None))
        out.append(d)
    return json.dumps(out, indent=2) + "\n"


def _github_escape(s: str, prop: bool = False) -> str:
    s = s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return s.replace(":", "%3A").replace(",", "%2C") if prop else s


def render_github(findings: list[Finding]) -> str:
    out = []
    for f in findings:
        path, line, col = _loc(f)
        level = {Severity.ERROR: "error", Severity.WARNING: "warning"}.get(f.severity, "notice")
        title = _github_escape(f"ddpdoctor ({f.code})", True)
        props = f"file={_github_escape(path, True)},line={line},col={col},title={title}"
        out.append(f"::{level} {props}::{_github_escape(f'{f.code} {f.message}')}")
    return "\n".join(out) + ("\n" if out else "")


def render_sarif(findings: list[Finding], rules) -> str:
    from ddpdoctor.core.version import __version__

    used = sorted({f.code for f in findings})
    titles = {s.code: s for s in rules}
    conf = _confidences(rules)
    rule_objs = []
    for code in used:
        spec = titles.get(code)
        rule_objs.append(
            {
                "id": code,
                "name": spec.name if spec else code,
                "shortDescription": {"text": spec.title if spec else "file could not be linted"},
                "fullDescription": {"text": spec.doc if spec else ""},
                "properties": {"confidence": conf.get(code, confidence(None))},
            }
        )
    results = []
    for f in findings:
        path, line, col = _loc(f)
        region = {"startLine": line, "startColumn": col}
        if f.location and f.location.end_line:
            region.update(endLine=f.location.end_line, endColumn=f.location.end_col or col)
        results.append(
            {
                "ruleId": f.code,
                "ruleIndex": used.index(f.code),
                "level": {Severity.ERROR: "error", Severity.WARNING: "warning"}.get(f.severity, "note"),
                "message": {"text": f.message + (f" ({f.hint})" if f.hint else "")},
                "locations": [{"physicalLocation": {"artifactLocation": {"uri": path}, "region": region}}],
                "properties": {"confidence": conf.get(f.code, confidence(None))},
            }
        )
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "ddpdoctor",
                        "version": __version__,
                        "informationUri": "https://github.com/ddpdoctor/ddpdoctor",
                        "rules": rule_objs,
                    }
                },
                "results": results,
            }
        ],
    }
    return json.dumps(doc, indent=2) + "\n"


def render(findings: list[Finding], fmt: str, rules=()) -> str:
    if fmt == "text":
        return render_text(findings)
    if fmt == "json":
        return render_json(findings, rules)
    if fmt == "github":
        return render_github(findings)
    if fmt == "sarif":
        return render_sarif(findings, rules)
    raise ValueError(f"unknown output format {fmt!r}; expected one of {', '.join(FORMATS)}")
