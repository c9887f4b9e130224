"""The run's state, folded from the event stream: what the CLI's progress, the TUI and a partial report read.

Pure (no rich, no textual, no I/O), so tests feed it recorded events. Unknown events and fields are
ignored: the stream may grow new ones. One object for every reader, so they cannot disagree about which
check ran, which rank finished or what the run was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    def apply(self, ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        t = ev.get("t")
        if isinstance(t, (int, float)):
            self.started = self.started if self.started is not None else float(t)
            self.last_t = float(t)
        handler = getattr(self, f"_on_{kind}", None) if isinstance(kind, str) else None
        if handler is not None:
            handler(ev)

    def expect(self, codes: list[str], titles: list[str]) -> None:
        """The checks the run will run, in order, before any event says so (the CLI knows them at launch)."""
        for code, title in zip(codes, titles):
            self.checks.setdefault(code, CheckRow(code, title))

    def _on_run_start(self, ev: dict[str, Any]) -> None:
        self.run_started = True
        self.world_size = rank_count(ev.get("world_size"), self.world_size)
        nodes = ev.get("nodes")
        if isinstance(nodes, list):
            self.node_names = [str(n) for n in nodes]
        self.nodes = len(nodes) if isinstance(nodes, list) else int_or(nodes, self.nodes)
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
            self.ranks[r] = RankSlot(r, int_or(ev.get("node_rank"), 0), str(ev.get("hostname") or "?"))
            self.rendezvous_ranks.add(r)
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

    def _on_rank_check_start(self, ev: dict[str, Any]) -> None:
        """One rank began a check (on a node that does not host rank 0, the first word of it)."""
        row = self._row(ev)
        rank = ev.get("rank")
        if row is None or row.status not in (PENDING, RUNNING):
            return
        row.status = RUNNING
        self.current = row.code
        if isinstance(rank, int):
            row.ranks[rank] = RUNNING

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
        row.ranks[rank] = RANK_STATES.get(str(ev.get("status")), RUNNING)

    def _on_check_end(self, ev: dict[str, Any]) -> None:
        row = self._row(ev)
        if row is None:
            return
        row.status = str(ev.get("status") or "passed")
        row.summary = str(ev.get("summary") or "")
        d = ev.get("duration_s")
        row.duration_s = float(d) if isinstance(d, (int, float)) else None
        row.finding_count = int_or(ev.get("findings"), 0)
        row.progress = ""
        row.ranks = {r: row.status for r in self.ranks}
        if self.current == row.code:
            self.current = None

    def _on_log(self, ev: dict[str, Any]) -> None:
        self.logs.append((str(ev.get("level") or "info"), str(ev.get("message") or "")))
        del self.logs[:-200]  # the log pane shows the tail; keep memory flat on long runs

    def _on_run_end(self, ev: dict[str, Any]) -> None:
        self.ended = True
        self.exit_code = int_or(ev.get("exit_code"), 2)
        rep = ev.get("report")
        self.report_path = str(rep) if rep else None
        for row in self.checks.values():
            if row.status in (PENDING, RUNNING):
                row.status = "not_run"
                row.ranks = {r: "not_run" for r in self.ranks}
        self.current = None

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
