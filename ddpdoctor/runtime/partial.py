"""A partial report when rank 0 died before writing one: from the event stream and torchrun's log.

When a worker on the node of rank 0 crashes (segfault, OOM kill, os._exit), torchrun tears down every
worker of that node, rank 0 included. The CLI still saw the checks that finished (check_end events) and
torchrun names the root cause; that is enough for an honest, partial verdict.
"""

from __future__ import annotations

import re
import signal

from ddpdoctor.core.report import CheckResult, Finding, Report, Severity, Status

_ROOT_CAUSE = re.compile(
    r"Root Cause.*?host\s*:\s*(?P<host>\S+).*?rank\s*:\s*(?P<rank>\d+)\s*\(local_rank:\s*(?P<local>\d+)\)"
    r".*?exitcode\s*:\s*(?P<code>-?\d+)",
    re.S,
)


def root_cause(log: str) -> dict | None:
    m = _ROOT_CAUSE.search(log)
    if not m:
        return None
    code = int(m.group("code"))
    sig = ""
    if code < 0:
        try:
            sig = f" ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return {"host": m.group("host"), "rank": int(m.group("rank")), "local_rank": int(m.group("local")),
            "exitcode": code, "signal": sig.strip(" ()") or None, "text": f"exit code {code}{sig}"}


def partial_report(events: list[dict], cause: dict | None, codes: list[str], titles: list[str]) -> Report | None:
    """None when the run never started (nothing to report: the caller diagnoses the launch instead)."""
    start = next((e for e in events if e.get("event") == "run_start"), None)
    ranks = {}
    for e in events:
        if e.get("event") == "rendezvous":
            ranks[int(e["rank"])] = {"rank": int(e["rank"]), "node_rank": e.get("node_rank"), "hostname": e.get("hostname")}
    if start is None and not ranks:
        return None
    ended = {e["code"]: e for e in events if e.get("event") == "check_end"}
    running = [e.get("code") for e in events if e.get("event") in ("check_start", "rank_check_start")]
    current = next((c for c in reversed(running) if c not in ended), None)
    who = (f"rank {cause['rank']} (local rank {cause['local_rank']}) on {cause['host']} died with {cause['text']}"
           if cause else "the workers of this node ended without a report")
    during = f" during {current}" if current else ""
    results = []
    for code, title in zip(codes, titles):
        if code in ended:
            e = ended[code]
            results.append(CheckResult(code=code, title=title, status=Status(e.get("status", "passed")),
                                       summary=e.get("summary", ""), duration_s=float(e.get("duration_s", 0))))
        elif code == current:
            results.append(CheckResult(
                code=code, title=title, status=Status.FAILED, summary=who,
                findings=[Finding(code, Severity.ERROR, f"{who}{during}", where={"ranks": [cause["rank"]]} if cause else {},
                                  evidence=cause or {},
                                  hint="a crashed rank takes down its node's workers under torchrun; see dmesg "
                                       "(OOM killer, Xid errors) and the torchrun log")]))
        else:
            results.append(CheckResult(code=code, title=title, status=Status.NOT_RUN, summary="not run: the run ended early"))
    return Report(
        run={
            "backend": (start or {}).get("backend"),
            "world_size": (start or {}).get("world_size", len(ranks)),
            "nodes": (start or {}).get("nodes", sorted({r["hostname"] for r in ranks.values()})),
            "complete": False,
            "aborted_reason": f"{who}{during}",
            "partial_from": "events",
        },
        ranks=[ranks[r] for r in sorted(ranks)],
        checks=results,
    )
