"""Measured bandwidth against a hardware profile: "% of expected" and a finding below the thresholds.

Reads BW001 and P2P001 payloads (docs/architecture.md, "Bandwidth payloads"); pure, no I/O.

- BW001: the all_reduce busbw at large messages, i.e. the best busbw among the sweep's sizes of at
  least the profile's ``large_message_B`` (one dip at one size is noise, not a slow link; peak busbw
  at large sizes is what nccl-tests readers compare). Against ``all_reduce_busbw_intra_node`` on one
  node, ``all_reduce_busbw_inter_node`` on several. A run with k ranks per node on a profile of g GPUs
  per node expects k/g of the inter-node figure: each GPU brings its share of the node's NICs.
- P2P001: the median of each class (intra-node, inter-node pairs; the links P2P001 itself flagged
  left out, unless it flagged them all) against ``p2p_intra_node`` and
  ``p2p_inter_node``; the slowest pair goes into the evidence.

Below ``fail_below_pct`` of expected: an error; below ``warn_below_pct``: a warning; else nothing
(the percentage is still recorded in the check's data by ``apply_profile``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ddpdoctor.core.report import CheckResult, Finding, Report, Severity, Status, status_from_findings
from ddpdoctor.model.bandwidth.payloads import BwSweepPayload, P2PPayload, ProfileComparison
from ddpdoctor.model.bandwidth.sizes import format_size
from ddpdoctor.model.profiles.detect import MatchResult, as_report
from ddpdoctor.model.profiles.schema import Profile

_HINTS = {
    "all_reduce_busbw_intra_node": "check NVL001/PCI001 findings and NCCL_P2P_*/NCCL_ALGO overrides "
    "(ENV001); compare with nccl-tests all_reduce_perf on the same node",
    "all_reduce_busbw_inter_node": "check IB001/GDR001 findings, NCCL_IB_*/NCCL_SOCKET_IFNAME (NCCL over "
    "sockets instead of RDMA is a classic) and whether every node uses all its NICs",
    "p2p_intra_node": "check NVL001/PCI001 findings and NCCL_P2P_DISABLE / NCCL_P2P_LEVEL",
    "p2p_inter_node": "check IB001/GDR001 findings and which interface NCCL/gloo uses (ENV001)",
}


@dataclass
class Shape:
    backend: str | None
    world_size: int
    nnodes: int
    ranks_per_node: int  # the fewest on any node


def run_shape(report: Report, bw: BwSweepPayload | None = None) -> Shape:
    bw = bw or BwSweepPayload()
    hosts: dict[str, int] = {}
    for r in report.ranks:
        hosts[str(r.get("hostname"))] = hosts.get(str(r.get("hostname")), 0) + 1
    run = report.run
    nnodes = bw.nnodes or run.nnodes
    if nnodes is None:
        nnodes = run.node_count if run.is_set("nodes") or run.counted_nodes is not None else len(hosts)
    world = bw.world_size or run.world_size or len(report.ranks)
    per_node = min(hosts.values()) if hosts else max(1, int(world or 1) // max(1, nnodes or 1))
    backend = bw.backend or run.backend
    return Shape(
        backend=backend, world_size=int(world or 0), nnodes=int(nnodes or 1), ranks_per_node=per_node
    )


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def all_reduce_points(bw: BwSweepPayload) -> list[tuple[int, float]]:
    """(size_B, busbw_GBps) of BW001's all_reduce, from ``ops`` rows or the ``busbw`` curve."""
    rows = bw.ops.get("all_reduce")
    if rows is not None:
        pts = [(r.size_B, r.busbw_GBps) for r in rows]
    else:
        curve = bw.busbw.get("all_reduce")
        pts = list(curve.points) if curve is not None else []
    return sorted((int(s), float(b)) for s, b in pts if _num(s) and _num(b) and b >= 0)


def expected_all_reduce(profile: Profile, shape: Shape) -> tuple[str, float | None, str]:
    """(link class, expected busbw in GB/s or None, how it was scaled) for a run of this shape."""
    if shape.nnodes <= 1:
        return "all_reduce_busbw_intra_node", profile.expected("all_reduce_busbw_intra_node"), ""
    cls = "all_reduce_busbw_inter_node"
    exp = profile.expected(cls)
    gpus = profile.match.gpus_per_node
    if exp is not None and gpus and len(gpus) == 1 and 0 < shape.ranks_per_node < gpus[0]:
        return (
            cls,
            exp * shape.ranks_per_node / gpus[0],
            f"scaled to {shape.ranks_per_node} of {gpus[0]} GPUs per node",
        )
    return cls, exp, ""


def _verdict(profile: Profile, pct: float) -> Severity | None:
    if pct < profile.fail_below_pct:
        return Severity.ERROR
    if pct < profile.warn_below_pct:
        return Severity.WARNING
    return None


def _evidence(profile: Profile, cls: str, measured: float, expected: float, pct: float) -> dict[str, Any]:
    return {
        "profile": profile.name,
        "link_class": cls,
        "measured_GBps": round(measured, 4),
        "expected_GBps": round(expected, 4),
        "pct_of_expected": round(pct, 1),
        "warn_below_pct": profile.warn_below_pct,
        "fail_below_pct": profile.fail_below_pct,
    }


