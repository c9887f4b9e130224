"""JUnit XML for CI gating: one testcase per check, failures carry the findings."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ddpdoctor.core.report import Report, Severity, Status


def to_junit(report: Report) -> str:
    suite = ET.Element("testsuite", name="ddpdoctor")
    failures = errors = skipped = 0
    total_time = 0.0
    for c in report.checks:
        case = ET.SubElement(suite, "testcase", classname=f"ddpdoctor.{c.kind}", name=f"{c.code} {c.title}",
                             time=f"{c.duration_s:.3f}")
        total_time += c.duration_s
        text = "\n".join(f"{f.severity.value}: {f.message}" for f in c.findings)
        if c.status in (Status.FAILED, Status.TIMED_OUT):
            failures += 1
            el = ET.SubElement(case, "failure", message=c.summary or c.status.value, type=c.status.value)
            el.text = text
        elif c.status is Status.ERROR:
            errors += 1
            el = ET.SubElement(case, "error", message=c.summary or "error", type="error")
            el.text = text
        elif c.status in (Status.SKIPPED, Status.NOT_RUN):
            skipped += 1
            ET.SubElement(case, "skipped", message=c.summary or c.status.value)
        elif text:
            ET.SubElement(case, "system-out").text = text
    lint_errors = [f for f in report.lint if f.severity is Severity.ERROR]
    if report.lint:
        case = ET.SubElement(suite, "testcase", classname="ddpdoctor.script", name="lint", time="0")
        if lint_errors:
            failures += 1
            el = ET.SubElement(case, "failure", message=f"{len(lint_errors)} lint finding(s)", type="lint")
            el.text = "\n".join(
                f"{f.location.path}:{f.location.line}:{f.location.col}: {f.code} {f.message}" if f.location else f.message
                for f in report.lint
            )
    suite.set("tests", str(len(suite)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    suite.set("time", f"{total_time:.3f}")
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)
