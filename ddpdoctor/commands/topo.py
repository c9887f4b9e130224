"""`ddpdoctor topo`: this node's hardware topology with verdicts, a JSON snapshot of it, or a cluster
diagnosis built offline from several snapshots."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DESCRIPTION = (
    "Print this node's hardware topology (GPUs, NVLink matrix, PCIe, NUMA, InfiniBand/RoCE NICs and rails, "
    "GPUDirect RDMA) with findings. --save writes a snapshot; --from diagnoses a cluster from snapshots."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default="/", help="filesystem root for sysfs/procfs (default /); not read when "
                   "a topology file is given")
    p.add_argument(
        "--nvidia-smi-topo", metavar="FILE", help="use this `nvidia-smi topo -m` output for GPUs and paths"
    )
    p.add_argument("--nccl-topo", metavar="FILE", help="use this NCCL topology XML (NCCL_TOPO_FILE / dump)")
    p.add_argument(
        "--ibstat", metavar="FILE", help="use this `ibstat` or `ibstatus` output for the NICs' ports"
    )
    p.add_argument("--hostname", help="name the node (default: this host's name)")
    p.add_argument("--save", metavar="FILE", help="write the node's topology snapshot (JSON) to FILE")
    p.add_argument(
        "--json",
        action="store_true",
        help="print JSON: the snapshot, or with --from the report, instead of tables",
    )
    p.add_argument(
        "--from",
        "--snapshots",
        dest="snapshots",
        nargs="+",
        metavar="SNAPSHOT",
        help="diagnose a cluster offline from saved snapshots (one per node) or ddpdoctor check reports",
    )


def _read(path: str) -> str:
    from ddpdoctor.boundary.inputs import read_text

    return read_text(path, "topology file")  # InputError is a ValueError naming the path


def build_node(args: argparse.Namespace):
    """The node from the machine, or from a user's topology file alone: a file describes another
    machine, so nothing of this one (interfaces, kernel, peer memory, NCCL variables) is mixed in."""
    if args.nvidia_smi_topo or args.nccl_topo:
        node = _from_file(args)
        node.hostname = args.hostname or ""
    else:
        from ddpdoctor.probes.collect import collect_node

        node = collect_node(root=args.root, hostname=args.hostname)
    if args.ibstat:
        from ddpdoctor.probes.ibstat import parse_ib_tool_output

        _merge_nics(node, parse_ib_tool_output(_read(args.ibstat)))
    return node


def _from_file(args):
    if args.nvidia_smi_topo and args.nccl_topo:
        raise ValueError("give --nvidia-smi-topo or --nccl-topo, not both")
    if args.nvidia_smi_topo:
        from ddpdoctor.probes.smi_topo import parse_topo_matrix, topo_to_node

        return topo_to_node(
            parse_topo_matrix(_read(args.nvidia_smi_topo)),
            source=f"nvidia-smi topo -m: {args.nvidia_smi_topo}",
        )
    from ddpdoctor.probes.nccl_xml import nccl_to_node, parse_nccl_topo

    return nccl_to_node(parse_nccl_topo(_read(args.nccl_topo)), source=f"NCCL topology XML: {args.nccl_topo}")


def _merge_nics(node, found) -> None:
    """Port facts from sysfs/ibstat onto NICs the file named; NICs the file did not name are added."""
    by_name = {n.name: n for n in node.nics}
    for f in found:
        mine = by_name.get(f.name)
        if mine is None:
            node.nics.append(f)
            continue
        mine.ports, mine.hca_type, mine.fw_ver, mine.rdma = f.ports, f.hca_type, f.fw_ver, True
        mine.netdevs = mine.netdevs or f.netdevs


def _load_snapshots(paths: list[str]):
    """Snapshots (``--save`` files), or ddpdoctor check reports: GPU001 keeps each node's snapshot."""

    from ddpdoctor.model.topology.node import NodeTopology
    from ddpdoctor.report.io import read_json

    nodes = []
    for p in paths:
        doc = read_json(p, "topology snapshot")  # a ValueError naming the file when it is not JSON
        try:
            docs = _snapshots_in_report(doc) if isinstance(doc, dict) and "schema_version" in doc else [doc]
        except ValueError as e:
            raise ValueError(f"{p}: {e}") from None
        if not docs:
            raise ValueError(f"{p}: a report without GPU001 topology data (was GPU001 run, on GPUs?)")
        try:
            nodes.extend(NodeTopology.from_dict(d) for d in docs)
        except ValueError as e:
            raise ValueError(f"{p}: {e}") from None
    return nodes


def _snapshots_in_report(doc: dict) -> list[dict]:
    from ddpdoctor.core.report import Report
    from ddpdoctor.model.topology.payloads import TopologyPayload

    gpu = Report.from_dict(doc).check("GPU001")  # a ValueError naming the field when the report is malformed
    return list(TopologyPayload.from_json(gpu.data).snapshots().values()) if gpu is not None else []


def run(args: argparse.Namespace) -> int:
    import json

    from ddpdoctor.core.report import Report
    from ddpdoctor.core.run_info import RunInfo
    from ddpdoctor.report.console import make_console
    from ddpdoctor.runtime.topo_offline import diagnose

    out = make_console()
    try:
        if args.snapshots:
            if args.save or args.nvidia_smi_topo or args.nccl_topo or args.ibstat:
                raise ValueError("--from diagnoses saved snapshots; it takes no --save or input files")
            nodes = _load_snapshots(args.snapshots)
            results = diagnose(nodes)
            report = Report(
                checks=results, run=RunInfo(source="topology snapshots", nodes=[n.hostname for n in nodes])
            )
            if args.json:
                print(json.dumps(report.to_dict(), indent=2))
            else:
                from rich.text import Text

                from ddpdoctor.report.topology_view import findings_view

                out.print(
                    Text.assemble(
                        ("Cluster topology diagnosis", "bold"),
                        f" from {len(nodes)} snapshot(s): ",
                        ", ".join(n.hostname for n in nodes),
                    )
                )
                out.print(findings_view(results))
            return report.exit_code()
        node = build_node(args)
        results = diagnose([node])
    except ValueError as e:
        print(f"ddpdoctor topo: {e}", file=sys.stderr)
        return 2
    if args.save:
        try:
            Path(args.save).write_text(json.dumps(node.to_dict(), indent=2) + "\n")
        except OSError as e:
            print(f"ddpdoctor topo: cannot write {args.save}: {e.strerror or e}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(node.to_dict(), indent=2))
    else:
        from rich.text import Text

        from ddpdoctor.report.topology_view import node_view

        out.print(node_view(node, results))
        if args.save:
            out.print(Text(f"snapshot written to {args.save}"))
    return 1 if any(r.status.failing for r in results) else 0
