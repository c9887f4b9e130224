"""What the tool-output parsers (ddpdoctor/readers/tool_output) return: plain data, one shape per
kind of measurement. Pure.

Units as ddpdoctor's (DESIGN.md §4): sizes in bytes, times in µs, bandwidth in GB/s = 1e9 B/s. Every
parsed item keeps where it came from (``source`` = "FILE:LINE") so findings can point at the log.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class ToolOutputError(ValueError):
    """Input that cannot be imported; ``str()`` is "FILE:LINE: what is wrong" (LINE when known)."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path, self.line, self.message = path, line, message
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")


@dataclass
class Device:
    """One GPU as a log names it."""

    index: int  # the CUDA device index on its host
    name: str  # "NVIDIA H100 80GB HBM3", "A100-SXM4-40GB"
    host: str | None = None  # hostname, when the log says it
    bus_id: str | None = None
    rank: int | None = None  # nccl-tests rank


@dataclass
class Half:
    """One side (out-of-place or in-place) of an nccl-tests row."""

    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    wrong: float | None = None  # "#wrong" elements (new) or max error (old "error" column); None: N/A


@dataclass
class NcclRow:
    size_B: int
    count: int
    dtype: str
    out_of_place: Half | None
    in_place: Half | None
    line: int = 0

    @property
    def main(self) -> Half:
        """The figure nccl-tests readers quote: out-of-place, or in-place when that is all there is."""
        return self.out_of_place or self.in_place  # type: ignore[return-value]


@dataclass
class NcclRun:
    """One ``*_perf`` run: a collective over ``nranks`` GPUs, one row per message size."""

    op: str  # all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, send_recv, ...
    source: str  # FILE:LINE of the table's header
    devices: list[Device] = field(default_factory=list)
    rows: list[NcclRow] = field(default_factory=list)
    wrong_column: str = "#wrong"  # "#wrong" (elements) or "error" (old: max error, not a count)
    out_of_bounds: int | None = None  # "# Out of bounds values : N OK|FAILED"
    out_of_bounds_line: int | None = None
    avg_busbw_GBps: float | None = None
    nranks: int | None = None
    version: str | None = None  # nccl-tests / NCCL version line, if printed

    @property
    def hosts(self) -> list[str]:
        seen: dict[str, None] = {}
        for d in self.devices:
            if d.host:
                seen[d.host] = None
        return list(seen)


@dataclass
class BwMatrix:
    """A bandwidth (or latency) matrix from nvbandwidth or p2pBandwidthLatencyTest.

    ``values[i][j]``: row i, column j as the tool printed them; None where it printed N/A (or for a
    diagonal that is a local copy, not a link). ``row_kind``/``col_kind``: "GPU" or "CPU".
    ``direction``: "->" row sends to column, "<-" column sends to row, "<->" both at once.
    """

    tool: str  # nvbandwidth | p2pBandwidthLatencyTest
    name: str  # nvbandwidth testcase, or the sample's matrix title
    description: str
    unit: str  # GB/s | us | ns
    row_kind: str
    col_kind: str
    direction: str
    row_labels: list[str]
    col_labels: list[str]
    values: list[list[float | None]]
    source: str
    total: float | None = None  # nvbandwidth's SUM line

    @property
    def square_gpu(self) -> bool:
        return (
            self.row_kind == "GPU" and self.col_kind == "GPU" and len(self.row_labels) == len(self.col_labels)
        )


@dataclass
class RdmaRow:
    size_B: int
    iterations: int
    peak_GBps: float
    avg_GBps: float
    msg_rate_Mpps: float | None
    line: int = 0


@dataclass
class RdmaRun:
    """One perftest bandwidth run (ib_write_bw, ib_read_bw, ib_send_bw)."""

    test: str  # ib_write_bw ...
    source: str
    device: str | None = None  # mlx5_0, ib0
    link_type: str | None = None  # IB | Ethernet
    connection: str | None = None  # RC, UC, UD
    rows: list[RdmaRow] = field(default_factory=list)


@dataclass
class Parsed:
    """Everything one file held (a log may mix the output of several tools)."""

    path: str
    nccl: list[NcclRun] = field(default_factory=list)
    matrices: list[BwMatrix] = field(default_factory=list)
    rdma: list[RdmaRun] = field(default_factory=list)
    devices: list[Device] = field(default_factory=list)  # GPUs a tool listed (nvbandwidth, p2p sample)
    versions: dict[str, str] = field(default_factory=dict)
    tools: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.nccl or self.matrices or self.rdma)
