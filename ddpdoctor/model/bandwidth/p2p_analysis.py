"""Peer-relative verdicts on a point-to-point bandwidth matrix: which node, rank or link is slow. Pure.

No vendor baseline is needed: links are compared with their peers of the same class (same node,
across nodes). The reasoning, per class:

* A rank's *best* link in a class is what its own hardware can do at least (a slow NIC or a starved
  rank has no fast link at all). The class reference is the upper quartile of the ranks' best links —
  the typical healthy rank, as long as most ranks are healthy.
* A rank whose best sending (or receiving) link is far below the reference is a slow sender (receiver).
  When every rank of a node is, the *node* is slow in that direction; otherwise the rank is.
* A link far below what both its ends reach elsewhere — ``min(best_out(i), best_in(j))`` — is a bad
  link; when every measured link from node A to node B is bad, it is the path A → B.
* i→j far below j→i is an asymmetric pair (unless a slow sender or receiver already explains it).

With only two parties in a class (two nodes; two ranks on one node) a slow sender on one side and a
slow receiver on the other look the same; the verdict then names the path between them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import median
from typing import Any

INTRA, INTER = "intra_node", "inter_node"


@dataclass
class Thresholds:
    slow_frac: float = 0.5  # below this fraction of the reference: slow (warning)
    bad_frac: float = 0.25  # below this: error
    asym_ratio: float = 0.6  # min/max of the two directions below this: asymmetric


@dataclass
class Verdict:
    """One localized problem. ``kind``: slow_node, slow_rank, slow_path, bad_link, asymmetric."""

    kind: str
    severity: str  # warning | error
    message: str
    pairs: list[tuple[int, int]] = field(default_factory=list)
    where: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class Analysis:
    classes: dict[str, dict[str, Any]]
    verdicts: list[Verdict]
    asymmetric: list[dict[str, Any]]

    @property
    def outliers(self) -> list[tuple[int, int]]:
        seen: dict[tuple[int, int], None] = {}
        for v in self.verdicts:
            if v.kind != "asymmetric":
                for p in v.pairs:
                    seen[p] = None
        return sorted(seen)

    @property
    def suspects(self) -> list[tuple[int, int]]:
        """Outliers plus the slow direction of every asymmetric pair: what deserves a second measurement."""
        out = set(self.outliers)
        for row in self.asymmetric:
            out.add((row["a"], row["b"]) if row["a_to_b_GBps"] < row["b_to_a_GBps"] else (row["b"], row["a"]))
        return sorted(out)

    def localization(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {"slow_nodes": [], "slow_ranks": [], "bad_links": []}
        key = {
            "slow_node": "slow_nodes",
            "slow_rank": "slow_ranks",
            "slow_path": "bad_links",
            "bad_link": "bad_links",
        }
        for v in self.verdicts:
            if v.kind in key:
                out[key[v.kind]].append({**v.where, **v.evidence, "severity": v.severity})
        return out


@dataclass
class _World:
    """What every verdict needs to know about the cluster, and the pairs already accounted for."""

    node_of: list[int]
    hosts: list[str]
    th: Thresholds
    explained: set[tuple[int, int]] = field(default_factory=set)


@dataclass
class _LinkClass:
    """One link class: its measured links, each rank's best link out and in, and the references."""

    name: str
    links: dict[tuple[int, int], float]
    best_out: dict[int, float]
    best_in: dict[int, float]
    ref_out: float
    ref_in: float


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _fmt(gbps: float) -> str:
    return f"{gbps:.3g} GB/s"


