"""The events of a check run, typed: what the ranks and the CLI write (ddpdoctor/events.py) and the
CLI's progress, the TUI and partial reports read (through ddpdoctor/run_state.py).

One dataclass per event kind (the table in docs/architecture.md): writers build them, readers get them
back from `parse_event` and read attributes. The JSON is one object per line, ``event`` (the kind)
first and ``t`` (unix time) last. A reader is lenient: the stream is advisory, may come from another
version, and a line that does not make a known event is an `OtherEvent` (kept as it was), never an error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _num(v: Any) -> float | None:
    """A number as written (an int stays an int, so the JSON reads back the same), else None."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


def _code(d: Mapping[str, Any]) -> str | None:
    code = d.get("code")
    return code if isinstance(code, str) and code else None


@dataclass
class Event:
    """What every event has: its kind (``event`` in the JSON) and when (``t``, unix time)."""

    KIND: ClassVar[str] = ""
    OPTIONAL: ClassVar[tuple[str, ...]] = ()  # fields left out of the JSON when None
    t: float | None = field(default=None, kw_only=True)
    extra: dict[str, Any] = field(default_factory=dict, kw_only=True)  # fields this version does not know

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"event": self.KIND}
        for f in dataclasses.fields(self):
            if f.name in ("t", "extra"):
                continue
            value = getattr(self, f.name)
            if value is None and f.name in self.OPTIONAL:
                continue
            out[f.name] = [v.to_json() for v in value] if f.name == "checks" else value
        out.update(self.extra)
        if self.t is not None:
            out["t"] = self.t
        return out

    @classmethod
    def known(cls) -> set[str]:
        return {f.name for f in dataclasses.fields(cls)} | {"event"}


@dataclass
class CheckInfo:
    code: str
    title: str = ""
    budget_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "title": self.title}
        if self.budget_s is not None:
            out["budget_s"] = self.budget_s
        return out


@dataclass
class RunStart(Event):
    KIND: ClassVar[str] = "run_start"
    world_size: int | None = None
    nodes: list[str] | int | None = None  # hostnames in node order (a count from older writers)
    backend: str | None = None
    checks: list[CheckInfo] = field(default_factory=list)
    endpoint: str | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunStart:
        nodes = d.get("nodes")
        checks = [CheckInfo(str(c["code"]), str(c.get("title") or ""), _num(c.get("budget_s")))
                  for c in (d.get("checks") if isinstance(d.get("checks"), list) else [])
                  if isinstance(c, dict) and c.get("code")]
        return cls(world_size=_int(d.get("world_size")),
                   nodes=[str(n) for n in nodes] if isinstance(nodes, list) else _int(nodes),
                   backend=_str(d.get("backend")), checks=checks, endpoint=_str(d.get("endpoint")))


@dataclass
class Rendezvous(Event):
    KIND: ClassVar[str] = "rendezvous"
    rank: int
    node_rank: int = 0
    hostname: str = "?"
    seconds: float | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Rendezvous | None:
        rank = _int(d.get("rank"))
        if rank is None:
            return None
        return cls(rank=rank, node_rank=_int(d.get("node_rank")) or 0, hostname=str(d.get("hostname") or "?"),
                   seconds=_num(d.get("seconds")))


@dataclass
class CheckStart(Event):
    KIND: ClassVar[str] = "check_start"
    code: str
    title: str = ""
    budget_s: float | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CheckStart | None:
        code = _code(d)
        return None if code is None else cls(code=code, title=str(d.get("title") or ""),
                                             budget_s=_num(d.get("budget_s")))


@dataclass
class RankCheckStart(Event):
    """One rank began a check (every rank, into its node's stream)."""

    KIND: ClassVar[str] = "rank_check_start"
    code: str
    rank: int | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RankCheckStart | None:
        code = _code(d)
        return None if code is None else cls(code=code, rank=_int(d.get("rank")))


@dataclass
class Progress(Event):
    """A check's progress on one rank (`ctx.emit("progress", done=, total=, message=, ...)`); fields of
    the check's own go to ``extra``."""

    KIND: ClassVar[str] = "progress"
    OPTIONAL: ClassVar[tuple[str, ...]] = ("rank", "done", "total", "message")
    code: str
    rank: int | None = None
    done: float | None = None
    total: float | None = None
    message: str | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Progress | None:
        code = _code(d)
        if code is None:
            return None
        return cls(code=code, rank=_int(d.get("rank")), done=_num(d.get("done")), total=_num(d.get("total")),
                   message=_str(d.get("message")))


@dataclass
class RankCheckEnd(Event):
    """One rank finished its part of a check: ok, error or timed_out (then ``op`` names where)."""

    KIND: ClassVar[str] = "rank_check_end"
    OPTIONAL: ClassVar[tuple[str, ...]] = ("op",)
    code: str
    rank: int
    status: str
    op: str | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RankCheckEnd | None:
        code, rank = _code(d), _int(d.get("rank"))
        if code is None or rank is None:
            return None
        return cls(code=code, rank=rank, status=str(d.get("status")), op=_str(d.get("op")))


@dataclass
class CheckEnd(Event):
    KIND: ClassVar[str] = "check_end"
    code: str
    status: str = "passed"
    summary: str = ""
    duration_s: float | None = None
    findings: int = 0  # how many

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CheckEnd | None:
        code = _code(d)
        if code is None:
            return None
        return cls(code=code, status=str(d.get("status") or "passed"), summary=str(d.get("summary") or ""),
                   duration_s=_num(d.get("duration_s")), findings=_int(d.get("findings")) or 0)


@dataclass
class Log(Event):
    KIND: ClassVar[str] = "log"
    level: str = "info"
    message: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Log:
        return cls(level=str(d.get("level") or "info"), message=str(d.get("message") or ""))


@dataclass
class RunEnd(Event):
    KIND: ClassVar[str] = "run_end"
    exit_code: int = 2
    report: str | None = None  # the JSON report's path, when written

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunEnd:
        code = _int(d.get("exit_code"))
        return cls(exit_code=2 if code is None else code, report=_str(d.get("report")))


@dataclass
class OtherEvent(Event):
    """A line of a kind this version does not know, or a known kind without its key fields: kept as it
    was (readers skip it; `t` still counts)."""

    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> Any:
        return self.raw.get("event")

    def to_json(self) -> dict[str, Any]:
        return dict(self.raw)


KINDS: dict[str, Any] = {c.KIND: c for c in (RunStart, Rendezvous, CheckStart, RankCheckStart, Progress,
                                             RankCheckEnd, CheckEnd, Log, RunEnd)}


def parse_event(d: Mapping[str, Any]) -> Event:
    """The typed event of one decoded JSON object (an `OtherEvent` when it is none we know)."""
    cls = KINDS.get(d.get("event")) if isinstance(d.get("event"), str) else None
    ev = cls.from_json(d) if cls is not None else None
    if ev is None:
        return OtherEvent(raw=dict(d), t=_num(d.get("t")))
    ev.t = _num(d.get("t"))
    ev.extra = {k: v for k, v in d.items() if k not in cls.known()}
    return ev
