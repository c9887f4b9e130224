"""NCCL's own all_reduce cost model, re-stated in Python: a prediction, never a measurement.

NCCL picks an algorithm (Ring, Tree, NVLS, ...) and a protocol (LL, LL128, Simple) for every call by
predicting ``time = latency + size / bandwidth`` for each pair and taking the smallest (enqueue.cc
``getAlgoInfo``). The latencies and bandwidths come from ``ncclTopoTuneModel`` and the per-size
corrections from ``ncclTopoGetAlgoTime``, both in src/graph/tuning.cc. Every constant below is copied
from NVIDIA/nccl at commit b6475625 (makefiles/version.mk there: NCCL 2.20.3); later releases changed
some of them (Hopper LL limits, Blackwell rows, PAT), so anything built on this module is labelled
"prediction (NCCL cost model, NCCL 2.20)".

What is NCCL's formula and what is ours:

* The tuning formulas (base + hardware latencies per algorithm × protocol, the LL/LL128/Simple
  bandwidth factors and per-channel caps, the tree correction per size, the ring "plateau" factor,
  the bus-to-algorithm bandwidth ratios) follow tuning.cc line by line.
* The channel graph those formulas start from (how many channels, at what bandwidth each) comes from
  NCCL's topology search (src/graph/search.cc), which walks the real PCIe/NVLink/NIC graph. We do not
  have that graph, only link bandwidths, so :func:`search_graph` approximates the search on an ideal
  symmetric node: the best channels × speed from NCCL's speed arrays that fits the bandwidth, then
  ``ncclTopoDupChannels``. Tree "simple pattern" fallbacks, CollNet/SHARP, NVLSTree, PAT and network
  latency from the NIC plugin (``latencyInter``, 0 on common NICs) are not modelled.

Inputs are a :class:`Fabric`: node count, GPUs per node, compute capability, the bandwidth one GPU has
inside its node (NVLink total, or PCIe) and one node's network bandwidth (all its NICs together).
Units as NCCL's: GB/s = 1e9 B/s, µs, bytes. Pure: no torch, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

NCCL_MODEL_VERSION = "2.20.3"
NCCL_MODEL_SOURCE = "NVIDIA/nccl src/graph/tuning.cc @ b6475625 (NCCL 2.20.3)"
PREDICTION_LABEL = "prediction (NCCL cost model, NCCL 2.20)"

ALGOS = ("Tree", "Ring", "NVLS")  # NCCL's order, all_reduce only; CollNet and NVLSTree need SHARP
PROTOS = ("LL", "LL128", "Simple")
LINKS = ("nvlink", "pci")
CPU_VENDORS = ("intel", "amd")

# -- tuning.cc constants (NCCL 2.20.3), indexed [algo][proto] with protos LL, LL128, Simple ---------
BASE_LAT_US = {"Tree": (6.8, 14.0, 0.0), "Ring": (6.6, 14.0, 8.4), "NVLS": (0.0, 0.0, 0.0)}
HW_LAT_US = {
    "nvlink": {"Tree": (0.6, 1.25, 28.0), "Ring": (0.6, 1.9, 3.4), "NVLS": (0.0, 0.0, 23.0)},
    "pci": {"Tree": (1.0, 1.9, 28.0), "Ring": (1.0, 2.5, 5.7), "NVLS": (0.0, 0.0, 0.0)},
    "net": {"Tree": (5.0, 8.5, 28.0), "Ring": (2.7, 4.0, 14.0), "NVLS": (0.0, 0.0, 18.0)},
}
# Rows: Volta, Ampere, Hopper (compute capability < 80, < 90, >= 90); columns: 1 node, 2 nodes, more.
# llMaxBws rows are the GPU generation on one node and the CPU vendor (Intel row 0, AMD row 1) across
# nodes, as tuning.cc indexes them.
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0))
PER_CH_MAX_RING_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7))
PER_CH_MAX_TREE_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0))
PER_CH_MAX_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0))
# Tree correction per protocol, index log2(size / 64 B), 64 B .. 256 MiB (1.0 beyond).
# fmt: off
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}  # getNetOverhead(), ×3 for Simple

# -- search.cc constants (NCCL 2.20.3): per-channel speeds the topology search tries, GB/s -----------
SPEEDS_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEEDS_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2,
                0.24, 0.12)
SM90_SPEEDS_INTRA = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0)
SM90_SPEEDS_INTER = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
                     0.24, 0.12)
# fmt: on
MAX_RING_CHANNELS = 16  # init.cc: ringGraph->maxChannels = MAXCHANNELS/2, MAXCHANNELS = 32


def log2i(n: int) -> int:
    """NCCL's log2i: floor(log2(n)), 0 for n <= 1."""
    return max(int(n), 1).bit_length() - 1