def analyze(
    values: list[list[Any]],
    node_of: list[int],
    hosts: list[str],
    thresholds: Thresholds | None = None,
) -> Analysis:
    """Verdicts on ``values[i][j]`` (GB/s, i sends to j; None = not measured).

    ``node_of[r]`` is rank r's node index and ``hosts[k]`` node k's hostname.
    """
    th = thresholds or Thresholds()
    n = len(values)
    if len(node_of) != n or any(len(row) != n for row in values):
        raise ValueError("the matrix must be square with one node index per rank")
    cls_of = lambda i, j: INTRA if node_of[i] == node_of[j] else INTER  # noqa: E731
    links: dict[str, dict[tuple[int, int], float]] = {INTRA: {}, INTER: {}}
    for i in range(n):
        for j in range(n):
            if i != j and _num(values[i][j]):
                links[cls_of(i, j)][(i, j)] = float(values[i][j])

    classes: dict[str, dict[str, Any]] = {}
    verdicts: list[Verdict] = []
    w = _World(node_of, hosts, th)
    for cls, lk in links.items():
        if not lk:
            continue
        best_out: dict[int, float] = {}
        best_in: dict[int, float] = {}
        for (i, j), v in lk.items():
            best_out[i] = max(best_out.get(i, 0.0), v)
            best_in[j] = max(best_in.get(j, 0.0), v)
        c = _LinkClass(
            cls,
            lk,
            best_out,
            best_in,
            quantile(list(best_out.values()), 0.75),
            quantile(list(best_in.values()), 0.75),
        )
        classes[cls] = {
            "median_GBps": round(median(list(lk.values())), 6),
            "reference_GBps": round(min(c.ref_out, c.ref_in), 6),
            "pairs": len(lk),
        }
        parties = {node_of[r] for r in best_out} | {node_of[r] for r in best_in}
        two_party = (cls == INTER and len(parties) == 2) or (cls == INTRA and len(best_out | best_in) == 2)
        if two_party:
            classes[cls]["note"] = "two parties only: a slow sender and a slow receiver look the same"
            verdicts += _two_party(c, w)
        verdicts += _slow_parties(c, w, node_level=not two_party)
        verdicts += _bad_links(c, w)
    asym, asym_verdicts = _asymmetry(links, w)
    verdicts += asym_verdicts
    return Analysis(classes=classes, verdicts=verdicts, asymmetric=asym)


def _sev(value: float, ref: float, th: Thresholds) -> str:
    return "error" if value < th.bad_frac * ref else "warning"


def _slow_parties(c: _LinkClass, w: _World, node_level: bool = True) -> list[Verdict]:
    lk, cls, best_out, best_in, ref_out, ref_in = c.links, c.name, c.best_out, c.best_in, c.ref_out, c.ref_in
    node_of, hosts, th, explained = w.node_of, w.hosts, w.th, w.explained
    slow_send = {r for r, b in best_out.items() if b < th.slow_frac * ref_out}
    slow_recv = {r for r, b in best_in.items() if b < th.slow_frac * ref_in}
    out: list[Verdict] = []
    ranks_of: dict[int, list[int]] = {}
    for r in set(best_out) | set(best_in):
        ranks_of.setdefault(node_of[r], []).append(r)
    where_cls = "links to other nodes" if cls == INTER else "links inside its node"
    rank_dirs: dict[int, list[str]] = {}
    for node, ranks in sorted(ranks_of.items()):
        ranks.sort()
        dirs = []
        for label, slow, best, ref in (
            ("sending", slow_send, best_out, ref_out),
            ("receiving", slow_recv, best_in, ref_in),
        ):
            members = [r for r in ranks if r in best]
            if members and all(r in slow for r in members):
                dirs.append((label, max(best[r] for r in members), ref))
            else:
                for r in members:
                    if r in slow:
                        rank_dirs.setdefault(r, []).append(label)
        if not dirs or not node_level:
            continue  # with two parties a whole node's slowness is the path's (see _two_party)
        worst = min(b / ref for _, b, ref in dirs)
        pairs = [
            p
            for p in lk
            if (any(d == "sending" for d, _, _ in dirs) and node_of[p[0]] == node)
            or (any(d == "receiving" for d, _, _ in dirs) and node_of[p[1]] == node)
        ]
        explained.update(pairs)
        parts = [
            f"{d} at {_fmt(b)} at best ({b / ref:.0%} of the {_fmt(ref)} its peers reach)"
            for d, b, ref in dirs
        ]
        out.append(
            Verdict(
                kind="slow_node",
                severity="error" if worst < th.bad_frac else "warning",
                message=f"node {hosts[node]} is slow on its {where_cls}: " + "; ".join(parts),
                pairs=sorted(pairs),
                where={"node": hosts[node], "node_rank": node, "ranks": ranks, "class": cls},
                evidence={f"best_{d}_GBps": round(b, 6) for d, b, _ in dirs}
                | {
                    "reference_GBps": round(min(ref for _, _, ref in dirs), 6),
                    "pct_of_peers": round(100 * worst, 1),
                    "directions": [d for d, _, _ in dirs],
                },
            )
        )
    for r, dirs in sorted(rank_dirs.items()):
        vals = {d: (best_out if d == "sending" else best_in)[r] for d in dirs}
        refs = {d: ref_out if d == "sending" else ref_in for d in dirs}
        worst = min(vals[d] / refs[d] for d in dirs)
        pairs = [p for p in lk if ("sending" in dirs and p[0] == r) or ("receiving" in dirs and p[1] == r)]
        explained.update(pairs)
        out.append(
            Verdict(
                kind="slow_rank",
                severity="error" if worst < th.bad_frac else "warning",
                message=f"rank {r} on {hosts[node_of[r]]} is slow on its {where_cls} while its node's other ranks "
                "are not: "
                + "; ".join(
                    f"{d} at {_fmt(vals[d])} at best ({vals[d] / refs[d]:.0%} of {_fmt(refs[d])})"
                    for d in dirs
                ),
                pairs=sorted(pairs),
                where={"rank": r, "node": hosts[node_of[r]], "class": cls},
                evidence={f"best_{d}_GBps": round(vals[d], 6) for d in dirs}
                | {
                    "reference_GBps": round(min(refs.values()), 6),
                    "pct_of_peers": round(100 * worst, 1),
                    "directions": dirs,
                },
            )
        )
    return out