@dataclass
class BwComparison:
    link_class: str
    expected_GBps: float | None
    measured_GBps: float | None = None
    size_B: int | None = None
    pct: float | None = None
    note: str = ""


def compare_bw(report: Report, profile: Profile) -> tuple[BwComparison | None, list[Finding]]:
    c = report.check("BW001")
    if c is None:
        return None, []
    bw = BwSweepPayload.from_json(c.data)
    shape = run_shape(report, bw)
    cls, exp, note = expected_all_reduce(profile, shape)
    comp = BwComparison(cls, exp, note=note)
    pts = all_reduce_points(bw)
    if exp is None or not pts or shape.world_size < 2:
        return comp, []
    large = [(s, b) for s, b in pts if s >= profile.large_message_B]
    if not large:
        msg = (
            f"the sweep's largest all_reduce ({format_size(pts[-1][0])}) is below "
            f"{format_size(profile.large_message_B)}, "
            f"where profile {profile.name}'s {exp:g} GB/s applies: busbw not compared"
        )
        return comp, [
            Finding(
                "BW001",
                Severity.INFO,
                msg,
                evidence={"profile": profile.name, "largest_size_B": pts[-1][0]},
                hint="sweep up to larger sizes to compare with the profile",
            )
        ]
    size, best = max(large, key=lambda p: p[1])
    comp.measured_GBps, comp.size_B, comp.pct = best, size, 100.0 * best / exp
    sev = _verdict(profile, comp.pct)
    if sev is None:
        return comp, []
    where = "one node" if shape.nnodes <= 1 else f"{shape.nnodes} nodes"
    msg = (
        f"all_reduce busbw {best:.3g} GB/s at {format_size(size)} is {comp.pct:.0f}% of the {exp:.3g} GB/s "
        f"expected on {where} of {profile.name}"
    )
    ev = {
        **_evidence(profile, cls, best, exp, comp.pct),
        "size_B": size,
        "world_size": shape.world_size,
        "nnodes": shape.nnodes,
        "rule": f"best busbw at sizes >= {format_size(profile.large_message_B)}",
    }
    if note:
        ev["scaling"] = note
    return comp, [
        Finding(
            "BW001", sev, msg, where={"ranks": list(range(shape.world_size))}, evidence=ev, hint=_HINTS[cls]
        )
    ]


def _hosts(report: Report, p2p: P2PPayload, n: int) -> list[str | None]:
    if len(p2p.ranks) == n:
        return [r.get("hostname") for r in p2p.ranks]
    labels = p2p.matrix.labels if p2p.matrix is not None else ()
    if len(labels) == n and all(isinstance(x, str) and "@" in x for x in labels):
        return [x.split("@", 1)[1] for x in labels]
    by_rank = {int(r["rank"]): r.get("hostname") for r in report.ranks if "rank" in r}
    return [by_rank.get(i) for i in range(n)]


def p2p_classes(report: Report, p2p: P2PPayload) -> dict[str, dict[str, Any]]:
    """{"intra_node"|"inter_node": {"median_GBps", "pairs", "slowest": (i, j, GBps)}} from the matrix."""
    values = p2p.matrix.values if p2p.matrix is not None else ()
    if not values:
        return {
            k: {"median_GBps": v.median_GBps, "pairs": v.pairs, "slowest": None}
            for k, v in p2p.classes.items()
            if v.median_GBps is not None
        }
    n = len(values)
    hosts = _hosts(report, p2p, n)
    # P2P001 already blames the links it flagged (a slow node, a bad path): the profile judges the rest,
    # so one slow node does not make the whole class look slow. With every link flagged, all count.
    flagged = set(p2p.outliers)
    vals: dict[str, list[float]] = {"intra_node": [], "inter_node": []}
    kept: dict[str, list[float]] = {"intra_node": [], "inter_node": []}
    slowest: dict[str, tuple[int, int, float]] = {}
    for i, row in enumerate(values):
        if hosts[i] is None:
            continue
        for j, v in enumerate(row[:n]):  # a 512-rank matrix has 262k cells: keep this loop lean
            if v is None or i == j or type(v) not in (int, float) or hosts[j] is None:
                continue
            cls = "intra_node" if hosts[i] == hosts[j] else "inter_node"
            vals[cls].append(v)
            if (i, j) not in flagged:
                kept[cls].append(v)
            if cls not in slowest or v < slowest[cls][2]:
                slowest[cls] = (i, j, float(v))
    out = {}
    for k, vs in vals.items():
        if vs:
            use = kept[k] or vs
            out[k] = {
                "median_GBps": statistics.median(use),
                "pairs": len(use),
                "slowest": slowest[k],
                "flagged_left_out": len(vs) - len(use),
            }
    return out


