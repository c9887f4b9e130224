"""Parser of ``nvidia-smi topo -m`` (pure).

Handles tab- or space-separated output, NIC columns named ``NIC0``… (with the ``NIC Legend`` mapping
them to ``mlx5_N``) or the older ``mlx5_N`` columns, and the ``CPU Affinity``, ``NUMA Affinity`` and
``GPU NUMA ID`` columns, any of which may be missing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ddpdoctor.model.topology.node import Gpu, Nic, NodeTopology, parse_cpulist, path_rank

_EXTRA_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_LEGEND_RE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


class TopoParseError(ValueError):
    """Text that is not ``nvidia-smi topo -m`` output; the message says what is wrong."""


@dataclass
class SmiTopo:
    labels: list[str]  # row/column labels in order: GPU0.., NIC0.. or mlx5_N
    matrix: dict[str, dict[str, str]]
    extras: dict[str, dict[str, str]] = field(default_factory=dict)  # label -> {"CPU Affinity": ...}
    nic_legend: dict[str, str] = field(default_factory=dict)  # NIC0 -> mlx5_0

    @property
    def gpus(self) -> list[str]:
        return [x for x in self.labels if x.startswith("GPU")]

    @property
    def nics(self) -> list[str]:
        return [x for x in self.labels if not x.startswith("GPU")]

    def nic_name(self, label: str) -> str:
        return self.nic_legend.get(label, label)


def _split_header(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"\t|\s{2,}", line.strip()) if c.strip()]


def parse_topo_matrix(text: str) -> SmiTopo:
    # On a terminal nvidia-smi underlines the header with escape codes; pasted output keeps them.
    lines = [_ANSI_RE.sub("", ln) for ln in text.splitlines()]
    try:
        h = next(i for i, ln in enumerate(lines) if re.search(r"\bGPU0\b", ln) and ln.split()[0] == "GPU0")
    except StopIteration:
        raise TopoParseError("no header line starting with GPU0: not `nvidia-smi topo -m` output") from None
    header = _split_header(lines[h])
    extras = [c for c in header if c in _EXTRA_COLUMNS]
    devices = [c for c in header if c not in _EXTRA_COLUMNS]
    unknown = [c for c in devices if " " in c]
    if unknown:
        raise TopoParseError(f"unknown column(s) in the header: {unknown}")
    matrix: dict[str, dict[str, str]] = {}
    extra_vals: dict[str, dict[str, str]] = {}
    for ln in lines[h + 1 :]:
        cells = ln.split()
        if not cells or cells[0] not in devices:
            if cells and cells[0].startswith("Legend"):
                break
            continue
        label, rest = cells[0], cells[1:]
        if len(rest) < len(devices):
            raise TopoParseError(f"row {label} has {len(rest)} cells, expected {len(devices)}")
        row = dict(zip(devices, rest[: len(devices)]))
        for col, val in row.items():
            try:
                path_rank(val)
            except ValueError:
                raise TopoParseError(
                    f"row {label}, column {col}: {val!r} is not a topology path type"
                ) from None
        matrix[label] = row
        # A tab-separated row may hold an empty cell (e.g. "0\t\tN/A"); split() drops it, so the
        # remaining values fill the extra columns in order.
        extra_vals[label] = dict(zip(extras, rest[len(devices) :]))
    missing = [d for d in devices if d not in matrix]
    if missing:
        raise TopoParseError(f"no row for {', '.join(missing)}")
    legend = {}
    for ln in lines:
        m = _LEGEND_RE.match(ln)
        if m:
            legend[m.group(1)] = m.group(2)
    return SmiTopo(labels=devices, matrix=matrix, extras=extra_vals, nic_legend=legend)


def _int_or_none(v: str | None) -> int | None:
    return int(v) if v and v.strip().lstrip("-").isdigit() else None


def topo_to_node(t: SmiTopo, hostname: str = "", source: str = "nvidia-smi topo -m") -> NodeTopology:
    """A NodeTopology holding what the matrix tells: GPUs, NIC names, paths, CPU/NUMA affinity."""
    node = NodeTopology(hostname=hostname, source=source)
    for label in t.gpus:
        ex = t.extras.get(label, {})
        # "NUMA Affinity" is the CPU-side node; "GPU NUMA ID" is the node of the GPU's own memory
        # (set on coherent systems such as Grace Hopper), not where its host traffic lands.
        numa = _int_or_none(ex.get("NUMA Affinity"))
        node.gpus.append(
            Gpu(index=int(label[3:]), numa_node=numa, cpu_affinity=parse_cpulist(ex.get("CPU Affinity", "")))
        )
        if numa is not None and ex.get("CPU Affinity"):
            node.numa_cpus.setdefault(numa, parse_cpulist(ex["CPU Affinity"]))
    # nvidia-smi lists RDMA devices (mlx5_N) as its NICs.
    node.nics = [Nic(name=t.nic_name(label), rdma=True) for label in t.nics]
    for a in t.labels:
        for b in t.labels:
            if a != b:
                node.set_path(_node_label(t, a), _node_label(t, b), t.matrix[a][b])
    return node


def _node_label(t: SmiTopo, label: str) -> str:
    return label if label.startswith("GPU") else t.nic_name(label)
