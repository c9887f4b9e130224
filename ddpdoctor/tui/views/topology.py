"""Topology of one node: GPUDirect RDMA verdict, NVLink matrix, NICs and rails."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddpdoctor.core.report import Report
from ddpdoctor.tui.adapt import NIC_FIELDS, Matrix, NodeTopology, _is_number, nic_row, topology_by_node
from ddpdoctor.tui.views.common import no_data

GDR_STYLES = {
    "enabled": "bold green",
    "yes": "bold green",
    "partial": "bold yellow",
    "disabled": "bold red",
    "no": "bold red",
}
STATE_STYLES = {"ACTIVE": "green", "DOWN": "bold red", "INIT": "yellow", "POLLING": "yellow"}


def link_cell(v) -> Text:
    """A link count or an `nvidia-smi topo -m` word; NVLink green, PCIe paths dimmer the farther."""
    if v is None or v == "X":
        return Text("·", "dim")
    if _is_number(v):
        return Text(f"NV{int(v)}" if v else "-", "green" if v else "red")
    s = str(v)
    style = (
        "green"
        if s.startswith("NV")
        else {"PIX": "cyan", "PXB": "cyan", "PHB": "yellow", "NODE": "yellow", "SYS": "red"}.get(s, "")
    )
    return Text(s, style)


def nvlink_table(m: Matrix) -> Table:
    t = Table(title="NVLink", title_justify="left", title_style="bold", box=None, padding=(0, 1))
    t.add_column("")
    for j in range(m.size):
        t.add_column(f"{j}", justify="right")
    for i, row in enumerate(m.values):
        t.add_row(m.labels[i], *[link_cell(v) for v in row])
    return t


def nic_table(nics: list[dict]) -> Table:
    t = Table(title="NICs and rails", title_justify="left", title_style="bold", box=None, padding=(0, 1))
    for f in NIC_FIELDS:
        t.add_column({"rate_gbps": "Gb/s", "link_layer": "layer"}.get(f, f))
    for nic in nics:
        cells = nic_row(nic)
        state = cells[1].split(":")[-1].strip().upper()
        cells[3] = {"InfiniBand": "IB"}.get(cells[3], cells[3])
        t.add_row(*[Text(c, STATE_STYLES.get(state, "")) if k == 1 else c for k, c in enumerate(cells)])
    return t


def gdr_panel(gdr: dict) -> Panel:
    verdict = str(gdr.get("verdict", "unknown"))
    body = Text(verdict.upper(), GDR_STYLES.get(verdict.lower(), "bold"))
    if gdr.get("reason"):
        body.append(f"  {gdr['reason']}")
    for k, v in (gdr.get("evidence") or {}).items():
        body.append(f"\n{k}: {v}", "dim")
    return Panel(body, title="GPUDirect RDMA", title_align="left", expand=True)


def node_view(node: NodeTopology, index: int, count: int) -> RenderableType:
    parts: list[RenderableType] = []
    head = Text(f"Topology of {node.host}", "bold")
    if count > 1:
        head.append(f"  (node {index + 1}/{count}, n: next)", "dim")
    parts.append(head)
    if node.gpus:
        names = sorted({str(g.get("name")) for g in node.gpus if g.get("name")})
        parts.append(Text(f"{len(node.gpus)} GPU(s): {', '.join(names) or '?'}"))
    parts.append(gdr_panel(node.gdr) if node.gdr else no_data("GPUDirect RDMA verdict"))
    parts.append(nvlink_table(node.nvlink) if node.nvlink else no_data("NVLink matrix"))
    parts.append(nic_table(node.nics) if node.nics else no_data("NIC list"))
    return Group(*parts)


class TopologyPane(VerticalScroll):
    # a stable gutter keeps the width (and so the wrapping) the same with or without a scrollbar
    DEFAULT_CSS = "TopologyPane { scrollbar-gutter: stable; }"

    def compose(self):
        yield Static(no_data("topology", "No topology check has reported (GPU nodes only)."), id="topo-body")

    def on_mount(self) -> None:
        self.app.feed(self)

    def show_report(self, report: Report | None) -> None:
        nodes = topology_by_node(report)
        if not nodes:
            return
        self.topo_nodes, self.node_index = nodes, 0
        self._draw()

    def next_node(self) -> None:
        if getattr(self, "topo_nodes", None):
            self.node_index = (self.node_index + 1) % len(self.topo_nodes)
            self._draw()

    def _draw(self) -> None:
        self.query_one("#topo-body", Static).update(
            node_view(self.topo_nodes[self.node_index], self.node_index, len(self.topo_nodes))
        )
