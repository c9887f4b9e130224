"""What changed between two reports, beyond noise (pure): ``ddpdoctor diff OLD NEW``.

Compared: the node set; bus bandwidth per collective and size band (the median relative change over
the band's sizes, so one noisy size does not speak for the band); each p2p link between two hosts
(the median over their rank pairs) and its latency; versions (torch, NCCL, CUDA, driver) and NCCL
variables; each node's topology; findings that appeared or went away (by code, severity and the
nodes they name, not by their numbers). ``Thresholds`` holds the noise lines; their defaults come
from the run-to-run spread measured on the netns bed (benchmarks/diff_noise.py, README).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ddpdoctor.model.fleet.history import meta
from ddpdoctor.model.fleet.metrics import matrix_cells
from ddpdoctor.model.sizes import format_size
from ddpdoctor.report.model import Report, Severity

# Sizes below this are latency-bound: their busbw is noisy and says little about the links.
LARGE_FROM_B = 1 << 20
VERSION_NAMES = {"torch": "torch", "nccl": "NCCL", "cuda": "CUDA", "driver": "driver", "python": "Python"}


@dataclass(frozen=True)
class Thresholds:
    busbw_small: float = 0.60  # relative change of the median over sizes < 1 MiB
    busbw_large: float = 0.30  # sizes >= 1 MiB
    p2p: float = 0.40  # a link's bandwidth
    latency: float = 1.00  # a link's latency (latency on a loaded CPU box doubles easily)


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


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def _moved(what: str, old: float, new: float, unit: str, up_word: str = "rose", down_word: str = "fell") -> str:
    rel = (new - old) / old
    return f"{what} {down_word if rel < 0 else up_word} {abs(rel):.0%} ({_fmt(old)} → {_fmt(new)} {unit})".replace(
        "%", " %", 1)


def _busbw(report: Report) -> dict[str, dict[int, float]]:
    bw = report.check("BW001")
    ops = bw.data.get("ops") if bw is not None and isinstance(bw.data.get("ops"), dict) else {}
    return {op: {r["size_B"]: r["busbw_GBps"] for r in rows if isinstance(r, dict)
                 and isinstance(r.get("size_B"), int) and isinstance(r.get("busbw_GBps"), (int, float))
                 and r["busbw_GBps"] > 0}
            for op, rows in ops.items() if isinstance(rows, list)}


def _links(report: Report, key: str) -> dict[tuple[str, str], float]:
    p2p = report.check("P2P001")
    cells: dict[tuple[str, str], list[float]] = {}
    for a, b, v in matrix_cells(p2p.data.get(key) if p2p is not None else None):
        if v > 0:
            cells.setdefault((a.partition("@")[2] or a, b.partition("@")[2] or b), []).append(v)
    return {k: statistics.median(v) for k, v in cells.items()}


def _finding_keys(report: Report) -> dict[tuple, str]:
    out = {}
    for c in report.checks:
        for f in c.findings:
            if f.severity is Severity.INFO:
                continue
            w = f.where or {}
            nodes = tuple(sorted({w["node"]} if w.get("node") else set(w.get("nodes") or [])))
            out.setdefault((f.code, f.severity.value, nodes), f.message)
    return out


def diff_reports(old: Report, new: Report, th: Thresholds = Thresholds(), now: float | None = None) -> ReportDiff:
    d = ReportDiff(thresholds=th)
    mo, mn = meta(old, 0), meta(new, 0)
    for label, rep in (("OLD", old), ("NEW", new)):
        until = (rep.run.get("history") or {}).get("valid_until")
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
            rel = statistics.median((bn[op][s] - bo[op][s]) / bo[op][s] for s in sizes)
            if abs(rel) > limit:
                s = max(sizes, key=lambda x: abs(bn[op][x] - bo[op][x]) / bo[op][x] if band == "small" else x)
                d.changes.append(Change("busbw", _moved(f"{op} busbw at {format_size(s)}", bo[op][s], bn[op][s],
                                                        "GB/s"), bo[op][s], bn[op][s], rel))
    for key, kind, limit, unit in (("matrix", "p2p", th.p2p, "GB/s"), ("latency", "latency", th.latency, "µs")):
        lo, ln = _links(old, key), _links(new, key)
        for a, b in sorted(set(lo) & set(ln)):
            rel = (ln[a, b] - lo[a, b]) / lo[a, b]
            if abs(rel) > limit:
                what = f"p2p {a} → {b}" + (" latency" if kind == "latency" else "")
                d.changes.append(Change(kind, _moved(what, lo[a, b], ln[a, b], unit), lo[a, b], ln[a, b], rel))
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
