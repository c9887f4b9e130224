"""Rich renderables for a node's topology and a topology diagnosis (``ddpdoctor topo``)."""

from __future__ import annotations

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ddpdoctor.core.report import CheckResult, Severity, Status
from ddpdoctor.model.topology.analysis import gdr_verdicts, nvlink_matrix, rails
from ddpdoctor.model.topology.node import NodeTopology, format_cpulist
from ddpdoctor.report.fit import no_broken_words
from ddpdoctor.report.render_text import skipped_lines

_SEV_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
_PATH_STYLE = {"X": "dim", "PIX": "green", "PXB": "green", "PHB": "yellow", "NODE": "yellow", "SYS": "red"}


def _row(t: Table, *cells) -> None:
    """Cells as plain Text: names and messages come from the machine or user files, never markup."""
    t.add_row(*(c if isinstance(c, Text) else Text(str(c)) for c in cells))


def _table(title: str | None, *columns: str, wrap: tuple[str, ...] = ()) -> Table:
    """A table that reads at 80 columns: no vertical rules, two spaces between columns; only the columns
    in ``wrap`` (free text with spaces) may wrap, and only between words (see report/fit.py)."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    for col in columns:
        t.add_column(col, no_wrap=col not in wrap)
    return t


def _link(cur, mx, fmt: str) -> str:
    if cur is None and mx is None:
        return "?"
    if cur is None:
        return fmt.format(mx) + " max"
    return fmt.format(cur) if cur == mx or mx is None else f"{fmt.format(cur)}/{fmt.format(mx)}"


def short_busid(busid: str | None) -> str:
    """"00000000:18:00.0" -> "18:00.0": the PCI domain only when it is not 0 (as lspci writes it)."""
    if not busid:
        return "?"
    domain, _, rest = busid.partition(":")
    return rest if rest and domain.strip("0") == "" else busid


def short_labels(node: NodeTopology) -> dict[str, str]:
    """Matrix labels that fit 80 columns: GPU0 -> G0, the k-th NIC -> Nk (named in a legend)."""
    out = {g.label: f"G{g.index}" for g in node.gpus}
    out.update({n.name: f"N{k}" for k, n in enumerate(node.nics)})
    return out


def nic_legend(node: NodeTopology) -> Text | None:
    labels = short_labels(node)
    named = [n for n in node.nics if n.name != f"NIC{labels[n.name][1:]}"]
    return Text("   ".join(f"{labels[n.name]} {n.name}" for n in named), style="dim") if named else None


def gpu_table(node: NodeTopology) -> RenderableType:
    t = _table("GPUs", "GPU", "model", "bus id", "MiB", "NUMA", "CPUs", "PCIe", "NVLinks", "ECC",
               wrap=("model", "CPUs", "PCIe"))
    for g in node.gpus:
        up = f"{sum(x.active for x in g.nvlinks)}/{len(g.nvlinks)}" if g.nvlinks else "-"
        gen, width = _link(g.pcie.cur_gen, g.pcie.max_gen, "Gen{}"), _link(g.pcie.cur_width, g.pcie.max_width, "x{}")
        pcie = "?" if gen == width == "?" else f"{gen} {width}"
        _row(
            t,
            f"G{g.index}",
            (g.name or "?").removeprefix("NVIDIA "),
            short_busid(g.busid),
            str(g.memory_MiB or "?"),
            "?" if g.numa_node is None else str(g.numa_node),
            (format_cpulist(g.cpu_affinity) or "?").replace(",", ", "),
            pcie,
            up,
            "?" if g.ecc_uncorrected_volatile is None else str(g.ecc_uncorrected_volatile),
        )
    return no_broken_words(t)


class MatrixView:
    """A square matrix under one title, split into column blocks that fit the console's width (never
    truncated to "P…"): GPUs first, then NICs, so a block holds whole groups where it can."""

    def __init__(self, title: str, labels: list[str], cells: list[list[Text]], groups: list[int]) -> None:
        self.title, self.labels, self.cells, self.groups = title, labels, cells, groups

    def _table(self, cols: list[int]) -> Table:
        t = _table(None, "", *(self.labels[i] for i in cols))
        t.padding = (0, 0)  # the one-space column rule is enough between short path words
        for c in t.columns[1:]:
            c.justify = "center"
        for r, lab in enumerate(self.labels):
            _row(t, lab, *(self.cells[r][i] for i in cols))
        return t

    def _fits(self, console: Console, options: ConsoleOptions, cols: list[int]) -> bool:
        wide = options.update_width(10_000)  # measured unclamped: rich caps a measurement at the width given
        return Measurement.get(console, wide, self._table(cols)).maximum <= options.max_width

    def _blocks(self, console: Console, options: ConsoleOptions) -> list[list[int]]:
        every = list(range(len(self.labels)))
        if self._fits(console, options, every):
            return [every]
        out: list[list[int]] = []
        start = 0
        for size in self.groups:  # GPUs, then NICs: a whole group per block where it fits
            cur: list[int] = []
            for i in range(start, start + size):
                if cur and not self._fits(console, options, cur + [i]):
                    out.append(cur)
                    cur = []
                cur.append(i)
            if cur:
                out.append(cur)
            start += size
        return out

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        blocks = self._blocks(console, options)
        yield Text(self.title, style="italic")
        for cols in blocks:
            if len(blocks) > 1:
                yield Text(f"columns {self.labels[cols[0]]}-{self.labels[cols[-1]]}:", style="dim")
            yield self._table(cols)


def path_matrix(node: NodeTopology) -> RenderableType:
    short = short_labels(node)
    full = [g.label for g in node.gpus] + [n.name for n in node.nics]
    cells = []
    for a in full:
        row = []
        for b in full:
            p = node.path(a, b) or "?"
            row.append(Text(p, style="bold green" if p.startswith("NV") else _PATH_STYLE.get(p, "")))
        cells.append(row)
    title = "Paths (NV# NVLinks, PIX/PXB PCIe switch, PHB/NODE host bridge, SYS across sockets)"
    view = MatrixView(title, [short[x] for x in full], cells, [len(node.gpus), len(node.nics)])
    legend = nic_legend(node)
    return Group(view, legend) if legend is not None else view


def nvlink_table(node: NodeTopology) -> RenderableType:
    m = nvlink_matrix(node)
    labels = [f"G{lab.removeprefix('GPU')}" for lab in m["labels"]]
    cells = [[Text("X" if v is None else str(v)) for v in row] for row in m["values"]]
    return MatrixView("NVLink matrix (active links per GPU pair)", labels, cells, [len(labels)])


def nic_table(node: NodeTopology) -> RenderableType:
    short = short_labels(node)
    rail_of: dict[str, list[str]] = {}
    for r in rails(node):
        if r.nic:
            rail_of.setdefault(r.nic, []).append(f"G{r.gpu} {r.path}")
    t = _table("NICs and rails", "NIC", "kind", "type", "Gb/s", "ports", "bus id", "NUMA", "netdev",
               "nearest GPUs", wrap=("NIC", "ports", "netdev", "nearest GPUs"))
    for n in node.nics:
        one = len(n.ports) == 1 and str(n.ports[0].port) == "1"  # the usual case: no port number
        ports = ", ".join(f"{'' if one else f'{p.port}:'}{p.state}/{p.phys_state}" for p in n.ports) or "-"
        _row(
            t,
            n.name if n.name == f"NIC{short[n.name][1:]}" else f"{short[n.name]} {n.name}",
            "IB" if n.kind == "InfiniBand" else n.kind,
            n.hca_type or "-",
            f"{n.rate_gbps:g}" if n.rate_gbps else "?",
            ports,
            short_busid(n.busid),
            "?" if n.numa_node is None else str(n.numa_node),
            ", ".join(n.netdevs) or "-",
            ", ".join(rail_of.get(n.name, [])) or "-",
        )
    return no_broken_words(t)


def gdr_table(node: NodeTopology) -> RenderableType:
    t = _table("GPUDirect RDMA (as NCCL decides it)", "GPU", "NIC", "path", "GDR", "reason", wrap=("reason",))
    for v in gdr_verdicts(node):
        verdict = {True: Text("on", "green"), False: Text("off", "red"), None: Text("?", "yellow")}[v.enabled]
        _row(t, f"G{v.gpu}", v.nic or "-", v.path or "-", verdict, v.reason)
    return no_broken_words(t)


def findings_view(results: list[CheckResult]) -> RenderableType:
    """The checks' findings; skipped checks below, one line per reason (not six rows saying one thing)."""
    t = _table("Findings", "check", "status", "severity", "finding", wrap=("finding",))
    skipped = [(r.code, r.summary) for r in results if r.status is Status.SKIPPED and not r.findings]
    for r in results:
        if r.status is Status.SKIPPED and not r.findings:
            continue
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
    lines = skipped_lines(skipped)
    if t.row_count == 0:
        return Group(Text("Findings", style="italic"), lines or Text("none"))
    return Group(no_broken_words(t), lines) if lines is not None else no_broken_words(t)


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
