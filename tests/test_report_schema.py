"""The published report schema (ddpdoctor/report/report.schema.json): generated from the types, shipped,
and a real report validates against it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from ddpdoctor.core.report import Report
from ddpdoctor.report import schema

SHIPPED = Path(schema.__file__).with_name(schema.SCHEMA_FILE)


def test_the_shipped_schema_is_the_generated_one():
    assert json.loads(SHIPPED.read_text()) == schema.report_schema(), (
        "regenerate: python -m ddpdoctor.report.schema > ddpdoctor/report/report.schema.json")


def _reports():
    from helpers import REPO

    found = sorted((REPO / "tests").rglob("*.json"))
    out = []
    for p in found:
        try:
            d = json.loads(p.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(d, dict) and "schema_version" in d and "checks" in d:
            out.append(p)
    return out


@pytest.mark.parametrize("path", _reports(), ids=lambda p: p.name)
def test_saved_reports_validate(path):
    d = json.loads(path.read_text())
    jsonschema.validate(Report.from_dict(d).to_dict(), json.loads(SHIPPED.read_text()))


def test_a_real_run_validates_and_a_broken_one_does_not(tmp_path):
    from helpers import run_cli

    rj = tmp_path / "r.json"
    p = run_cli("check", "--select", "ENV001,COL001", "-q", "--json", str(rj), timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    d = json.loads(rj.read_text())
    s = json.loads(SHIPPED.read_text())
    jsonschema.validate(d, s)
    d["checks"][0]["status"] = "fine"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(d, s)
