"""`ddpdoctor check`: launch the checks on every rank through torchrun and print the verdict."""

from __future__ import annotations

import argparse
import sys

from ddpdoctor.commands import recommend_args

DESCRIPTION = """Run the cluster checks on every rank through torchrun (torch.distributed.run, c10d
rendezvous). With no arguments: this machine, one rank per visible GPU on NCCL, or 2 CPU ranks on gloo.
Across nodes run the same command on every node (torchrun semantics) or under `srun`."""


def _codes(text: str) -> list[str]:
    return [c.strip().upper() for c in text.split(",") if c.strip()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("launch (torchrun semantics)")
    g.add_argument("--nodes", type=int, default=None, help="number of nodes (default 1, or Slurm's)")
    g.add_argument("--nproc-per-node", type=int, default=None,
                   help="ranks per node (default: one per visible GPU; 2 on CPU)")
    g.add_argument("--node-rank", type=int, default=None, help="this node's rank; 0 hosts the rendezvous")
    g.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT",
                   help="rendezvous endpoint, the same on every node (default: a free port on this machine)")
    g.add_argument("--rdzv-id", default=None, help="rendezvous id (default: ddpdoctor, or the Slurm job id)")
    g.add_argument("--rdzv-timeout", type=float, default=60.0, metavar="S",
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
    s.add_argument("--budget-scale", type=float, default=1.0, help="multiply every check's time budget")
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
    o = p.add_argument_group("output")
    o.add_argument("--json", default=None, metavar="PATH", help="write the JSON report here")
    o.add_argument("--junit", default=None, metavar="PATH", help="write JUnit XML here (CI gating)")
    o.add_argument("--bad-nodes", default=None, metavar="FILE",
                   help="write the nodes the verdict blames as one Slurm hostlist (node[2,5]), empty when "
                   "none: srun/sbatch --exclude=$(cat FILE)")
    o.add_argument("--events", default=None, metavar="PATH", help="write the JSON-lines event stream here")
    o.add_argument("--quiet", "-q", action="store_true", help="no live progress")
    o.add_argument("--verbose", "-v", action="store_true", help="show info findings and torchrun's log")
    o.add_argument("--write-config", default=None, metavar="FILE",
                   help="write the worker config for your own torchrun and exit (see README)")


def run(args: argparse.Namespace) -> int:
    from ddpdoctor.runtime.launcher import run_check

    try:
        return run_check(args)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("ddpdoctor check: interrupted", file=sys.stderr)
        return 130
