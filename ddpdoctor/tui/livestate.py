"""The overview's model: checks × ranks, folded from the event stream or read from a report.

Pure (no textual, no I/O), so tests feed it recorded events. Unknown events and fields are ignored:
the stream may grow new ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.core.report import CheckResult, Finding, Report, Severity

PENDING = "pending"
RUNNING = "running"

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


@dataclass
class RankSlot:
    rank: int
    node_rank: int = 0
    hostname: str = "?"


@dataclass
class CheckRow:
    code: str
    title: str
    status: str = PENDING
    ranks: dict[int, str] = field(default_factory=dict)  # rank -> state
    progress: str = ""
    summary: str = ""
    duration_s: float | None = None
    findings: list[Finding] = field(default_factory=list)
    finding_count: int = 0


@dataclass
class RunState:
    world_size: int = 0
    backend: str = ""
    endpoint: str = ""
    nodes: int = 0
    ranks: dict[int, RankSlot] = field(default_factory=dict)
    checks: dict[str, CheckRow] = field(default_factory=dict)
    current: str | None = None
    logs: list[tuple[str, str]] = field(default_factory=list)
    started: float | None = None
    last_t: float | None = None
    ended: bool = False
    exit_code: int | None = None
    report_path: str | None = None
    bad_lines: int = 0

    # -- events ---------------------------------------------------------------------------------------
    def apply(self, ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        t = ev.get("t")
        if isinstance(t, (int, float)):
            self.started = self.started if self.started is not None else float(t)
            self.last_t = float(t)
        handler = getattr(self, f"_on_{kind}", None) if isinstance(kind, str) else None
        if handler is not None:
            handler(ev)

    def _on_run_start(self, ev: dict[str, Any]) -> None:
        self.world_size = _rank_count(ev.get("world_size"), self.world_size)
        nodes = ev.get("nodes")
        self.nodes = len(nodes) if isinstance(nodes, list) else _int(nodes, self.nodes)
        self.backend = str(ev.get("backend") or self.backend)
        self.endpoint = str(ev.get("endpoint") or self.endpoint)
        for c in ev.get("checks") or []:
            if isinstance(c, dict) and c.get("code"):
                self.checks.setdefault(str(c["code"]), CheckRow(str(c["code"]), str(c.get("title") or "")))
        for r in range(self.world_size):
            self.ranks.setdefault(r, RankSlot(r))

    def _on_rendezvous(self, ev: dict[str, Any]) -> None:
        r = ev.get("rank")
        if isinstance(r, int):
            self.ranks[r] = RankSlot(r, _int(ev.get("node_rank"), 0), str(ev.get("hostname") or "?"))
            self.world_size = max(self.world_size, r + 1)

    def _row(self, ev: dict[str, Any]) -> CheckRow | None:
        code = ev.get("code")
        if not isinstance(code, str) or not code:
            return None
        return self.checks.setdefault(code, CheckRow(code, str(ev.get("title") or "")))

    def _on_check_start(self, ev: dict[str, Any]) -> None:
        row = self._row(ev)
        if row is None:
            return
        row.title = row.title or str(ev.get("title") or "")
        row.status = RUNNING
        row.ranks = {r: RUNNING for r in self.ranks}
        self.current = row.code

    def _on_progress(self, ev: dict[str, Any]) -> None:
        row = self._row(ev)
        if row is None:
            return
        if row.status == PENDING:
            row.status = RUNNING
        done, total = ev.get("done"), ev.get("total")
        parts = []
        if isinstance(done, (int, float)) and isinstance(total, (int, float)) and total:
            parts.append(f"{done:g}/{total:g}")
        if ev.get("message"):
            parts.append(str(ev["message"]))
        if parts:
            rank = ev.get("rank")
            row.progress = (f"r{rank} " if isinstance(rank, int) else "") + " ".join(parts)
        rank = ev.get("rank")
        if isinstance(rank, int):
            row.ranks[rank] = RUNNING

    def _on_rank_check_end(self, ev: dict[str, Any]) -> None:
        """One rank finished its part (ok / error / timed_out) while the others may still run."""
        row = self._row(ev)
        rank = ev.get("rank")
        if row is None or not isinstance(rank, int) or row.status not in (PENDING, RUNNING):
            return
        row.ranks[rank] = {"ok": "passed", "error": "error", "timed_out": "timed_out"}.get(str(ev.get("status")), RUNNING)

    def _on_check_end(self, ev: dict[str, Any]) -> None:
        row = self._row(ev)
        if row is None:
            return
        row.status = str(ev.get("status") or "passed")
        row.summary = str(ev.get("summary") or "")
        d = ev.get("duration_s")
        row.duration_s = float(d) if isinstance(d, (int, float)) else None
        row.finding_count = _int(ev.get("findings"), 0)
        row.progress = ""
        row.ranks = {r: row.status for r in self.ranks}
        if self.current == row.code:
            self.current = None

    def _on_log(self, ev: dict[str, Any]) -> None:
        self.logs.append((str(ev.get("level") or "info"), str(ev.get("message") or "")))
        del self.logs[:-200]  # the log pane shows the tail; keep memory flat on long runs

    def _on_run_end(self, ev: dict[str, Any]) -> None:
        self.ended = True
        self.exit_code = _int(ev.get("exit_code"), 2)
        rep = ev.get("report")
        self.report_path = str(rep) if rep else None
        for row in self.checks.values():
            if row.status in (PENDING, RUNNING):
                row.status = "not_run"
                row.ranks = {r: "not_run" for r in self.ranks}
        self.current = None

    # -- queries ----------------------------------------------------------------------------------------
    def rows(self) -> list[CheckRow]:
        return list(self.checks.values())

    def node_groups(self) -> list[tuple[int, str, list[int]]]:
        """(node_rank, hostname, ranks) in node order."""
        groups: dict[int, tuple[str, list[int]]] = {}
        for r in sorted(self.ranks):
            slot = self.ranks[r]
            groups.setdefault(slot.node_rank, (slot.hostname, []))[1].append(r)
        return [(n, h, rs) for n, (h, rs) in sorted(groups.items())]

    @property
    def elapsed(self) -> float:
        if self.started is None or self.last_t is None:
            return 0.0
        return self.last_t - self.started


def _int(v: Any, default: int) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


# The most rank slots the app makes from a count it is told (a world_size of 1e9 in a report from
# elsewhere must not cost gigabytes); ranks that report themselves are always shown.
MAX_RANK_SLOTS = 1 << 16


def _rank_count(v: Any, default: int) -> int:
    return max(0, min(_int(v, default), MAX_RANK_SLOTS))


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
    run = report.run or {}
    st = RunState(
        backend=str(run.get("backend") or ""),
        endpoint=str(run.get("endpoint") or ""),
        ended=True,
        exit_code=report.exit_code(),
    )
    for r in report.ranks:
        if isinstance(r, dict) and isinstance(r.get("rank"), int):
            st.ranks[r["rank"]] = RankSlot(
                r["rank"], _int(r.get("node_rank"), 0), str(r.get("hostname") or "?")
            )
    st.world_size = _rank_count(run.get("world_size"), len(st.ranks))
    for r in range(st.world_size):
        st.ranks.setdefault(r, RankSlot(r))
    st.nodes = _int(run.get("nodes"), len({s.node_rank for s in st.ranks.values()}))
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
