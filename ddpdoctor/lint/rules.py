"""The lint rules: script checks from ``checks/`` (ddpdoctor.checks) and user rule files.

A rule module declares CODE, TITLE, KIND = "script", a docstring with the sections
"What it does", "Why is this bad?", "Example", "Use instead", and

    def check(module: ModuleAnalysis) -> Iterable[Finding]

Optionally ``SEVERITY`` ("error" default, "warning", "info") for documentation and SARIF, and
``CONFIDENCE``: "high" (default) for a bug the rule rarely mistakes; "medium" or "low" for rules
that are opinionated or depend on the environment. Only high-confidence rules run by default (as
ruff's defaults are a small safe set); the others are opt-in with --select/--extend-select.
"""

from __future__ import annotations

from functools import lru_cache

from ddpdoctor.registry import CheckSpec, RegistryError, discover

DOC_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead")
# Diagnostics of the engine itself (not a rule module): a file it could not read or parse.
PARSE_CODE = "DDP000"
PARSE_DOC = """DDP000: file could not be linted

## What it does
Reports a file that cannot be decoded (bad bytes for its declared encoding) or parsed (a syntax
error), and an internal error of a rule on a file.

## Why is this bad?
Python would fail to run it too; and a file that cannot be parsed cannot be checked for DDP bugs.

## Example
```python
def main(:
```

## Use instead
Fix the syntax or the encoding declaration.
"""


CONFIDENCES = ("high", "medium", "low")
DEFAULT_CONFIDENCE = "high"  # what runs when nothing is selected


def confidence(spec) -> str:
    return getattr(spec.module, "CONFIDENCE", DEFAULT_CONFIDENCE) if spec is not None else DEFAULT_CONFIDENCE


def on_by_default(spec) -> bool:
    return confidence(spec) == DEFAULT_CONFIDENCE


@lru_cache(maxsize=8)
def script_rules(extra: tuple[str, ...] = ()) -> tuple[CheckSpec, ...]:
    specs = discover(list(extra), kind="script")
    for s in specs:
        if not callable(getattr(s.module, "check", None)):
            raise RegistryError(f"{s.module.__name__}: a script check needs check(module)")
        if confidence(s) not in CONFIDENCES:
            raise RegistryError(f"{s.module.__name__}: CONFIDENCE must be one of {CONFIDENCES}")
    return tuple(specs)


def known_codes(extra: tuple[str, ...] = ()) -> set[str]:
    return {s.code for s in script_rules(extra)} | {PARSE_CODE}


def explain(code: str, extra: tuple[str, ...] = ()) -> str | None:
    code = code.strip().upper()
    if code == PARSE_CODE:
        return PARSE_DOC
    for s in script_rules(extra):
        if s.code == code:
            sev = getattr(s.module, "SEVERITY", "error")
            head = f"{s.code}: {s.title}  (severity: {sev}, confidence: {confidence(s)})"
            if on_by_default(s):
                head += "\nOn by default."
            else:
                head += (
                    f"\nOpt-in (not in the default selection): enable it with\n"
                    f"`--extend-select {s.code}`, or in pyproject.toml under [tool.ddpdoctor.lint]:\n"
                    f'extend-select = ["{s.code}"]'
                )
                why = getattr(s.module, "OPT_IN_BECAUSE", None)
                if why:
                    head += f"\nWhy opt-in: {why}."
            return f"{head}\n\n{s.doc}\n"
    return None
