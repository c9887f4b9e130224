"""The overview's glyphs per state, and the run state (ddpdoctor.run_state) read from a saved report.

Pure (no textual, no I/O).
"""

from __future__ import annotations

from ddpdoctor.core.report import CheckResult, Finding, Report, Severity
from ddpdoctor.run_state import PENDING, RUNNING, CheckRow, RankSlot, RunState, int_or, rank_count

# One glyph per state for the per-rank strip; styles for rich.
GLYPHS = {
    PENDING: ("·", "dim"),
    RUNNING: ("…", "bold blue"),
    "passed": ("✓", "green"),
    "warning": ("!", "bold yellow"),
    "failed": ("✗", "bold red"),
    "timed_out": ("T", "bold red"),
    "error": ("E", "bold red"),
    "skipped": ("-", "dim"),
    "not_run": ("-", "dim"),
}
_SEV_STATUS = {Severity.ERROR: "failed", Severity.WARNING: "warning", Severity.INFO: "passed"}


# -- from a saved report ----------------------------------------------------------------------------------
def finding_ranks(f: Finding, state: RunState) -> set[int]:
    """The ranks a finding's ``where`` names (rank, ranks, node hostname, node_rank)."""
    w = f.where or {}
    out: set[int] = set()
    if isinstance(w.get("rank"), int):
        out.add(w["rank"])
    if isinstance(w.get("ranks"), list):
        out.update(r for r in w["ranks"] if isinstance(r, int))
    if out:  # explicit ranks are more precise than the node they sit on
        return out & set(state.ranks)
    host, node_rank = w.get("node"), w.get("node_rank")
    for slot in state.ranks.values():
        if (host is not None and slot.hostname == host) or (
            node_rank is not None and slot.node_rank == node_rank
        ):
            out.add(slot.rank)
    return out & set(state.ranks)


def _rank_states(c: CheckResult, state: RunState) -> dict[int, str]:
    status = c.status.value
    marks = {r: status for r in state.ranks}
    if status not in ("passed", "warning", "failed"):
        return marks  # skipped / timed out / crashed: the whole check, every rank
    named = False
    marks = {r: "passed" for r in state.ranks}
    for f in c.findings:
        ranks = finding_ranks(f, state)
        named = named or bool(ranks)
        for r in ranks:
            st = _SEV_STATUS[f.severity]
            if GLYPH_ORDER.index(st) > GLYPH_ORDER.index(marks[r]):
                marks[r] = st
    if not named:  # findings that name no rank concern them all
        marks = {r: status for r in state.ranks}
    return marks


GLYPH_ORDER = ["passed", "warning", "failed"]


def state_from_report(report: Report) -> RunState:
    run = report.run
    st = RunState(
        backend=str(run.backend or ""),
        endpoint=str(run.endpoint or ""),
        ended=True,
        exit_code=report.exit_code(),
    )
    for r in report.ranks:
        if isinstance(r, dict) and isinstance(r.get("rank"), int):
            st.ranks[r["rank"]] = RankSlot(
                r["rank"], int_or(r.get("node_rank"), 0), str(r.get("hostname") or "?")
            )
    st.world_size = rank_count(run.world_size, len(st.ranks))
    for r in range(st.world_size):
        st.ranks.setdefault(r, RankSlot(r))
    st.nodes = int_or(run.counted_nodes, len({s.node_rank for s in st.ranks.values()}))
    for c in report.checks:
        st.checks[c.code] = CheckRow(
            code=c.code,
            title=c.title,
            status=c.status.value,
            ranks=_rank_states(c, st),
            summary=c.summary,
            duration_s=c.duration_s,
            findings=list(c.findings),
            finding_count=len(c.findings),
        )
    return st
