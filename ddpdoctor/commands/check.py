"""`ddpdoctor check`: launch the checks on every rank through torchrun and print the verdict."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from ddpdoctor.commands import fleet_args, recommend_args
from ddpdoctor.commands.flags import codes as _codes
from ddpdoctor.commands.flags import count as _count
from ddpdoctor.commands.flags import rank as _rank
from ddpdoctor.commands.flags import scale as _scale
from ddpdoctor.commands.flags import seconds as _seconds
from ddpdoctor.core.check_run import CheckRun

if TYPE_CHECKING:
    from rich.console import Console

    from ddpdoctor.runtime.launcher import Prepared

DESCRIPTION = """Run the cluster checks on every rank through torchrun (torch.distributed.run, c10d
rendezvous). With no arguments: this machine, one rank per visible GPU on NCCL, or 2 CPU ranks on gloo.
Across nodes run the same command on every node (torchrun semantics) or under `srun`."""


def _seconds_or_zero(text: str) -> float:
    return 0.0 if text.strip() in ("0", "0.0") else _seconds(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("launch (torchrun semantics)")
    g.add_argument("--nodes", type=_count, default=None, help="number of nodes (default 1, or Slurm's)")
    g.add_argument("--nproc-per-node", type=_count, default=None,
                   help="ranks per node (default: one per visible GPU; 2 on CPU)")
    g.add_argument("--node-rank", type=_rank, default=None, help="this node's rank; 0 hosts the rendezvous")
    g.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT",
                   help="rendezvous endpoint, the same on every node (default: a free port on this machine)")
    g.add_argument("--rdzv-id", default=None, help="rendezvous id (default: ddpdoctor, or the Slurm job id)")
    g.add_argument("--rdzv-timeout", type=_seconds, default=60.0, metavar="S",
                   help="seconds to wait for every node to join (default 60)")
    g.add_argument("--local-addr", default=None, metavar="ADDR",
                   help="this node's address as the other nodes reach it (default: the one routing to the endpoint)")
    g.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    s = p.add_argument_group("what to run")
    s.add_argument("--list", action="store_true", help="list the checks and exit")
    s.add_argument("--select", type=_codes, default=None, metavar="CODES", help="only these codes/prefixes (BW,COL001)")
    s.add_argument("--skip", type=_codes, default=None, metavar="CODES", help="skip these codes/prefixes")
    s.add_argument("--suite", default="quick", help="suite to run: quick (default) or full")
    s.add_argument("--checks-path", action="append", default=[], metavar="PATH",
                   help="extra check file or folder (repeatable)")
    s.add_argument("--budget-scale", type=_scale, default=1.0, help="multiply every check's time budget")
    s.add_argument("--script", default=None, metavar="PATH", help="also lint this training script")
    b = p.add_argument_group("bandwidth (BW001, P2P001)")
    b.add_argument("--max-size", default=None, metavar="SIZE",
                   help="largest collective size in the sweep, e.g. 64M (default 16M on gloo, 256M on NCCL)")
    b.add_argument("--p2p-size", default=None, metavar="SIZE",
                   help="point-to-point message size (default 8M on gloo, 256M on NCCL)")
    b.add_argument("--p2p-mode", choices=("pairs", "sequential"), default=None,
                   help="pairs: disjoint pairs measured at once, n-1 rounds (default); sequential: one pair at "
                   "a time, contention-free")
    b.add_argument("--p2p-plan", choices=("auto", "full", "rails"), default=None,
                   help="full: every ordered pair; rails: full within nodes, across nodes same local rank "
                   "only; auto (default): full up to 64 ranks")
    s.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="option passed to the checks (e.g. max_size=16777216, p2p_mode=sequential)")
    recommend_args.add_arguments(p)
    fleet_args.add_output_arguments(p)
    o = p.add_argument_group("output")
    o.add_argument("--json", default=None, metavar="PATH", help="write the JSON report here")
    o.add_argument("--junit", default=None, metavar="PATH", help="write JUnit XML here (CI gating)")
    o.add_argument("--bad-nodes", default=None, metavar="FILE",
                   help="write the nodes the verdict blames as one Slurm hostlist (node[2,5]), empty when "
                   "none: srun/sbatch --exclude=$(cat FILE)")
    o.add_argument("--events", default=None, metavar="PATH", help="write the JSON-lines event stream here")
    o.add_argument("--quiet", "-q", action="store_true", help="no live progress")
    o.add_argument("--verbose", "-v", action="store_true", help="show info findings and torchrun's log")
    o.add_argument("--drain", action="store_true",
                   help="under srun: drain (scontrol) the nodes the verdict blames, after measuring each again "
                   "against a node that passed")
    o.add_argument("--confirm-delay", type=_seconds_or_zero, default=0.0, metavar="S",
                   help="with --drain: wait S seconds before the confirmation pass, so a passing burst is over")
    o.add_argument("--write-config", default=None, metavar="FILE",
                   help="write the worker config for your own torchrun and exit (see README)")


def parse_options(items: list[str]) -> dict[str, Any]:
    """--option KEY=VALUE pairs; a VALUE that reads as JSON is taken as such (numbers, lists)."""
    from ddpdoctor.runtime.launch_plan import LaunchError

    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise LaunchError(f"--option {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = json.loads(v)
        except ValueError:
            out[k.strip()] = v
        except RecursionError:
            raise LaunchError(f"--option {k.strip()}: value nested too deeply") from None
    return out


def check_options(args: argparse.Namespace) -> dict[str, Any]:
    """The checks' options: --option KEY=VALUE pairs, then the dedicated flags (validated here, so a
    bad value ends the run before anything is launched)."""
    from ddpdoctor.check_options import validate
    from ddpdoctor.model.bandwidth.sizes import parse_size
    from ddpdoctor.registry import discover
    from ddpdoctor.runtime.launch_plan import LaunchError

    # Every key must be one a check declares (OPTIONS), every value one its parser takes: a typo or a bad
    # value is refused here, naming the valid options, not on every rank after the launch.
    out = validate(parse_options(args.option), discover(args.checks_path, kind="cluster"))
    for flag, key in (("max_size", "max_size"), ("p2p_size", "p2p_size")):
        value = getattr(args, flag, None)
        if value is not None:
            try:
                out[key] = parse_size(value)
            except ValueError as e:
                raise LaunchError(f"--{flag.replace('_', '-')}: {e}") from None
    for flag in ("p2p_mode", "p2p_plan"):
        if getattr(args, flag, None):
            out[flag] = getattr(args, flag)
    return out


def check_flags(args: argparse.Namespace) -> tuple[str, ...]:
    """The flags that steer what the checks measure, as given (a --drain confirmation run repeats them)."""
    out: list[str] = []
    for flag in ("max_size", "p2p_size", "p2p_mode", "p2p_plan"):
        if getattr(args, flag, None):
            out += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    for item in args.option:
        out += ["--option", item]
    return tuple(out)


def check_run(args: argparse.Namespace) -> CheckRun:
    """The run the command line asks for, every option validated once (exit 2 on error)."""
    return CheckRun(
        nodes=args.nodes, nproc_per_node=args.nproc_per_node, node_rank=args.node_rank,
        rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id, rdzv_timeout_s=args.rdzv_timeout,
        local_addr=args.local_addr, backend=args.backend,
        select=tuple(args.select) if args.select is not None else None,
        skip=tuple(args.skip) if args.skip is not None else None,
        suite=args.suite, checks_path=tuple(args.checks_path), budget_scale=args.budget_scale, script=args.script,
        options=check_options(args), profile=recommend_args.profile_option(args),
        recommend=recommend_args.recommend_options(args), check_flags=check_flags(args),
        json=args.json, junit=args.junit, bad_nodes=args.bad_nodes, events=args.events,
        write_config=args.write_config, metrics=args.metrics, k8s_labels=tuple(args.k8s_labels),
        valid_for_s=args.valid_for, history=args.history,
        quiet=args.quiet, verbose=args.verbose, drain=args.drain, confirm_delay_s=args.confirm_delay,
    )


def list_checks() -> int:
    from rich.table import Table
    from rich.text import Text

    from ddpdoctor.registry import discover
    from ddpdoctor.report.console import make_console

    table = Table(title="ddpdoctor checks")
    for col in ("code", "kind", "title", "budget", "suites"):
        table.add_column(col, no_wrap=col in ("code", "kind", "budget"))
    for s in discover():
        what = Text(s.title)
        if s.blurb:  # what the code and the title do not already say
            what.append(f"\n{s.blurb}", style="dim")
        table.add_row(Text(s.code), s.kind, what, f"{s.budget_s:g} s" if s.kind == "cluster" else "",
                      ",".join(s.suites) if s.kind == "cluster" else "")
    make_console().print(table)
    return 0


OUTPUT_FLAGS = ("json", "junit", "bad_nodes", "events", "write_config")


def check_outputs(args: argparse.Namespace) -> None:
    """Every output path, before anything starts (boundary/outputs.py); `--events -` is stdout."""
    from ddpdoctor.boundary.outputs import check_output

    seen: dict[str, str] = {}
    for key in OUTPUT_FLAGS:
        path = getattr(args, key, None)
        if path is None or (key == "events" and path == "-"):
            continue
        flag = f"--{key.replace('_', '-')}"
        check_output(path, flag)
        real = os.path.realpath(path)
        if real in seen:
            from ddpdoctor.boundary.outputs import OutputError

            raise OutputError(f"{flag} {path}: the same file as {seen[real]}; give each output its own file")
        seen[real] = f"{flag} {path}"


def run(args: argparse.Namespace) -> int:
    from ddpdoctor.boundary.outputs import OutputError
    from ddpdoctor.boundary.processes import exit_status
    from ddpdoctor.runtime.launch_plan import LaunchError

    if args.list:
        return list_checks()
    from ddpdoctor.check_options import OptionError
    from ddpdoctor.model.fleet.exit_codes import translate
    from ddpdoctor.registry import RegistryError

    try:
        check_outputs(args)
        crun = check_run(args)
        fleet_args.check_output_paths(args)
        if args.drain and "SLURM_JOB_ID" not in os.environ:
            raise LaunchError("--drain drains Slurm nodes: run it under srun (srun --ntasks-per-node=1 "
                              "ddpdoctor check --drain)")
    except (LaunchError, OptionError, RegistryError, recommend_args.OptionError, OutputError) as e:
        print(f"ddpdoctor check: {e}", file=sys.stderr)
        return translate(2, args.exit_codes)
    from ddpdoctor.runtime.launcher import RunError

    try:
        code, warned = execute(crun)
        return translate(code, args.exit_codes, warned=warned)
    except RunError as e:
        print(f"ddpdoctor check: {e}", file=sys.stderr)
        return translate(2, args.exit_codes)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt as e:  # SIGINT, or SIGTERM/SIGHUP (boundary/processes.Interrupted)
        print(f"ddpdoctor check: interrupted ({e or 'SIGINT'}); torchrun and its ranks were ended",
              file=sys.stderr)
        return exit_status(e)


def execute(crun: CheckRun) -> tuple[int, bool]:
    """Run it (or write the config for the user's own torchrun); the default-scheme exit code and
    whether the run only warned."""
    from ddpdoctor.report.console import make_console
    from ddpdoctor.runtime.launcher import prepare, run_check

    out = make_console()
    if crun.write_config:
        return write_config(crun, prepare(crun), out), False
    from ddpdoctor.commands.check_verdict import conclude

    return conclude(crun, run_check(crun, out), out)


def write_config(crun: CheckRun, prep: Prepared, out: Console) -> int:
    """--write-config FILE: the worker config for the user's own torchrun, and how to run it and read
    the verdict."""
    from ddpdoctor.boundary.outputs import OutputError, write_output
    from ddpdoctor.runtime.launcher import own_torchrun_config

    cfg, report = own_torchrun_config(prep)
    try:
        write_output(crun.write_config, json.dumps(cfg.to_dict(), indent=1) + "\n", "--write-config")
    except OutputError as e:
        print(f"ddpdoctor check: {e}", file=sys.stderr)
        return 2
    out.print(f"wrote {crun.write_config}; run on every node:\n  torchrun --nnodes N --nproc-per-node "
              f"{prep.plan.nproc_per_node} --rdzv-backend c10d --rdzv-endpoint HOST:PORT -m ddpdoctor.runtime.worker "
              f"--config {crun.write_config}\nthen the verdict (exit code 0, 1 or 2 as `ddpdoctor check`):\n"
              f"  ddpdoctor report show {report}", markup=False, highlight=False, soft_wrap=True)
    return 0
