"""`ddpdoctor profiles`: the hardware profiles (expected bandwidth per link class) — list them, show
one, or validate profile files before using them with --profile."""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = (
    "Hardware profiles give the bandwidth a known system should reach per link class (GB/s, nccl-tests "
    "busbw) and when to warn or fail; `ddpdoctor check` picks one from the hardware it finds, or takes "
    "--profile NAME|FILE. list: the shipped profiles; show NAME|FILE: one in full; validate FILE...: "
    "check profile files (exit 0 valid, 2 invalid or unreadable)."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    ls = sub.add_parser("list", help="the shipped profiles (the default)")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    show = sub.add_parser("show", help="one profile in full, by name or path")
    show.add_argument("name", metavar="NAME|FILE")
    show.add_argument("--json", action="store_true", help="print JSON instead of text")
    val = sub.add_parser("validate", help="validate profile files (or folders of *.yaml)")
    val.add_argument("files", nargs="+", metavar="FILE")


def _fmt(v) -> str:
    return "-" if v is None else f"{v:g}"


def _match_text(profile) -> str:
    m = profile.match
    parts = []
    if m.backend:
        parts.append(m.backend)
    if m.gpu_model:
        parts.append(f"GPU /{m.gpu_model.pattern}/")
    if m.gpus_per_node:
        parts.append(f"{'|'.join(map(str, m.gpus_per_node))} GPU/node")
    if m.nvlink is not None:
        parts.append("NVLink" if m.nvlink else "no NVLink")
    if m.pcie_gen:
        parts.append(f"PCIe Gen{'|'.join(map(str, m.pcie_gen))}")
    if m.nics:
        n = m.nics
        if n.kind == ("none",):
            parts.append("no RDMA NIC")
        else:
            rate = f" {n.rate_Gbps:g} Gb/s" if n.rate_Gbps else ""
            name = f" /{n.name.pattern}/" if n.name else ""
            parts.append(f">={n.min_count} {'|'.join(n.kind)}{rate}{name}")
    return ", ".join(parts) or "(chosen by name only)"


def _list(args, out) -> int:
    import json

    from rich.table import Table

    from ddpdoctor.baselines import list_profiles
    from ddpdoctor.model.profiles.schema import EXPECTED_CLASSES

    profiles = list_profiles()
    if args.json:
        print(json.dumps([p.to_dict() for p in profiles], indent=2))
        return 0
    t = Table(title="Hardware profiles: expected GB/s (1e9 B/s, unidirectional, nccl-tests busbw)")
    t.add_column("name", no_wrap=True)
    t.add_column("system")
    for col in ("p2p\nintra", "p2p\ninter", "all_reduce\nintra", "all_reduce\ninter"):
        t.add_column(col, justify="right")
    for p in profiles:
        e = p.expected_GBps
        t.add_row(p.name, p.description, *(_fmt(e[c]) for c in EXPECTED_CLASSES))
    out.print(t)
    return 0


def _show(args, out) -> int:
    import json

    from rich.table import Table
    from rich.text import Text

    from ddpdoctor.baselines import load_profile
    from ddpdoctor.model.profiles.schema import EXPECTED_CLASSES

    p = load_profile(args.name)
    if args.json:
        print(json.dumps(p.to_dict(), indent=2))
        return 0
    out.print(Text.assemble((p.name, "bold"), f"  {p.description}"))
    out.print(f"from {p.origin}; priority {p.priority}")
    out.print(f"detected on: {_match_text(p)}")
    t = Table(title=f"expected (all_reduce from {p.large_message_B / 2**20:g} MiB up)")
    t.add_column("link class")
    t.add_column("GB/s", justify="right")
    t.add_column(f"warn below ({p.warn_below_pct:g}%)", justify="right")
    t.add_column(f"fail below ({p.fail_below_pct:g}%)", justify="right")
    for cls, v in p.expected_GBps.items():
        if cls not in EXPECTED_CLASSES or v is None:
            t.add_row(cls, _fmt(v), "-", "-")  # no reference, or informational (per_nic)
            continue
        t.add_row(
            cls,
            _fmt(v),
            _fmt(round(v * p.warn_below_pct / 100, 3)),
            _fmt(round(v * p.fail_below_pct / 100, 3)),
        )
    out.print(t)
    out.print("sources:")
    for s in p.sources:
        out.print(Text(f"  - {' '.join(s.split())}"))
    return 0


def _validate(args, out) -> int:
    from pathlib import Path

    from ddpdoctor.baselines import ProfileError, load_file, profile_files
    from ddpdoctor.model.profiles.schema import duplicate_names

    loaded, bad = [], 0
    for arg in args.files:
        files = profile_files(Path(arg)) if Path(arg).is_dir() else [Path(arg)]
        if not files:
            print(f"{arg}: no *.yaml or *.yml files in this folder, expected profile files", file=sys.stderr)
            bad += 1
        for f in files:
            try:
                loaded.append(load_file(f))
            except ProfileError as e:
                print(e, file=sys.stderr)
                bad += 1
    dups = duplicate_names(loaded)
    for e in dups:
        print(e, file=sys.stderr)
    dup_sources = {e.source for e in dups}
    for p in loaded:
        if p.origin not in dup_sources:
            out.print(f"{p.origin}: ok ({p.name})", highlight=False, soft_wrap=True)  # a path is never cut
    return 2 if bad or dups else 0


def run(args: argparse.Namespace) -> int:
    from ddpdoctor.baselines import ProfileError
    from ddpdoctor.report.console import make_console

    out = make_console()
    action = args.action or "list"
    if action == "list" and not hasattr(args, "json"):
        args.json = False
    try:
        return {"list": _list, "show": _show, "validate": _validate}[action](args, out)
    except ProfileError as e:
        print(f"ddpdoctor profiles: {e}", file=sys.stderr)
        return 2