def _bad_links(c: _LinkClass, w: _World) -> list[Verdict]:
    lk, cls, best_out, best_in = c.links, c.name, c.best_out, c.best_in
    node_of, hosts, th, explained = w.node_of, w.hosts, w.th, w.explained
    bad: dict[tuple[int, int], tuple[float, float]] = {}
    for (i, j), v in lk.items():
        if (i, j) in explained:
            continue
        expect = min(best_out[i], best_in[j])
        if v < th.slow_frac * expect:
            bad[(i, j)] = (v, expect)
    out: list[Verdict] = []
    by_nodes: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for p in bad:
        by_nodes.setdefault((node_of[p[0]], node_of[p[1]]), []).append(p)
    for (a, b), pairs in sorted(by_nodes.items()):
        all_ab = [p for p in lk if node_of[p[0]] == a and node_of[p[1]] == b]
        if cls == INTER and len(pairs) == len(all_ab) and len(pairs) > 1:
            worst_v = min(bad[p][0] for p in pairs)
            expect = median([bad[p][1] for p in pairs])
            typical = median([bad[p][0] for p in pairs])
            explained.update(pairs)
            out.append(
                Verdict(
                    kind="slow_path",
                    severity=_sev(worst_v, expect, th),
                    message=f"the path {hosts[a]} → {hosts[b]} is slow: every measured link runs at "
                    f"{_fmt(typical)} while both ends reach {_fmt(expect)} elsewhere",
                    pairs=sorted(pairs),
                    where={"from_node": hosts[a], "to_node": hosts[b], "class": cls},
                    evidence={
                        "median_GBps": round(typical, 6),
                        "expected_from_ends_GBps": round(expect, 6),
                        "pct_of_peers": round(100 * typical / expect, 1),
                    },
                )
            )
            continue
        for p in sorted(pairs):
            v, expect = bad[p]
            explained.add(p)
            out.append(
                Verdict(
                    kind="bad_link",
                    severity=_sev(v, expect, th),
                    message=f"link rank {p[0]} ({hosts[node_of[p[0]]]}) → rank {p[1]} ({hosts[node_of[p[1]]]}) is slow: "
                    f"{_fmt(v)} while both ends reach {_fmt(expect)} on other links ({v / expect:.0%})",
                    pairs=[p],
                    where={"from_rank": p[0], "to_rank": p[1], "class": cls},
                    evidence={
                        "GBps": round(v, 6),
                        "expected_from_ends_GBps": round(expect, 6),
                        "pct_of_peers": round(100 * v / expect, 1),
                    },
                )
            )
    return out