@dataclass(frozen=True)
class Fabric:
    """The machine the model predicts for.

    ``intra_GBps``: what one GPU can move to its node peers (NVLink: all its links; PCIe: its slot),
    ``inter_GBps``: one node's network bandwidth with all its NICs together (needed when nnodes > 1).
    ``sm``: compute capability × 10 (70 V100, 80 A100, 90 H100). ``nvls``: NVSwitch with multicast
    (NVLink SHARP). ``gpu_nic_close``: GPU and NIC share a PCIe switch, which NCCL 2.20 requires to keep
    LL128 on across nodes.
    """

    nnodes: int
    gpus_per_node: int
    sm: int
    intra_GBps: float
    inter_GBps: float | None = None
    intra_link: str = "nvlink"
    nvls: bool = False
    cpu_vendor: str = "intel"
    gpu_nic_close: bool = True

    def __post_init__(self) -> None:
        for name in ("nnodes", "gpus_per_node", "sm"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Fabric.{name} must be a positive integer, got {v!r}")
        if self.nranks < 2:
            raise ValueError("the NCCL cost model needs at least 2 ranks (NCCL skips tuning for one)")
        _positive("intra_GBps", self.intra_GBps)
        if self.nnodes > 1:
            if self.inter_GBps is None:
                raise ValueError(
                    f"Fabric.inter_GBps is needed for {self.nnodes} nodes (a node's network GB/s)"
                )
            _positive("inter_GBps", self.inter_GBps)
        if self.intra_link not in LINKS:
            raise ValueError(f"Fabric.intra_link must be one of {', '.join(LINKS)}, got {self.intra_link!r}")
        if self.cpu_vendor not in CPU_VENDORS:
            raise ValueError(
                f"Fabric.cpu_vendor must be one of {', '.join(CPU_VENDORS)}, got {self.cpu_vendor!r}"
            )

    @property
    def nranks(self) -> int:
        return self.nnodes * self.gpus_per_node

    @property
    def generation(self) -> int:
        """tuning.cc's compCapIndex: 0 Volta, 1 Ampere, 2 Hopper (and newer, in 2.20)."""
        return 2 if self.sm >= 90 else 1 if self.sm >= 80 else 0

    def with_nodes(self, nnodes: int) -> Fabric:
        return Fabric(**{**asdict(self), "nnodes": nnodes})

    def to_dict(self) -> dict:
        return asdict(self)


def _positive(name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"Fabric.{name} must be a positive number of GB/s, got {v!r}")


@dataclass(frozen=True)
class Graph:
    """One algorithm's channel graph: ``n_channels`` channels; per channel GB/s inside the node and
    across nodes (NCCL's ``bwIntra`` / ``bwInter``)."""

    n_channels: int
    bw_intra: float
    bw_inter: float


def _best_fit(total: float, speeds: tuple[float, ...], max_channels: int) -> tuple[int, float]:
    """The search's first pass on an ideal node: the most channels × speed that fits ``total``.
    NCCL keeps the best total and stops at a perfect fit; on a tie the faster speed (found first) stays."""
    best: tuple[int, float] | None = None
    for s in speeds:
        n = min(max_channels, int(total / s + 1e-9))
        if n < 1:
            continue
        if best is None or n * s > best[0] * best[1] + 1e-9:
            best = (n, s)
        if n * s >= total - 1e-9:
            break
    return best if best is not None else (1, total)


def _largest_speed(limit: float, speeds: tuple[float, ...], floor: float) -> float:
    return max([s for s in speeds if s <= limit + 1e-9] + [floor])


def search_graph(fabric: Fabric, algo: str, ring: Graph | None = None) -> Graph:
    """Approximates NCCL's topology search (search.cc ``ncclTopoCompute``) for one algorithm."""
    multinode = fabric.nnodes > 1
    if fabric.sm >= 90:
        speeds = SM90_SPEEDS_INTER if multinode else SM90_SPEEDS_INTRA
    else:
        speeds = SPEEDS_INTER if multinode else SPEEDS_INTRA
    g = fabric.gpus_per_node
    # A GPU alone on its node has no intra-node links: only the network limits it.
    intra = math.inf if g == 1 else fabric.intra_GBps
    total = min(intra, fabric.inter_GBps) if multinode else intra
    if algo == "Ring":
        n, s = _best_fit(total, speeds, MAX_RING_CHANNELS)
        # ncclTopoDupChannels: fast channels are split in two (not on Hopper+ between 25 and 50 GB/s).
        if s >= 25.0 and not (fabric.sm > 80 and s < 50.0 and n > 4):
            n2 = min(2 * n, MAX_RING_CHANNELS)
            s /= math.ceil(n2 / n)
            n = n2
        # Second pass: the same channels, each as fast as still fits.
        s = _largest_speed(total / n, speeds, s)
        return Graph(n, s, s)
    if ring is None:
        raise ValueError(f"the {algo} graph is searched after the ring graph; pass ring=")
    # Non-ring patterns see a GPU's total bandwidth × g/(g-1) (ncclTopoCompute), limited by the network.
    tree_intra = intra * g / (g - 1) if g > 1 else math.inf
    tree_total = min(tree_intra, fabric.inter_GBps) if multinode else tree_intra
    if algo == "Tree":
        n = ring.n_channels  # treeGraph min/maxChannels = ringGraph->nChannels
        s = _largest_speed(tree_total / n, speeds, ring.bw_inter)
        s_intra = s
        if fabric.nnodes == 2:
            # Pass 2 raises bwIntra of a 2-node tree up to twice bwInter where the node allows it.
            s_intra = _largest_speed(min(tree_intra / n, 2 * s), speeds, s)
        return Graph(n, s_intra, s)
    if algo == "NVLS":
        n = g  # one channel per GPU: minChannels = maxChannels = ngpus
        s = _largest_speed(tree_total / n, speeds, speeds[-1])
        return Graph(n, s, s)
    raise ValueError(f"unknown algorithm {algo!r}; expected one of {', '.join(ALGOS)}")


@dataclass
class Prediction:
    algo: str
    proto: str
    time_us: float
    algbw_GBps: float
    busbw_GBps: float

    def to_dict(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}


class CostModel:
    """NCCL's latency/bandwidth table for all_reduce on a :class:`Fabric`, and the times it predicts."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        ring = search_graph(fabric, "Ring")
        self.graphs = {"Ring": ring, "Tree": search_graph(fabric, "Tree", ring)}
        if self.nvls_enabled:
            self.graphs["NVLS"] = search_graph(fabric, "NVLS", ring)
        self.table: dict[tuple[str, str], tuple[float, float]] = {}
        for a in ALGOS:
            for p in PROTOS:
                self.table[(a, p)] = self._entry(a, p)

    @property
    def nvls_enabled(self) -> bool:
        # transport/nvls.cc ncclNvlsInit (2.20.3): more than 2 GPUs, one node, multicast support; the
        # NVLS search needs an NVSwitch and sm >= 90.
        f = self.fabric
        return f.nvls and f.nnodes == 1 and f.gpus_per_node > 2 and f.sm >= 90 and f.intra_link == "nvlink"

    def _ll128_enabled(self) -> bool:
        # tuning.cc: LL128 on by default only over NVLink (typeIntra <= NVB), with a close NIC across
        # nodes, on one GPU generation among sm 70/80/90.
        f = self.fabric
        nvlink_inside = f.intra_link == "nvlink" or f.gpus_per_node == 1
        close_nic = f.nnodes == 1 or f.gpu_nic_close
        return nvlink_inside and close_nic and f.sm in (70, 80, 90)

    def _entry(self, a: str, p: str) -> tuple[float, float]:
        """(latency µs, algorithm bandwidth GB/s) for all_reduce; bandwidth 0 = disabled."""
        f = self.fabric
        nnodes, nranks, ppn = f.nnodes, f.nranks, f.nranks / f.nnodes
        pi = PROTOS.index(p)
        if a == "NVLS" and (p != "Simple" or "NVLS" not in self.graphs):
            return 0.0, 0.0
        if p == "LL128" and not self._ll128_enabled():
            return 0.0, 0.0
        graph = self.graphs[a]
        gen = f.generation
        index2 = nnodes - 1 if nnodes <= 2 else 2
        index1 = gen if nnodes == 1 else CPU_VENDORS.index(f.cpu_vendor)
        ll_max = LL_MAX_BW[index1][index2]
        nsteps = 2 * (nranks - 1)
        n_inter_steps = 2 * nnodes if nnodes > 1 else 0

        bw = graph.bw_intra if nnodes <= 2 else graph.bw_inter
        if a == "NVLS":
            bw = min(graph.bw_intra, graph.bw_inter)
        bus = graph.n_channels * bw
        if a == "Ring" and p == "LL":
            bus = min(ll_max, bus / 4.0)
        if a == "Ring" and p == "LL128":
            bus = min(bus * (0.7 if ppn < 2 else 0.92), graph.n_channels * PER_CH_MAX_RING_LL128[gen][index2])
        if a == "Tree":
            bus = min(bus * 0.92, graph.n_channels * PER_CH_MAX_TREE[gen][index2])
            if p == "LL":
                bus = min(bus / 3.8, ll_max)
            if p == "LL128":
                factor = 7.0 / 9.0 if nnodes == 1 else 120.0 / 128.0
                bus = min(bus * factor, graph.n_channels * PER_CH_MAX_TREE_LL128[gen][index2])
        ratio = nranks / nsteps if a == "Ring" else 5.0 / 6.0 if a == "NVLS" else 0.5
        algbw = bus * ratio

        intra_hw = "nvlink" if (f.intra_link == "nvlink" or f.gpus_per_node == 1) else "pci"
        intra_lat = HW_LAT_US[intra_hw][a][pi]
        inter_lat = HW_LAT_US["net"][a][pi]
        lat = BASE_LAT_US[a][pi]
        if a == "Ring":
            if nnodes > 1:
                overhead = NET_OVERHEAD_US[f.cpu_vendor] * (3 if p == "Simple" else 1)
                intra_lat = max(intra_lat, overhead)
            lat += (nsteps - n_inter_steps) * intra_lat + n_inter_steps * inter_lat
        elif a == "Tree":
            lat += 2 * ((nranks // nnodes - 1) * intra_lat + log2i(nnodes) * inter_lat)
        else:  # NVLS replaces the base latency
            lat = intra_lat + (inter_lat if nnodes > 1 else 0.0)
        return lat, algbw

    # -- times -------------------------------------------------------------------------------------------
    def time_us(self, algo: str, proto: str, size_B: float) -> float | None:
        """ncclTopoGetAlgoTime for one all_reduce of ``size_B`` bytes; None when NCCL would not use it."""
        if (algo, proto) not in self.table:
            raise ValueError(f"unknown algorithm/protocol {algo}/{proto}")
        if isinstance(size_B, bool) or not isinstance(size_B, (int, float)) or not size_B >= 0:
            raise ValueError(f"message size must be a number of bytes >= 0, got {size_B!r}")
        lat, bw = self.table[(algo, proto)]
        if bw <= 0:
            return None
        f = self.fabric
        log_size = log2i(int(size_B) >> 6)
        if algo == "Tree" and log_size < len(TREE_CORRECTION[proto]):
            bw *= TREE_CORRECTION[proto][log_size]
        ring = self.graphs["Ring"]
        # "Plateau effect of ring" (comm->nChannels taken as the ring graph's channel count).
        if (
            algo == "Ring"
            and proto == "Simple"
            and f.nnodes > 1
            and size_B / (ring.n_channels * f.nranks) >= 64
        ):
            lat *= 1.9 if f.sm < 80 else 1.4
        return lat + size_B / (1000.0 * bw)

    def predictions(self, size_B: float, algos: tuple[str, ...] = ALGOS) -> list[Prediction]:
        """Every enabled algorithm × protocol among ``algos``, fastest first."""
        out = []
        busbw_factor = 2.0 * (self.fabric.nranks - 1) / self.fabric.nranks
        for a in algos:
            for p in PROTOS:
                t = self.time_us(a, p, size_B)
                if t is None:
                    continue
                algbw = size_B / t / 1e3 if t > 0 else 0.0
                out.append(Prediction(a, p, t, algbw, algbw * busbw_factor))
        return sorted(out, key=lambda x: x.time_us)

    def pick(self, size_B: float, algos: tuple[str, ...] = ALGOS) -> Prediction:
        """What NCCL would choose, with NCCL_ALGO restricted to ``algos`` (default: none set)."""
        unknown = [a for a in algos if a not in ALGOS]
        if unknown:
            raise ValueError(f"unknown algorithm(s) {unknown}; expected some of {', '.join(ALGOS)}")
        preds = self.predictions(size_B, algos)
        if not preds:
            raise ValueError(f"none of {', '.join(algos)} is available on this fabric")
        return preds[0]

    def best_per_algo(self, size_B: float) -> dict[str, Prediction]:
        """The fastest protocol of each available algorithm: what ``NCCL_ALGO=<algo>`` would run."""
        out: dict[str, Prediction] = {}
        for pred in self.predictions(size_B):
            out.setdefault(pred.algo, pred)
        return out
