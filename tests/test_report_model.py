import json

import pytest

from ddpdoctor.core.report import CheckResult, Finding, Location, Recommendation, Report, Severity, Status
from ddpdoctor.core.run_info import RunInfo


def _report() -> Report:
    return Report(
        run=RunInfo(backend="gloo", world_size=2),
        ranks=[{"rank": 0, "hostname": "a"}, {"rank": 1, "hostname": "b"}],
        checks=[
            CheckResult(
                code="COL001",
                title="Collectives",
                status=Status.FAILED,
                findings=[Finding("COL001", "error", "rank 1 got wrong data", where={"ranks": [1]})],
            )
        ],
        recommendations=[Recommendation(id="bucket_cap_mb", title="DDP bucket size", value=25)],
        lint=[Finding("DDP101", Severity.WARNING, "x", location=Location("t.py", 3, 4))],
    )


def test_round_trip_through_json():
    r = _report()
    again = Report.from_dict(json.loads(json.dumps(r.to_dict())))
    assert again.to_dict() == r.to_dict()
    assert again.lint[0].location.line == 3
    assert again.exit_code() == 1


def test_exit_code_zero_when_nothing_fails():
    r = Report(checks=[CheckResult(code="ENV001", title="env", status=Status.WARNING)])
    assert r.exit_code() == 0


def test_newer_schema_is_refused_with_a_clear_message():
    d = _report().to_dict()
    d["schema_version"] = 99
    with pytest.raises(ValueError, match="newer"):
        Report.from_dict(d)


def test_bad_severity_is_refused():
    with pytest.raises(ValueError, match="unknown severity"):
        Finding("X", "fatal", "m")