def _two_party(c: _LinkClass, w: _World) -> list[Verdict]:
    """Two nodes (or two ranks): compare each direction with the other and with the class's best."""
    lk, cls = c.links, c.name
    node_of, hosts, th, explained = w.node_of, w.hosts, w.th, w.explained
    by_dir: dict[tuple[int, int], list[float]] = {}
    key = (lambda r: node_of[r]) if cls == INTER else (lambda r: r)
    for (i, j), v in lk.items():
        by_dir.setdefault((key(i), key(j)), []).append(v)
    if len(by_dir) < 2:
        return []
    med = {d: median(vs) for d, vs in by_dir.items()}
    best = max(med.values())
    out = []
    for (a, b), m in sorted(med.items()):
        if m >= th.slow_frac * best:
            continue
        pairs = sorted(p for p in lk if (key(p[0]), key(p[1])) == (a, b))
        explained.update(pairs)
        name = (lambda k: hosts[k]) if cls == INTER else (lambda k: f"rank {k}")
        out.append(
            Verdict(
                kind="slow_path",
                severity=_sev(m, best, th),
                message=f"{name(a)} → {name(b)} runs at {_fmt(m)} but {name(b)} → {name(a)} at {_fmt(med[(b, a)])}"
                f" ({m / best:.0%}): a slow link in one direction (with two "
                f"{'nodes' if cls == INTER else 'ranks'} a slow sender and a slow receiver look the same)",
                pairs=pairs,
                where={"from": name(a), "to": name(b), "class": cls},
                evidence={
                    "median_GBps": round(m, 6),
                    "reverse_GBps": round(med[(b, a)], 6),
                    "pct_of_peers": round(100 * m / best, 1),
                    "asymmetric": True,
                },
            )
        )
    return out


def _asymmetry(
    links: dict[str, dict[tuple[int, int], float]], w: _World
) -> tuple[list[dict[str, Any]], list[Verdict]]:
    node_of, hosts, th, explained = w.node_of, w.hosts, w.th, w.explained
    rows: list[dict[str, Any]] = []
    groups: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for lk in links.values():
        for (i, j), v in lk.items():
            if i > j or (j, i) not in lk:
                continue
            w = lk[(j, i)]
            hi = max(v, w)
            ratio = min(v, w) / hi if hi > 0 else 1.0
            if ratio >= th.asym_ratio:
                continue
            slow = (i, j) if v < w else (j, i)
            row = {
                "a": i,
                "b": j,
                "a_to_b_GBps": round(v, 6),
                "b_to_a_GBps": round(w, 6),
                "ratio": round(ratio, 4),
                "explained": slow in explained,
            }
            rows.append(row)
            if slow not in explained:
                groups.setdefault((node_of[slow[0]], node_of[slow[1]]), []).append(row)
    verdicts = []
    for (a, b), rs in sorted(groups.items()):
        pairs = [(r["a"], r["b"]) if r["a_to_b_GBps"] < r["b_to_a_GBps"] else (r["b"], r["a"]) for r in rs]
        where = f"{hosts[a]} → {hosts[b]}" if a != b else f"inside {hosts[a]}"
        verdicts.append(
            Verdict(
                kind="asymmetric",
                severity="warning",
                message=f"asymmetric links ({where}): "
                + "; ".join(
                    f"rank {p[0]} → {p[1]} {_fmt(min(r['a_to_b_GBps'], r['b_to_a_GBps']))} vs "
                    f"{_fmt(max(r['a_to_b_GBps'], r['b_to_a_GBps']))} back"
                    for p, r in zip(pairs[:4], rs[:4])
                )
                + (f" (+{len(rs) - 4} more)" if len(rs) > 4 else ""),
                pairs=pairs,
                where={"from_node": hosts[a], "to_node": hosts[b]},
                evidence={"min_ratio": min(r["ratio"] for r in rs)},
            )
        )
    return rows, verdicts
