"""The static DDP checker: files, config, the engine that runs the script checks, cache, output formats,
and the API other parts call. What the checks read (the per-rank interpreter) is ddpdoctor.script.

    from ddpdoctor.lint import lint_paths, LintConfig
    findings = lint_paths(["train.py"], LintConfig(select=("DDP3",)))

Pure Python (ast): never imports torch, never imports or runs the code it reads.
"""

from ddpdoctor.lint.config import CONFIRMED_AT_RUN_TIME, ConfigError, LintConfig, load_config
from ddpdoctor.lint.engine import lint_paths, lint_source
from ddpdoctor.lint.files import LintInputError

__all__ = [
    "CONFIRMED_AT_RUN_TIME",
    "ConfigError",
    "LintConfig",
    "LintInputError",
    "lint_paths",
    "lint_source",
    "load_config",
]
