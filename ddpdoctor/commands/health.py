"""`ddpdoctor health`: this node alone, for Slurm's HealthCheckProgram, Prolog and Epilog."""

from __future__ import annotations

import argparse
import os
import socket
import sys

DESCRIPTION = """Check this node alone, with no rendezvous with other nodes: GPUs, NVLink, PCIe, NUMA,
InfiniBand, GPUDirect RDMA, the socket-interface and NCCL variables, then a one-node collective sanity run.
Silent on success. On failure it prints what failed and, when run by slurmd (HealthCheckProgram,
Prolog, Epilog) or with --drain, drains the node: scontrol update NodeName=NODE State=DRAIN
Reason="ddpdoctor: CODE summary". A usage error never drains, nor does a check that could not finish
(exit 2, nagios 3 UNKNOWN)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = p.add_mutually_exclusive_group()
    d.add_argument("--drain", dest="drain", action="store_true", default=None,
                   help="drain this node on failure (default: when run by slurmd, i.e. SLURMD_NODENAME is set)")
    d.add_argument("--no-drain", dest="drain", action="store_false", help="never drain; report only")
    p.add_argument("--node-name", default=None, metavar="NAME",
                   help="this node's Slurm name (default: SLURMD_NODENAME, else the short host name)")
    p.add_argument("--no-collective", action="store_true", help="skip the one-node collective sanity run")
    p.add_argument("--timeout", type=float, default=40.0, metavar="S",
                   help="limit for the whole check in seconds (default 40; slurmd kills a health check at 60)")
    p.add_argument("--root", default="/", help="filesystem root for sysfs (default /)")
    p.add_argument("--verbose", "-v", action="store_true", help="print every check's outcome, also on success")
    from ddpdoctor.commands import fleet_args

    fleet_args.add_output_arguments(p, history=False)


def node_name(args: argparse.Namespace) -> str:
    return args.node_name or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def run(args: argparse.Namespace) -> int:
    from ddpdoctor.commands import fleet_args
    from ddpdoctor.model.fleet.exit_codes import exit_code, outcome

    scheme = args.exit_codes
    if not 0 < args.timeout <= 3600:
        print(f"ddpdoctor health: --timeout must be between 0 and 3600 s, got {args.timeout:g}", file=sys.stderr)
        return exit_code("unknown", scheme)
    try:
        fleet_args.check_output_paths(args)
    except OSError as e:
        print(f"ddpdoctor health: {e}", file=sys.stderr)
        return exit_code("unknown", scheme)
    import time

    from ddpdoctor.core.report import Report
    from ddpdoctor.core.run_info import RunInfo
    from ddpdoctor.model.fleet.health import drain_reason, unfinished
    from ddpdoctor.runtime.node_health import check_node

    name = node_name(args)
    try:
        health = check_node(name, collective=not args.no_collective, timeout_s=args.timeout, root=args.root)
    except Exception as e:  # a fault of ddpdoctor or its install, not of the node: report, never drain
        print(f"ddpdoctor health: could not run: {type(e).__name__}: {e}", file=sys.stderr)
        return exit_code("unknown", scheme)
    report = Report(run=RunInfo(command="health", nodes=[name], nnodes=1, duration_s=round(health.duration_s, 3),
                                 topology={name: health.topology}),
                    versions=health.versions, checks=health.checks, created=time.time())
    result = outcome(report.checks)
    reason = drain_reason(report.checks)
    if reason is None and unfinished(report.checks):
        result = "unknown"  # exit 2 (nagios: 3 UNKNOWN); never a drain
    drain = args.drain if args.drain is not None else bool(os.environ.get("SLURMD_NODENAME"))
    if reason is not None:
        report.run.drain_reason = reason.text()
    if args.verbose or reason is not None or result == "unknown":
        for c in report.checks:
            if args.verbose or c.status.failing:
                print(f"{name}: {c.code} {c.status.value}: {c.summary}", flush=True)
    if reason is not None and drain:
        from ddpdoctor.runtime.slurm_drain import drain_node

        done = drain_node(name, reason.text())
        report.run.drained = done.ok
        if done.ok:
            print(f"{name}: drained: {reason.text()}", flush=True)
        else:
            print(f"ddpdoctor health: could not drain {name}: {done.message}", file=sys.stderr)
    try:
        fleet_args.write_outputs(args, report)
    except OSError as e:
        print(f"ddpdoctor health: {e}", file=sys.stderr)
    return exit_code(result, scheme)
