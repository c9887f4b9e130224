"""`ddpdoctor lint`: statically check training scripts for DDP bugs (ruff-style)."""

from __future__ import annotations

import argparse
import sys

from ddpdoctor.commands.flags import codes as _codes
from ddpdoctor.commands.flags import count

DESCRIPTION = (
    "Statically check PyTorch DDP training scripts: each rank's control flow is simulated for world "
    "sizes 2..8 to find divergent collectives, p2p deadlocks, sampler, launch, checkpoint and "
    "performance bugs. Exit codes: 0 clean, 1 findings, 2 could not run."
)




def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", help="files or folders to lint (default: .)")
    p.add_argument(
        "--select", type=_codes, help="only these codes or prefixes, comma-separated (DDP3,DDP101)"
    )
    p.add_argument("--ignore", type=_codes, help="skip these codes or prefixes")
    p.add_argument("--extend-select", type=_codes, help="add these codes to the selection")
    p.add_argument(
        "--output-format",
        choices=("text", "json", "sarif", "github"),
        default=None,
        help="text (default), json, sarif or github (workflow annotations)",
    )
    p.add_argument("--world-sizes", help="world sizes the per-rank interpreter simulates, e.g. 2-8 or 2,4,8")
    p.add_argument("--explain", metavar="CODE", help="print a rule's documentation and exit")
    p.add_argument("--config", metavar="PYPROJECT", help="pyproject.toml to read [tool.ddpdoctor] from")
    p.add_argument("--isolated", action="store_true", help="ignore pyproject.toml settings")
    p.add_argument("--jobs", "-j", type=count, help="worker processes (default: one per core)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the result cache")
    p.add_argument(
        "--cache-dir", default=".ddpdoctor_cache", help="result cache folder (default: .ddpdoctor_cache)"
    )
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even with findings")
    p.add_argument(
        "--rules",
        action="append",
        default=[],
        metavar="PATH",
        help="extra rule files or folders (script checks)",
    )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ddpdoctor.lint import ConfigError, LintInputError, lint_paths, load_config
    from ddpdoctor.lint.config import find_pyproject, parse_world_sizes
    from ddpdoctor.lint.output import render
    from ddpdoctor.lint.rules import explain, known_codes, script_rules
    from ddpdoctor.registry import RegistryError

    extra = tuple(args.rules)
    try:
        if args.explain:
            text = explain(args.explain, extra)
            if text is None:
                print(f"ddpdoctor lint: unknown rule code {args.explain!r}", file=sys.stderr)
                return 2
            print(text, end="")
            return 0
        paths = args.paths or ["."]
        if args.isolated:
            pyproject = None
        elif args.config:
            pyproject = Path(args.config)
            if not pyproject.is_file():
                print(f"ddpdoctor lint: {pyproject}: no such config file", file=sys.stderr)
                return 2
        else:
            pyproject = find_pyproject(Path(paths[0]))
        config = load_config(pyproject)
        known = known_codes(extra)
        for flag in ("select", "ignore", "extend_select"):
            for code in getattr(args, flag) or []:
                if not any(k.startswith(code) for k in known):
                    raise ConfigError(
                        f"--{flag.replace('_', '-')}: unknown rule code {code!r}; see --explain"
                    )
        config = config.with_overrides(
            select=tuple(args.select) if args.select else None,
            ignore=tuple(args.ignore) if args.ignore else None,
            extend_select=tuple(args.extend_select) if args.extend_select else None,
            world_sizes=parse_world_sizes(args.world_sizes) if args.world_sizes else None,
        )
        if args.jobs is not None and args.jobs < 1:
            raise ConfigError("--jobs must be at least 1")
        findings = lint_paths(
            paths,
            config,
            jobs=args.jobs,
            extra_rules=extra,
            cache_dir=None if args.no_cache else args.cache_dir,
        )
        fmt = args.output_format or "text"
        sys.stdout.write(render(findings, fmt, script_rules(extra)))
    except (ConfigError, LintInputError, RegistryError) as e:
        print(f"ddpdoctor lint: {e}", file=sys.stderr)
        return 2
    from ddpdoctor.lint.engine import is_budget_note

    failing = [f for f in findings if not is_budget_note(f)]
    return 1 if failing and not args.exit_zero else 0
