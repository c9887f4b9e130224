"""The static DDP checker: engine, per-rank interpreter and the API other parts call.

    from ddpdoctor.lint import lint_paths, LintConfig
    findings = lint_paths(["train.py"], LintConfig(select=("DDP3",)))

Pure Python (ast): never imports torch, never imports or runs the code it reads.
"""

from ddpdoctor.lint.analysis import ModuleAnalysis
from ddpdoctor.lint.config import ConfigError, LintConfig, load_config
from ddpdoctor.lint.engine import lint_paths, lint_source
from ddpdoctor.lint.files import LintInputError

__all__ = [
    "ConfigError",
    "LintConfig",
    "LintInputError",
    "ModuleAnalysis",
    "lint_paths",
    "lint_source",
    "load_config",
]
