"""`python -m ddpdoctor.tui …`: the same as `ddpdoctor tui …`, without the other commands' imports."""

from __future__ import annotations

import argparse
import sys

from ddpdoctor.commands import tui


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ddpdoctor tui", description=tui.DESCRIPTION)
    tui.add_arguments(parser)
    return tui.run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
