"""Rank 0's judgement of one check from what each rank posted. Pure.

A rank posts ``{"status": "ok" | "error" | "timed_out", ...}``; a rank that posted nothing is either
lost (its heartbeat stopped: process or node gone) or stuck without a watchdog report.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ddpdoctor.core.report import Finding, Severity, Status
from ddpdoctor.core.world import WorldInfo
from ddpdoctor.model.nodes.spread import fmt_ranks


@dataclass
class Verdict:
    findings: list[Finding] = field(default_factory=list)
    status: Status | None = None  # None: the check's own summary decides
    summary: str = ""
    next_step: str = "continue"  # continue | new_group | abort


def _nodes_of(ranks, world: WorldInfo) -> str:
    by_node: dict[str, list[int]] = {}
    for r in sorted(ranks):
        if r < world.world_size:
            info = world.ranks[r]
            by_node.setdefault(f"{info.hostname} (node {info.node_rank})", []).append(r)
        else:
            by_node.setdefault("?", []).append(r)
    return "; ".join(f"{host}: ranks {fmt_ranks(rs)}" for host, rs in by_node.items())


def classify_ranks(
    per_rank: dict[int, dict | None], lost: set[int], world: WorldInfo, code: str, budget_s: float
) -> Verdict:
    v = Verdict()
    timed_out = {r: d for r, d in per_rank.items() if d and d.get("status") == "timed_out"}
    errors = {r: d for r, d in per_rank.items() if d and d.get("status") == "error"}
    silent = {r for r, d in per_rank.items() if d is None}
    gone = silent & lost
    stuck_silent = silent - lost

    if gone:
        nodes = {world.ranks[r].node_rank for r in gone if r < world.world_size}
        whole = [n for n in nodes if set(world.ranks_on_node(n)) <= gone]
        what = "lost node" if whole else "lost rank"
        v.findings.append(
            Finding(
                code,
                Severity.ERROR,
                f"{what} during {code}: {_nodes_of(gone, world)} stopped responding (no heartbeat)",
                where={"ranks": sorted(gone), "nodes": sorted({world.ranks[r].hostname for r in gone})},
                evidence={"heartbeat_timeout_s": 3.0},
                hint="check that node's health (dmesg, OOM killer, power, network) and re-run",
            )
        )
        v.status, v.next_step = Status.FAILED, "abort"
        v.summary = f"{what}: {_nodes_of(gone, world)}"

    if timed_out or stuck_silent:
        ops = Counter(d.get("op") or "" for d in timed_out.values())
        # "(...)" names Python code, not a collective (the watchdog's "(no collective: Python code)")
        collective_ops = [(op, n) for op, n in ops.most_common() if op and not op.startswith("(")]
        waited_op = collective_ops[0][0] if collective_ops else (ops.most_common(1)[0][0] if ops else "")
        waiting = sorted(r for r, d in timed_out.items() if (d.get("op") or "") == waited_op)
        behind = sorted(set(timed_out) - set(waiting) | stuck_silent)
        msg = f"timed out after {budget_s:g} s in {waited_op or 'the check'}"
        if waiting and behind:
            msg += f"; ranks {fmt_ranks(behind)} never arrived"
        elif not waiting and behind:
            msg += f"; ranks {fmt_ranks(behind)} stuck"
        evidence = {
            "budget_s": budget_s,
            "per_rank": {
                str(r): {"op": d.get("op"), "op_seconds": d.get("op_seconds"), "stack": d.get("stack", [])[-2:]}
                for r, d in sorted(timed_out.items())
            },
        }
        where = {"ranks": sorted(set(timed_out) | stuck_silent), "waiting": waiting, "never_arrived": behind}
        if behind:
            where["nodes"] = sorted({world.ranks[r].hostname for r in behind if r < world.world_size})
        v.findings.append(Finding(code, Severity.ERROR, msg, where=where, evidence=evidence,
                                  hint="a rank that never reaches a collective hangs the others; "
                                       "see the stack of the ranks that never arrived"))
        if v.status is None:
            v.status, v.summary = Status.TIMED_OUT, msg
        v.next_step = "abort"

    if errors:
        by_msg: dict[str, list[int]] = {}
        for r, d in errors.items():
            by_msg.setdefault(d.get("error") or "error", []).append(r)
        for msg, ranks in by_msg.items():
            op = errors[ranks[0]].get("op")
            where = f" in {op}" if op else ""
            v.findings.append(
                Finding(code, Severity.ERROR, f"ranks {fmt_ranks(ranks)} failed{where}: {msg}",
                        where={"ranks": sorted(ranks)},
                        evidence={"traceback": errors[ranks[0]].get("traceback", "")[-1500:]})
            )
        if v.status is None:
            v.status = Status.ERROR
            v.summary = f"ranks {fmt_ranks(errors)} failed: {next(iter(by_msg))}"
        if v.next_step == "continue":
            v.next_step = "new_group"  # a failed collective can leave the group poisoned
    return v
