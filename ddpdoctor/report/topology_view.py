"""Rich renderables for a node's topology and a topology diagnosis (``ddpdoctor topo``)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ddpdoctor.model.topo_analysis import gdr_verdicts, nvlink_matrix, rails
from ddpdoctor.model.topology import NodeTopology, format_cpulist
from ddpdoctor.report.model import CheckResult, Severity

_SEV_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
_PATH_STYLE = {"X": "dim", "PIX": "green", "PXB": "green", "PHB": "yellow", "NODE": "yellow", "SYS": "red"}


def _row(t: Table, *cells) -> None:
    """Cells as plain Text: names and messages come from the machine or user files, never markup."""
    t.add_row(*(c if isinstance(c, Text) else Text(str(c)) for c in cells))


def _link(cur, mx, fmt: str) -> str:
    if cur is None and mx is None:
        return "?"
    if cur is None:
        return fmt.format(mx) + " max"
    return fmt.format(cur) if cur == mx or mx is None else f"{fmt.format(cur)}/{fmt.format(mx)}"


def gpu_table(node: NodeTopology) -> Table:
    t = Table(title="GPUs", title_justify="left")
    for col in (
        "GPU",
        "model",
        "bus id",
        "memory (MiB)",
        "NUMA",
        "CPUs",
        "PCIe gen",
        "PCIe width",
        "NVLinks up",
        "ECC unc.",
    ):
        t.add_column(col)
    for g in node.gpus:
        up = f"{sum(x.active for x in g.nvlinks)}/{len(g.nvlinks)}" if g.nvlinks else "-"
        _row(
            t,
            str(g.index),
            g.name or "?",
            g.busid or "?",
            str(g.memory_MiB or "?"),
            "?" if g.numa_node is None else str(g.numa_node),
            format_cpulist(g.cpu_affinity) or "?",
            _link(g.pcie.cur_gen, g.pcie.max_gen, "Gen{}"),
            _link(g.pcie.cur_width, g.pcie.max_width, "x{}"),
            up,
            "?" if g.ecc_uncorrected_volatile is None else str(g.ecc_uncorrected_volatile),
        )
    return t


def path_matrix(node: NodeTopology) -> Table:
    labels = [g.label for g in node.gpus] + [n.name for n in node.nics]
    t = Table(
        title="Paths (nvidia-smi topo -m words: NV# NVLinks, PIX/PXB PCIe switch, PHB/NODE host "
        "bridge, SYS across sockets)",
        title_justify="left",
    )
    t.add_column("")
    for lab in labels:
        t.add_column(lab, justify="center")
    for a in labels:
        cells = []
        for b in labels:
            p = node.path(a, b) or "?"
            cells.append(Text(p, style="bold green" if p.startswith("NV") else _PATH_STYLE.get(p, "")))
        _row(t, a, *cells)
    return t


def nvlink_table(node: NodeTopology) -> Table:
    m = nvlink_matrix(node)
    t = Table(title="NVLink matrix (active links per GPU pair)", title_justify="left")
    t.add_column("")
    for lab in m["labels"]:
        t.add_column(lab, justify="right")
    for lab, row in zip(m["labels"], m["values"]):
        _row(t, lab, *("X" if v is None else str(v) for v in row))
    return t


def nic_table(node: NodeTopology) -> Table:
    rail_of: dict[str, list[str]] = {}
    for r in rails(node):
        if r.nic:
            rail_of.setdefault(r.nic, []).append(f"GPU{r.gpu} ({r.path})")
    t = Table(title="NICs and rails", title_justify="left")
    for col in ("NIC", "kind", "type", "rate (Gb/s)", "ports", "bus id", "NUMA", "netdev", "nearest GPUs"):
        t.add_column(col)
    for n in node.nics:
        ports = ", ".join(f"{p.port}:{p.state}/{p.phys_state}" for p in n.ports) or "-"
        _row(
            t,
            n.name,
            n.kind,
            n.hca_type or "-",
            f"{n.rate_gbps:g}" if n.rate_gbps else "?",
            ports,
            n.busid or "?",
            "?" if n.numa_node is None else str(n.numa_node),
            ",".join(n.netdevs) or "-",
            ", ".join(rail_of.get(n.name, [])) or "-",
        )
    return t


def gdr_table(node: NodeTopology) -> Table:
    t = Table(title="GPUDirect RDMA (as NCCL decides it)", title_justify="left")
    for col in ("GPU", "NIC", "path", "GDR", "reason"):
        t.add_column(col)
    for v in gdr_verdicts(node):
        verdict = {True: Text("on", "green"), False: Text("off", "red"), None: Text("?", "yellow")}[v.enabled]
        _row(t, str(v.gpu), v.nic or "-", v.path or "-", verdict, v.reason)
    return t


def findings_view(results: list[CheckResult]) -> Table:
    t = Table(title="Findings", title_justify="left")
    for col in ("check", "status", "severity", "finding"):
        t.add_column(col)
    for r in results:
        if not r.findings:
            _row(t, r.code, r.status.value, "", r.summary)
        for f in r.findings:
            _row(
                t,
                r.code,
                r.status.value,
                Text(f.severity.value, _SEV_STYLE[f.severity]),
                f.message + (f"\n  hint: {f.hint}" if f.hint else ""),
            )
    return t


def node_view(node: NodeTopology, results: list[CheckResult]) -> RenderableType:
    head = Text.assemble(
        ("host ", "bold"),
        node.hostname or "?",
        "  ",
        ("source ", "bold"),
        node.source,
        "  ",
        ("driver ", "bold"),
        node.driver_version or "?",
        "  ",
        ("CUDA ", "bold"),
        node.cuda_driver_version or "?",
    )
    parts: list[RenderableType] = [head]
    if node.no_gpu_reason:
        parts.append(Text(node.no_gpu_reason, "yellow"))
    if node.gpus:
        parts += [gpu_table(node), path_matrix(node)]
        if any(v for row in nvlink_matrix(node)["values"] for v in row if v):
            parts.append(nvlink_table(node))
    if node.nics:
        parts.append(nic_table(node))
    if node.gpus and node.nics:
        parts.append(gdr_table(node))
    pm = node.peermem
    if pm.probed:
        parts.append(
            Text(f"peer memory: {', '.join(pm.found) if pm.found else 'missing'}; kernel {pm.kernel or '?'}")
        )
    for note in node.notes:
        parts.append(Text(f"note: {note}", "dim"))
    parts.append(findings_view(results))
    return Group(*parts)
