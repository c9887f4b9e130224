"""DDP101 names the pass the epoch loop makes itself, not one in a helper it also calls."""

from pathlib import Path

from ddpdoctor.lint import LintConfig, lint_paths

FIXTURE = Path(__file__).parent / "fixtures" / "DDP101_bad_validate_pass_first.py"


def test_the_training_pass_is_named_not_the_validation_helper():
    (f,) = lint_paths([FIXTURE], LintConfig(select=("DDP101",)), jobs=1)
    assert "iterated every epoch at line 19" in f.message
    assert f.message.rstrip("]").endswith("DDP101_bad_validate_pass_first.py:19")
