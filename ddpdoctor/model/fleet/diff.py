"""What changed between two reports, beyond noise (pure): ``ddpdoctor diff OLD NEW``.

Compared: the node set; bus bandwidth per collective and size band (the median relative change over
the band's sizes, so one noisy size does not speak for the band); each p2p link between two hosts
(the median over their rank pairs; it must move both in GB/s and as a share of its class's reference, so
a slowdown of the whole machine is not blamed on one link) and its latency; versions (torch, NCCL, CUDA, driver) and NCCL
variables; each node's topology; findings that appeared or went away (by code, severity and the
nodes they name, not by their numbers; for the checks that measure, their figures speak instead). ``Thresholds`` holds the noise lines; their defaults come
from the run-to-run spread measured on the netns bed (benchmarks/diff_noise.py, README).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ddpdoctor.core.payload import LabeledMatrix
from ddpdoctor.core.report import Report, Severity
from ddpdoctor.model.bandwidth.payloads import BwSweepPayload, P2PPayload
from ddpdoctor.model.bandwidth.sizes import format_size
from ddpdoctor.model.fleet.history import meta
from ddpdoctor.model.fleet.metrics import matrix_cells

# Sizes below this are latency-bound: their busbw is noisy and says little about the links.
LARGE_FROM_B = 1 << 20
VERSION_NAMES = {"torch": "torch", "nccl": "NCCL", "cuda": "CUDA", "driver": "driver", "python": "Python"}


@dataclass(frozen=True)
class Thresholds:
    """Noise lines as factors: a figure changed when new/old or old/new exceeds one (1.25: a 20 % fall or
    a 25 % rise). gloo defaults: above the largest run-to-run spread between healthy runs on the netns
    bed of this 2-core machine shared with other jobs (benchmarks/diff_noise.py, 4 runs, 6 pairs: busbw
    x2.15 below 1 MiB and x2.31 above, a link x2.87, its latency x25; under load average 350-650 a link
    was seen x1.6 and its latency x20 apart). A GPU cluster's spread is a few percent: see for_backend."""

    busbw_small: float = 4.0  # the median ratio over sizes < 1 MiB (latency-bound, noisiest)
    busbw_large: float = 3.0  # sizes >= 1 MiB
    p2p: float = 3.0  # a link's bandwidth, also as a share of its class's reference
    latency: float = 40.0  # a link's small-message latency

    @classmethod
    def for_backend(cls, backend: str | None) -> Thresholds:
        """gloo (CPU ranks sharing cores with everything else): the measured lines above. NCCL on GPUs:
        nccl-tests-like spread of a few percent; not measured here (no GPU), so kept wide enough for
        a busy cluster: 1.1 for busbw at >= 1 MiB, 1.5 below, 1.2 per link, 2 for latency."""
        if backend == "nccl":
            return cls(busbw_small=1.5, busbw_large=1.1, p2p=1.2, latency=2.0)
        return cls()


@dataclass
class Change:
    kind: str  # nodes, busbw, p2p, latency, version, nccl_env, topology, finding
    sentence: str
    old: object = None
    new: object = None
    rel: float | None = None  # (new - old) / old for figures


@dataclass
class ReportDiff:
    changes: list[Change] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # "OLD" / "NEW" past their valid-until
    thresholds: Thresholds = field(default_factory=Thresholds)

    def summary(self) -> str:
        perf = [c for c in self.changes if c.kind in ("busbw", "p2p", "latency")]
        versions = [c for c in self.changes if c.kind == "version"]
        sentences = []
        between = ""
        if perf and len(versions) == 1:
            (k, a), (_, b) = versions[0].old, versions[0].new
            between = f" between {VERSION_NAMES.get(k, k)} {a} and {b}"
        elif perf and versions:
            between = " between " + " and ".join(
                ", ".join(f"{VERSION_NAMES.get(c.old[0], c.old[0])} {getattr(c, side)[1]}" for c in versions)
                for side in ("old", "new"))
        for c in self.changes:
            if c.kind == "version" and between:
                continue
            sentences.append(c.sentence + (between if c.kind in ("busbw", "p2p", "latency") else ""))
        if not sentences:
            text = "nothing changed beyond noise"
        else:
            text = "; ".join(sentences)
            if len(sentences) == 1:
                text += "; nothing else changed"
        for which in self.stale:
            text += f" ({which} result is stale: older than its --valid-for)"
        return text

    def to_dict(self) -> dict:
        return {"summary": self.summary(), "stale": self.stale, "thresholds": vars(self.thresholds),
                "changes": [{"kind": c.kind, "sentence": c.sentence, "old": c.old, "new": c.new, "rel": c.rel}
                            for c in self.changes]}


