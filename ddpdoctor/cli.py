"""The ``ddpdoctor`` command line. Startup imports only argparse and the light command modules;
torch, textual and friends are imported inside the command that needs them."""

from __future__ import annotations

import argparse
import importlib
import sys

from ddpdoctor import __version__

# name -> (module under ddpdoctor.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("check", "run the cluster checks on every rank through torchrun"),
    "lint": ("lint", "statically check a training script for DDP bugs"),
    "watch": ("watch", "run a training job unchanged; on a hang or crash: which rank, operation and line"),
    "hang": ("hang", "diagnose a hung or crashed job from saved evidence (Flight Recorder, stacks)"),
    "tui": ("tui", "the interactive terminal app: live checks, heatmaps, recommendations"),
    "report": ("report", "re-render or convert a saved report"),
    "recommend": ("recommend", "recompute recommendations from a saved report (another model, layout, profile)"),
    "import": ("import_output", "judge nccl-tests, nvbandwidth and perftest output you already have against a profile"),
    "health": ("health", "check this node alone for Slurm's HealthCheckProgram/Prolog; drains it on failure"),
    "diff": ("diff", "what changed between two reports (or the last two in a --history folder)"),
    "topo": ("topo", "print this node's hardware topology (GPUs, NVLink, PCIe, NUMA, NICs)"),
    "profiles": ("profiles", "list, show or validate hardware profiles (expected bandwidth per link class)"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser, with the options of ``command`` only: just its module is imported (the others are
    listed by name and help, all the top-level --help shows); every other command module would cost
    start-up time (tens of ms) for nothing."""
    parser = argparse.ArgumentParser(
        prog="ddpdoctor",
        description="Diagnose and tune PyTorch DistributedDataParallel clusters and training scripts.",
        epilog="Exit codes: 0 nothing failed, 1 a check or lint finding failed, 2 ddpdoctor could not run.",
    )
    parser.add_argument("--version", action="version", version=f"ddpdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (modname, help_text) in COMMANDS.items():
        if name != command:
            sub.add_parser(name, help=help_text)
            continue
        mod = importlib.import_module(f"ddpdoctor.commands.{modname}")
        p = sub.add_parser(name, help=help_text, description=getattr(mod, "DESCRIPTION", help_text))
        mod.add_arguments(p)
        p.set_defaults(_command_module=mod)
    return parser


def named_command(argv: list[str]) -> str | None:
    """The command argv names: its first word, since the only top-level options (--help, --version)
    take no value; None when that is not a command (argparse then says so with the full parser)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(named_command(argv))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from ddpdoctor.boundary.processes import exit_status, signals_raise

    try:
        with signals_raise():  # SIGTERM and SIGHUP end a command as Ctrl-C does: finally blocks run
            return int(args._command_module.run(args) or 0)
    except KeyboardInterrupt as e:
        print(f"ddpdoctor {args.command}: interrupted ({e or 'SIGINT'})", file=sys.stderr)
        return exit_status(e)


if __name__ == "__main__":
    sys.exit(main())
