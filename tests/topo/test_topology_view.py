"""`ddpdoctor topo` output at 80 and 200 columns on the real fixtures: nothing cut ("P…", "G…"),
codes and path words whole, no word broken across lines, every line within the width."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from ddpdoctor.model.topology.node import NodeTopology
from ddpdoctor.probes.nccl_xml import nccl_to_node, parse_nccl_topo
from ddpdoctor.probes.smi_topo import parse_topo_matrix, topo_to_node
from ddpdoctor.report.topology_view import node_view, short_busid
from ddpdoctor.runtime.topo_offline import diagnose

from .conftest import DATA, fixture


def _smi(name):
    return topo_to_node(parse_topo_matrix(fixture(f"nvidia-smi-topo/{name}").read_text()), source=name)


def _xml(name):
    return nccl_to_node(parse_nccl_topo(fixture(f"nccl-topo/{name}").read_text()), source=name)


NODES = {
    "dgx1-v100 (smi topo, mlx5 NICs)": lambda: _smi("dgx1-v100.8gpu.4nic-mlx5cols.spaces.txt"),
    "hgx-h100 (NV18)": lambda: _smi("hgx-h100-8gpu.nv18.no-nic.spaces.no-legend.txt"),
    "azure ndv5 (xml)": lambda: _xml("azure-ndv5-topo.xml"),
    "aws p5 (8 GPUs, 32 NICs)": lambda: _xml("aws-p5.48xl-topo.pr1226.xml"),
    "hgx snapshot (NVML names, IB ports)": lambda: NodeTopology.from_dict(
        json.loads((DATA / "hgx-h100-c-nopeermem.json").read_text())
    ),
}


def render(node: NodeTopology, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(node_view(node, diagnose([node])))
    return console.export_text()


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("name", list(NODES))
def test_topology_reads_at_the_width(name, width):
    node = NODES[name]()
    results = diagnose([node])
    text = render(node, width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    assert "…" not in text  # nothing truncated
    words = set(text.split()) | {w.rstrip(",:") for w in text.split()}
    # Compact labels, whole: G0.., N0.. and every path word of the matrix.
    assert {f"G{g.index}" for g in node.gpus} <= words
    assert {f"N{k}" for k in range(len(node.nics))} <= words or not node.gpus
    paths = {node.path(a.label, b.label) for a in node.gpus for b in node.gpus if a is not b} - {None}
    assert paths <= words, paths - words
    # Words never broken: each word of names, bus ids and findings appears whole.
    expect = {w for g in node.gpus for w in (g.name or "").removeprefix("NVIDIA ").split()}
    expect |= {short_busid(g.busid) for g in node.gpus if g.busid}
    expect |= {n.name for n in node.nics}
    expect |= {r.code for r in results}
    expect |= {w for r in results for f in r.findings for w in f.message.split()}
    assert expect <= words, sorted(expect - words)[:10]


def test_a_wide_matrix_is_split_at_80_and_whole_at_200():
    node = NODES["aws p5 (8 GPUs, 32 NICs)"]()
    blocks = [line for line in render(node, 80).splitlines() if line.startswith("columns ")]
    assert blocks == ["columns G0-G7:", "columns N0-N17:", "columns N18-N31:"]
    assert not [line for line in render(node, 200).splitlines() if line.startswith("columns ")]
    narrow = render(NODES["hgx snapshot (NVML names, IB ports)"](), 80)
    assert "columns" not in narrow.split("NVLink matrix")[0]  # 8 GPUs + 8 NICs fit in one block at 80