def compare_p2p(report: Report, profile: Profile) -> list[Finding]:
    c = report.check("P2P001")
    if c is None:
        return []
    out = []
    for kind, got in sorted(p2p_classes(report, P2PPayload.from_json(c.data)).items()):
        cls = f"p2p_{kind}"
        exp = profile.expected(cls)
        if exp is None:
            continue
        pct = 100.0 * got["median_GBps"] / exp
        sev = _verdict(profile, pct)
        if sev is None:
            continue
        label = kind.replace("_", "-")
        msg = (
            f"{label} point-to-point median {got['median_GBps']:.3g} GB/s over {got['pairs']} pair(s) is "
            f"{pct:.0f}% of the {exp:.3g} GB/s expected on {profile.name}"
        )
        if got.get("flagged_left_out"):
            msg += f" (leaving out the {got['flagged_left_out']} link(s) P2P001 already flagged)"
        ev = {**_evidence(profile, cls, got["median_GBps"], exp, pct), "pairs": got["pairs"]}
        where: dict[str, Any] = {}
        if got["slowest"]:
            i, j, v = got["slowest"]
            ev["slowest_pair"] = {
                "from_rank": i,
                "to_rank": j,
                "GBps": round(v, 4),
                "pct_of_expected": round(100 * v / exp, 1),
            }
            where["link"] = [i, j]
        out.append(Finding("P2P001", sev, msg, where=where, evidence=ev, hint=_HINTS[cls]))
    return out


def _judgement(rep: Report, profile: Profile) -> tuple[BwComparison | None, list[Finding]]:
    bw = rep.check("BW001")
    shape = run_shape(rep, BwSweepPayload.from_json(bw.data) if bw is not None else None)
    if profile.match.backend and shape.backend and shape.backend != profile.match.backend:
        code = next((c for c in ("BW001", "P2P001") if rep.check(c)), None)
        msg = (
            f"profile {profile.name} describes {profile.match.backend} runs; this run used {shape.backend}: "
            f"bandwidth not compared"
        )
        return None, [Finding(code, Severity.INFO, msg, evidence={"profile": profile.name})] if code else []
    comp, bw = compare_bw(rep, profile)
    return comp, bw + compare_p2p(rep, profile)


def judge(report: Report | dict, profile: Profile) -> list[tuple[str, Finding]]:
    """Findings for the report's BW001 and P2P001 figures against ``profile``: (check code, Finding)."""
    _, findings = _judgement(as_report(report), profile)
    return [(f.code, f) for f in findings]


def _worse(status: Status, findings: list[Finding]) -> Status:
    """The check's status after more findings: never better, and a skipped or crashed check stays so."""
    if status not in (Status.PASSED, Status.WARNING, Status.FAILED):
        return status
    order = [Status.PASSED, Status.WARNING, Status.FAILED]
    return max(status, status_from_findings(findings), key=order.index)


def forget_profile(report: Report) -> None:
    """Undo an earlier apply_profile (a saved report judged again, against another profile or none). Its
    findings are the ones whose evidence names a profile; the status is re-derived from what is left,
    as a check's own summary derives it."""
    report.run.unset("profile")
    for code in ("BW001", "P2P001"):
        c = report.check(code)
        if c is None:
            continue
        kept = [f for f in c.findings if "profile" not in f.evidence]
        if len(kept) != len(c.findings):
            c.findings = kept
            if c.status in (Status.PASSED, Status.WARNING, Status.FAILED):
                c.status = status_from_findings(kept)
        if code == "BW001" and "profile" in c.data:
            c.data.pop("profile")
            c.data.pop("expected_busbw_GBps", None)


def apply_profile(
    report: Report, profile: Profile, how: str = "chosen", detection: MatchResult | None = None
) -> list[tuple[str, Finding]]:
    """Judge ``report`` against ``profile`` and write the outcome into it: the findings into their
    checks (statuses follow), BW001's ``expected_busbw_GBps`` (and ``profile`` figures) for the TUI, and
    ``report.run.profile``. Applying again replaces what an earlier call wrote. Returns what judge
    returned."""
    forget_profile(report)
    comp, findings = _judgement(report, profile)
    judged = [(f.code, f) for f in findings]
    for code, finding in judged:
        c: CheckResult | None = report.check(code)
        if c is not None:
            c.findings.append(finding)
            c.status = _worse(c.status, [finding])
    bw = report.check("BW001")
    if bw is not None and comp is not None and comp.expected_GBps is not None:
        reference = ProfileComparison(
            name=profile.name,
            link_class=comp.link_class,
            measured_GBps=comp.measured_GBps,
            size_B=comp.size_B,
            pct_of_expected=None if comp.pct is None else round(comp.pct, 1),
            scaling=comp.note or None,
        )
        # added to the payload as it is (a user's BW001-like check may write more or other keys)
        bw.data.update(expected_busbw_GBps=round(comp.expected_GBps, 4), profile=reference.to_json())
    record: dict[str, Any] = {
        "name": profile.name,
        "how": how,
        "origin": profile.origin,
        "description": profile.description,
        "expected_GBps": dict(profile.expected_GBps),
        "thresholds": {"warn_below_pct": profile.warn_below_pct, "fail_below_pct": profile.fail_below_pct},
    }
    if detection is not None:
        record["match"] = detection.to_dict()
    report.run.profile = record
    return judged
