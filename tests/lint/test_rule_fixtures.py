"""Each rule against its fixtures: DDPxxx_bad.py marks every expected finding with ``# expect: CODE``
on its line; DDPxxx_ok.py must stay quiet for that rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddpdoctor.lint import LintConfig, lint_paths
from ddpdoctor.lint.rules import script_rules

FIXTURES = Path(__file__).parent / "fixtures"
CODES = [s.code for s in script_rules()]
_EXPECT = re.compile(r"#\s*expect:\s*([A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)")


def expected(path: Path, code: str) -> set[tuple[int, str]]:
    out = set()
    for i, line in enumerate(path.read_text().splitlines(), 1):
        m = _EXPECT.search(line)
        if m:
            out |= {(i, c.strip()) for c in m.group(1).split(",") if c.strip() == code}
    return out


def found(path: Path, code: str) -> set[tuple[int, str]]:
    return {(f.location.line, f.code) for f in lint_paths([path], LintConfig(select=(code,)), jobs=1)}


@pytest.mark.parametrize("code", CODES)
def test_bad_fixture_reports_exactly_the_marked_lines(code):
    path = FIXTURES / f"{code}_bad.py"
    assert path.is_file(), f"missing fixture {path.name}"
    for path in sorted(FIXTURES.glob(f"{code}_bad*.py")):  # DDPxxx_bad.py and DDPxxx_bad_<case>.py
        want = expected(path, code)
        assert want, f"{path.name} marks no expected {code}"
        assert found(path, code) == want, path.name


@pytest.mark.parametrize("code", CODES)
def test_correct_fixtures_are_quiet(code):
    paths = sorted(FIXTURES.glob(f"{code}_ok*.py"))
    assert paths, f"missing fixture {code}_ok.py"
    for path in paths:
        assert found(path, code) == set(), path.name


def test_every_rule_documents_the_fixed_sections():
    from ddpdoctor.lint.rules import DOC_SECTIONS

    for spec in script_rules():
        for section in DOC_SECTIONS:
            assert f"## {section}" in spec.doc, f"{spec.code} lacks '## {section}'"
        assert spec.kind == "script"
        assert getattr(spec.module, "SEVERITY", "error") in ("error", "warning", "info")
        # on by default or opt-in: every rule says which (ddpdoctor.lint.rules.CONFIDENCES)
        assert getattr(spec.module, "CONFIDENCE", None) in ("high", "medium", "low"), spec.code


def test_every_opt_in_rule_says_why_and_explain_shows_it():
    from ddpdoctor.lint.rules import explain, on_by_default

    for spec in script_rules():
        if not on_by_default(spec):
            why = getattr(spec.module, "OPT_IN_BECAUSE", "")
            assert why, f"{spec.code} is opt-in and does not say why"
            assert f"Why opt-in: {why}" in explain(spec.code)
