"""`python -m ddpdoctor.tui …`: the same as `ddpdoctor tui …`.

An entry point like ddpdoctor/cli.py, so it goes through the CLI rather than importing a command
module: the tui package itself stays below the command layer (tests/test_layers.py)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from ddpdoctor.cli import main as cli_main

    return cli_main(["tui", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
