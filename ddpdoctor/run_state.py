"""The run's state, folded from the event stream: what the CLI's progress, the TUI and a partial report read.

Pure (no rich, no textual, no I/O), so tests feed it recorded events. Unknown events and fields are
ignored: the stream may grow new ones. One object for every reader, so they cannot disagree about which
check ran, which rank finished or what the run was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ddpdoctor.core.events import (
    CheckEnd,
    CheckStart,
    Event,
    Log,
    Progress,
    RankCheckEnd,
    RankCheckStart,
    Rendezvous,
    RunEnd,
    RunStart,
    parse_event,
)
from ddpdoctor.core.report import Finding

PENDING = "pending"
RUNNING = "running"
RANK_STATES = {"ok": "passed", "error": "error", "timed_out": "timed_out"}  # rank_check_end status -> state


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

    @property
    def ranks_done(self) -> int:
        return sum(1 for s in self.ranks.values() if s not in (PENDING, RUNNING))


@dataclass
class RunState:
    world_size: int = 0
    backend: str = ""
    endpoint: str = ""
    nodes: int = 0
    node_names: list[str] = field(default_factory=list)  # hostnames, from run_start
    run_started: bool = False
    rendezvous_ranks: set[int] = field(default_factory=set)  # ranks whose rendezvous event came
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
    def apply(self, ev: Event | Mapping[str, Any]) -> None:
        """Fold one event in (a decoded JSON object is parsed first, as `EventTail` does)."""
        if not isinstance(ev, Event):
            ev = parse_event(ev)
        if ev.t is not None:
            self.started = self.started if self.started is not None else float(ev.t)
            self.last_t = float(ev.t)
        handler = self._HANDLERS.get(type(ev))
        if handler is not None:
            handler(self, ev)

    def expect(self, codes: list[str], titles: list[str]) -> None:
        """The checks the run will run, in order, before any event says so (the CLI knows them at launch)."""
        for code, title in zip(codes, titles):
            self.checks.setdefault(code, CheckRow(code, title))

    def _on_run_start(self, ev: RunStart) -> None:
        self.run_started = True
        self.world_size = rank_count(ev.world_size, self.world_size)
        if isinstance(ev.nodes, list):
            self.node_names = list(ev.nodes)
            self.nodes = len(ev.nodes)
        elif ev.nodes is not None:
            self.nodes = ev.nodes
        self.backend = ev.backend or self.backend
        self.endpoint = ev.endpoint or self.endpoint
        for c in ev.checks:
            self.checks.setdefault(c.code, CheckRow(c.code, c.title))
        for r in range(self.world_size):
            self.ranks.setdefault(r, RankSlot(r))

    def _on_rendezvous(self, ev: Rendezvous) -> None:
        self.ranks[ev.rank] = RankSlot(ev.rank, ev.node_rank, ev.hostname)
        self.rendezvous_ranks.add(ev.rank)
        self.world_size = max(self.world_size, ev.rank + 1)

    def _row(self, code: str, title: str = "") -> CheckRow:
        return self.checks.setdefault(code, CheckRow(code, title))

    def _on_check_start(self, ev: CheckStart) -> None:
        row = self._row(ev.code, ev.title)
        row.title = row.title or ev.title
        row.status = RUNNING
        row.ranks = {r: RUNNING for r in self.ranks}
        self.current = row.code

    def _on_rank_check_start(self, ev: RankCheckStart) -> None:
        """One rank began a check (on a node that does not host rank 0, the first word of it)."""
        row = self._row(ev.code)
        if row.status not in (PENDING, RUNNING):
            return
        row.status = RUNNING
        self.current = row.code
        if ev.rank is not None:
            row.ranks[ev.rank] = RUNNING

    def _on_progress(self, ev: Progress) -> None:
        row = self._row(ev.code)
        if row.status == PENDING:
            row.status = RUNNING
        parts = []
        if ev.done is not None and ev.total:
            parts.append(f"{ev.done:g}/{ev.total:g}")
        if ev.message:
            parts.append(ev.message)
        if parts:
            row.progress = (f"r{ev.rank} " if ev.rank is not None else "") + " ".join(parts)
        if ev.rank is not None:
            row.ranks[ev.rank] = RUNNING

    def _on_rank_check_end(self, ev: RankCheckEnd) -> None:
        """One rank finished its part (ok / error / timed_out) while the others may still run."""
        row = self._row(ev.code)
        if row.status not in (PENDING, RUNNING):
            return
        row.ranks[ev.rank] = RANK_STATES.get(ev.status, RUNNING)

    def _on_check_end(self, ev: CheckEnd) -> None:
        row = self._row(ev.code)
        row.status = ev.status
        row.summary = ev.summary
        row.duration_s = float(ev.duration_s) if ev.duration_s is not None else None
        row.finding_count = ev.findings
        row.progress = ""
        row.ranks = {r: row.status for r in self.ranks}
        if self.current == row.code:
            self.current = None

    def _on_log(self, ev: Log) -> None:
        self.logs.append((ev.level, ev.message))
        del self.logs[:-200]  # the log pane shows the tail; keep memory flat on long runs

    def _on_run_end(self, ev: RunEnd) -> None:
        self.ended = True
        self.exit_code = ev.exit_code
        self.report_path = ev.report or None
        for row in self.checks.values():
            if row.status in (PENDING, RUNNING):
                row.status = "not_run"
                row.ranks = {r: "not_run" for r in self.ranks}
        self.current = None

    _HANDLERS: ClassVar[dict[type, Any]] = {RunStart: _on_run_start, Rendezvous: _on_rendezvous, CheckStart: _on_check_start,
                      RankCheckStart: _on_rank_check_start, Progress: _on_progress, RankCheckEnd: _on_rank_check_end,
                      CheckEnd: _on_check_end, Log: _on_log, RunEnd: _on_run_end}

    # -- queries ----------------------------------------------------------------------------------------
    @property
    def rendezvoused(self) -> bool:
        return bool(self.rendezvous_ranks)

    def ended_rows(self) -> list[CheckRow]:
        """The checks that have a verdict (their check_end came)."""
        return [r for r in self.checks.values() if r.status not in (PENDING, RUNNING)]

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


def int_or(v: Any, default: int) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


# The most rank slots made from a count the stream or a report states (a world_size of 1e9 in a file from
# elsewhere must not cost gigabytes); ranks that report themselves are always shown.
MAX_RANK_SLOTS = 1 << 16


def rank_count(v: Any, default: int) -> int:
    return max(0, min(int_or(v, default), MAX_RANK_SLOTS))
