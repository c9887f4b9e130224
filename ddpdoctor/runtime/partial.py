"""A partial report when rank 0 died before writing one: from the run state (folded from the event
stream) and torchrun's log.

When a worker on the node of rank 0 crashes (segfault, OOM kill, os._exit), torchrun tears down every
worker of that node, rank 0 included. The CLI still saw the checks that finished (check_end events) and
torchrun names the root cause; that is enough for an honest, partial verdict.
"""

from __future__ import annotations

import re
import signal

from ddpdoctor.core.report import CheckResult, Finding, Report, Severity, Status
from ddpdoctor.core.run_info import RunInfo
from ddpdoctor.run_state import RunState

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


def partial_report(state: RunState, cause: dict | None, codes: list[str], titles: list[str]) -> Report | None:
    """None when the run never started (nothing to report: the caller diagnoses the launch instead)."""
    ranks = {r: {"rank": r, "node_rank": state.ranks[r].node_rank, "hostname": state.ranks[r].hostname}
             for r in sorted(state.rendezvous_ranks)}
    if not state.run_started and not ranks:
        return None
    ended = {row.code: row for row in state.ended_rows()}
    current = state.current
    who = (f"rank {cause['rank']} (local rank {cause['local_rank']}) on {cause['host']} died with {cause['text']}"
           if cause else "the workers of this node ended without a report")
    during = f" during {current}" if current else ""
    results = []
    for code, title in zip(codes, titles):
        if code in ended:
            row = ended[code]
            results.append(CheckResult(code=code, title=title, status=Status(row.status), summary=row.summary,
                                       duration_s=float(row.duration_s or 0)))
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
        run=RunInfo(
            backend=state.backend or None,
            world_size=state.world_size if state.run_started else len(ranks),
            nodes=state.node_names if state.run_started else sorted({r["hostname"] for r in ranks.values()}),
            complete=False,
            aborted_reason=f"{who}{during}",
            partial_from="events",
        ),
        ranks=[ranks[r] for r in sorted(ranks)],
        checks=results,
    )