def _beyond(ratio: float, factor: float) -> bool:
    return ratio > factor or ratio < 1 / factor


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def _moved(what: str, old: float, new: float, unit: str, up_word: str = "rose", down_word: str = "fell") -> str:
    rel = (new - old) / old
    return f"{what} {down_word if rel < 0 else up_word} {abs(rel):.0%} ({_fmt(old)} → {_fmt(new)} {unit})".replace(
        "%", " %", 1)


def _busbw(report: Report) -> dict[str, dict[int, float]]:
    bw = report.check("BW001")
    ops = BwSweepPayload.from_json(bw.data).ops if bw is not None else {}
    return {op: {r.size_B: r.busbw_GBps for r in rows if r.busbw_GBps is not None and r.busbw_GBps > 0}
            for op, rows in ops.items()}


def _p2p(report: Report) -> P2PPayload:
    p2p = report.check("P2P001")
    return P2PPayload.from_json(p2p.data) if p2p is not None else P2PPayload()


def _links(matrix: LabeledMatrix | None) -> dict[tuple[str, str], float]:
    """Median per (sender host, receiver host) of a P2P001 matrix."""
    cells: dict[tuple[str, str], list[float]] = {}
    for a, b, v in matrix_cells(matrix):
        if v > 0:
            cells.setdefault((a.partition("@")[2] or a, b.partition("@")[2] or b), []).append(v)
    return {k: statistics.median(v) for k, v in cells.items()}


def _class_refs(report: Report, links: dict[tuple[str, str], float]) -> dict[str, float]:
    """Per link class (intra_node, inter_node): P2P001's own reference (the upper quartile of the ranks'
    best links, robust to a minority of slow nodes), else the class's best link."""
    classes = _p2p(report).classes
    out = {}
    for cls in ("intra_node", "inter_node"):
        ref = classes[cls].reference_GBps if cls in classes else None
        vals = [v for (a, b), v in links.items() if (a == b) == (cls == "intra_node")]
        out[cls] = ref if isinstance(ref, (int, float)) and ref > 0 else (max(vals) if vals else 0.0)
    return out


def _link_changes(old: Report, new: Report, th: Thresholds) -> list[Change]:
    """Each host pair's p2p bandwidth, judged twice: against its old figure and, to see through a
    slowdown of the whole machine (another job, a loaded CPU), as a share of its class's reference.
    Both must move beyond the noise line, the same way. Latency is judged on its own figure."""
    out = []
    lo, ln = _links(_p2p(old).matrix), _links(_p2p(new).matrix)
    ro, rn = _class_refs(old, lo), _class_refs(new, ln)
    for a, b in sorted(set(lo) & set(ln)):
        cls = "intra_node" if a == b else "inter_node"
        rel = (ln[a, b] - lo[a, b]) / lo[a, b]
        if not (ro[cls] and rn[cls]):
            continue
        share = (ln[a, b] / rn[cls]) / (lo[a, b] / ro[cls])
        if _beyond(rel + 1, th.p2p) and _beyond(share, th.p2p) and (rel > 0) == (share > 1):
            out.append(Change("p2p", _moved(f"p2p {a} → {b}", lo[a, b], ln[a, b], "GB/s"), lo[a, b], ln[a, b], rel))
    lo, ln = _links(_p2p(old).latency), _links(_p2p(new).latency)
    for a, b in sorted(set(lo) & set(ln)):
        rel = (ln[a, b] - lo[a, b]) / lo[a, b]
        if _beyond(rel + 1, th.latency):
            out.append(Change("latency", _moved(f"p2p {a} → {b} latency", lo[a, b], ln[a, b], "µs"), lo[a, b],
                              ln[a, b], rel))
    return out


