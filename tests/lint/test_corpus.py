"""Realistic training scripts: the correct ones (good_*.py) stay quiet under every rule; the buggy
ones (bad_*.py) report exactly the lines marked ``# expect: CODE[, CODE]``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddpdoctor.lint import LintConfig, lint_paths

EVERY_RULE = LintConfig(select=("DDP",))  # the opt-in rules too

CORPUS = Path(__file__).parent / "corpus"
_EXPECT = re.compile(r"#\s*expect:\s*([A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)")


@pytest.mark.parametrize("path", sorted(CORPUS.glob("good_*.py")), ids=lambda p: p.name)
def test_correct_scripts_have_no_findings(path):
    found = lint_paths([path], EVERY_RULE, jobs=1)
    assert found == [], "\n".join(f"{f.location.line}: {f.code} {f.message}" for f in found)


@pytest.mark.parametrize("path", sorted(CORPUS.glob("bad_*.py")), ids=lambda p: p.name)
def test_buggy_scripts_report_the_marked_lines(path):
    want = set()
    for i, line in enumerate(path.read_text().splitlines(), 1):
        m = _EXPECT.search(line)
        if m:
            want |= {(i, c.strip()) for c in m.group(1).split(",")}
    got = {(f.location.line, f.code) for f in lint_paths([path], EVERY_RULE, jobs=1)}
    assert got == want
