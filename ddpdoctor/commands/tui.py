"""`ddpdoctor tui` (not built yet)."""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    print("ddpdoctor tui: not available yet in this version", file=sys.stderr)
    return 2