# Checks that measure: their figures are compared with noise lines above, so a verdict of theirs that
# flips near its own line (a warning at 49 % vs 51 % of the reference) is not a change of its own.
MEASURED = frozenset({"BW001", "P2P001", "ALG001", "RDZ001"})


def _finding_keys(report: Report) -> dict[tuple, str]:
    out = {}
    for c in report.checks:
        if c.code in MEASURED:
            continue
        for f in c.findings:
            if f.severity is Severity.INFO:
                continue
            w = f.where or {}
            nodes = tuple(sorted({w["node"]} if w.get("node") else set(w.get("nodes") or [])))
            out.setdefault((f.code, f.severity.value, nodes), f.message)
    return out


def diff_reports(old: Report, new: Report, th: Thresholds | None = None, now: float | None = None) -> ReportDiff:
    """``th`` None: the lines for the backend both reports ran on (gloo's when they differ)."""
    if th is None:
        backends = {old.run.backend, new.run.backend}
        th = Thresholds.for_backend(backends.pop() if len(backends) == 1 else "gloo")
    d = ReportDiff(thresholds=th)
    mo, mn = meta(old, 0), meta(new, 0)
    for label, rep in (("OLD", old), ("NEW", new)):
        until = (rep.run.history or {}).get("valid_until")
        if now is not None and isinstance(until, (int, float)) and now > until:
            d.stale.append(label)
    if mo["nodes"] != mn["nodes"]:
        gone, came = sorted(set(mo["nodes"]) - set(mn["nodes"])), sorted(set(mn["nodes"]) - set(mo["nodes"]))
        d.changes.append(Change("nodes", "the node set changed" + (f": left {', '.join(gone)}" if gone else "")
                                + (f"; joined {', '.join(came)}" if came else ""), mo["nodes"], mn["nodes"]))
    bo, bn = _busbw(old), _busbw(new)
    for op in sorted(set(bo) & set(bn)):
        common = sorted(set(bo[op]) & set(bn[op]))
        for band, sizes, limit in (("small", [s for s in common if s < LARGE_FROM_B], th.busbw_small),
                                   ("large", [s for s in common if s >= LARGE_FROM_B], th.busbw_large)):
            if not sizes:
                continue
            ratio = statistics.median(bn[op][s] / bo[op][s] for s in sizes)
            rel = ratio - 1
            if _beyond(ratio, limit):
                s = max(sizes, key=lambda x: abs(bn[op][x] - bo[op][x]) / bo[op][x] if band == "small" else x)
                d.changes.append(Change("busbw", _moved(f"{op} busbw at {format_size(s)}", bo[op][s], bn[op][s],
                                                        "GB/s"), bo[op][s], bn[op][s], rel))
    d.changes += _link_changes(old, new, th)
    for k in sorted(set(mo["versions"]) | set(mn["versions"])):
        a, b = mo["versions"].get(k), mn["versions"].get(k)
        if a != b and a and b:
            d.changes.append(Change("version", f"{VERSION_NAMES.get(k, k)} {a} → {b}", (k, a), (k, b)))
    eo, en = mo["nccl_variables"], mn["nccl_variables"]
    for k in sorted(set(eo) | set(en)):
        if eo.get(k) != en.get(k):
            said = (f"{k} set to {en[k]}" if k not in eo else f"{k}={eo[k]} unset" if k not in en
                    else f"{k} {eo[k]} → {en[k]}")
            d.changes.append(Change("nccl_env", said, eo.get(k), en.get(k)))
    for host in sorted(set(mo["topology"]) & set(mn["topology"])):
        a, b = mo["topology"][host], mn["topology"][host]
        parts = [p for p in a if a[p] != b.get(p)]
        if parts:
            d.changes.append(Change("topology", f"{host}'s topology changed ({', '.join(parts)})", a, b))
    fo, fn = _finding_keys(old), _finding_keys(new)
    for key in [k for k in fn if k not in fo]:
        d.changes.append(Change("finding", f"new {key[1]} {key[0]}: {fn[key]}", None, fn[key]))
    for key in [k for k in fo if k not in fn]:
        d.changes.append(Change("finding", f"gone: {key[1]} {key[0]} ({fo[key]})", fo[key], None))
    return d
