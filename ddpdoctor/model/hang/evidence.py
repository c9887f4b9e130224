"""Hang evidence: what each rank left behind (Flight Recorder entries, thread stacks, the exception it
died of) as plain dataclasses, validated from the dicts of the files (see HANG-CONTRACT / README).

Pure: no torch, no I/O. Every malformed field raises EvidenceError naming the file and the field.

Formats read here:
- ``ddpdoctor-hang-evidence`` v1 (``rank-<R>.json``, written by ``ddpdoctor watch``);
- ``ddpdoctor-hang-watch`` v1 (``watch.json``);
- torch's own Flight Recorder dump (``_dump_fr_trace_json`` / the unpickled ``_dump_fr_trace``:
  ``version``, ``pg_config``, ``entries``), which carries neither host nor stacks.

A frame inside ``torch/distributed/distributed_c10d.py`` may carry ``"locals": {"dst": "1", "tensor":
"float32[8]"}`` (``"args"`` is read as well): the arguments of a blocked ``send``/``recv``, which
gloo does not record in the Flight Recorder (optional; with them a p2p cycle is named by its peers,
0->1->2->0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ddpdoctor.model.hang.fingerprint import CollectiveMismatch

if TYPE_CHECKING:
    from ddpdoctor.model.hang.ras import RasReport

EVIDENCE_FORMAT = "ddpdoctor-hang-evidence"
WATCH_FORMAT = "ddpdoctor-hang-watch"
REASONS = ("hang", "crash", "exit", "request")
OUTCOMES = ("hang", "crash", "finished", "interrupted")


class EvidenceError(Exception):
    """Bad, partial or mixed evidence; ``path`` names the file (or folder)."""

    def __init__(self, path: str, msg: str) -> None:
        super().__init__(f"{path}: {msg}")
        self.path = str(path)
        self.msg = msg


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str
    code: str = ""
    locals: dict[str, str] = field(default_factory=dict)  # c10d call arguments (peer), as text

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class ThreadStack:
    id: int
    name: str
    main: bool
    frames: tuple[Frame, ...]  # outermost first, innermost last


@dataclass(frozen=True)
class ExceptionInfo:
    type: str
    message: str
    frames: tuple[Frame, ...]


@dataclass(frozen=True)
class FROp:
    """One Flight Recorder entry (a collective or p2p operation as this rank enqueued it)."""

    record_id: int
    pg_name: str
    pg_desc: str
    collective_seq_id: int
    p2p_seq_id: int
    profiling_name: str  # "gloo:all_reduce", "nccl:send 0->1"
    input_sizes: tuple
    input_dtypes: tuple
    output_sizes: tuple
    state: str  # scheduled | started | completed (gloo leaves "scheduled"; `retired` tells done)
    retired: bool
    is_p2p: bool
    time_created_ns: int
    timeout_ms: int | None = None

    op: str = ""  # the operation without backend prefix or peers: "all_reduce", "send" (op_name())
    # where Python called it, outermost first: only torch's pickled dumps (with stack traces) have it
    frames: tuple[Frame, ...] = ()

    @property
    def local_peer(self) -> int | None:
        """The peer of a p2p entry in group ranks: torch names them "send 1->2" and "recv 3<-0"."""
        m = re.search(r"(\d+)\s*(->|<-)\s*(\d+)", self.profiling_name)
        return int(m.group(3)) if m else None

    @property
    def signature(self) -> tuple:
        return (self.op, self.input_sizes, self.input_dtypes)

    @property
    def seq(self) -> int:
        return self.p2p_seq_id if self.is_p2p else self.collective_seq_id


@dataclass(frozen=True)
class GroupConfig:
    name: str
    desc: str
    ranks: tuple[int, ...] | None


@dataclass(frozen=True)
class FlightRecord:
    version: str
    groups: tuple[GroupConfig, ...]
    entries: tuple[FROp, ...]
    comm_lib_version: str = ""  # the NCCL version on NCCL ("2.21.5"); gloo leaves it empty


@dataclass(frozen=True)
class RankEvidence:
    rank: int
    world_size: int | None
    host: str | None
    source: str  # the file it came from
    kind: str  # "ddpdoctor" | "torch-fr"
    local_rank: int | None = None
    node_rank: int | None = None
    pid: int | None = None
    captured_ns: int | None = None
    reason: str | None = None
    flight_recorder: FlightRecord | None = None
    flight_recorder_error: str | None = None
    threads: tuple[ThreadStack, ...] = ()
    exception: ExceptionInfo | None = None

    @property
    def main_thread(self) -> ThreadStack | None:
        return next((t for t in self.threads if t.main), None)


@dataclass(frozen=True)
class RankEnd:
    """How a rank's process ended, as far as anyone could tell."""

    rank: int
    how: str  # "exit" | "exception" | "signal" | "terminated" | "gone"
    code: int | None = None  # exit code, or the signal number for "signal"
    detail: str = ""  # "ValueError: ...", "SIGABRT", "SIGKILL or the OOM killer"
    last_seq: dict[str, int] = field(default_factory=dict)  # group -> last collective it entered

    @property
    def exit_code(self) -> int | None:
        """As a launcher reports it: the code, or minus the signal."""
        if self.how in ("signal", "terminated") and self.code is not None:
            return -self.code
        if self.how == "exception":
            return 1
        return self.code

    def to_dict(self) -> dict:
        return {"how": self.how, "code": self.code, "detail": self.detail, "last_seq": dict(self.last_seq)}

    def text(self) -> str:
        if self.how == "exit":
            return "exited" + (f" with code {self.code}" if self.code is not None else "")
        if self.how == "exception":
            return f"died of {self.detail}" if self.detail else "died of an exception"
        if self.how in ("signal", "terminated"):
            return f"was killed by {self.detail or f'signal {self.code}'}"
        return f"is gone ({self.detail})" if self.detail else "is gone"


@dataclass(frozen=True)
class WatchInfo:
    source: str
    command: tuple[str, ...]
    hang_after_s: float | None
    started_ns: int | None
    detected_ns: int | None
    outcome: str
    trigger: dict[str, Any] | None
    world_size: int | None
    exit_codes: dict[int, int]
    missing_ranks: tuple[int, ...]
    hosts: dict[int, str] = field(default_factory=dict)  # rank -> host, also for ranks without evidence
    ends: dict[int, RankEnd] = field(default_factory=dict)  # how each rank that ended, ended
    hang_after_auto: bool = False  # --hang-after auto: the threshold came from the job's rhythm
    certain: dict[str, Any] | None = None  # the certain deadlock that ended the job, if one did
    # collectives the ranks disagreed on, found by `watch --verify` before running them
    mismatches: tuple[CollectiveMismatch, ...] = ()


@dataclass(frozen=True)
class Evidence:
    """Everything read for one job: rank -> evidence, the watch record, the files read."""

    ranks: dict[int, RankEvidence]
    watch: WatchInfo | None
    world_size: int
    sources: tuple[str, ...]
    ras: RasReport | None = None  # NCCL RAS's JSON report, read beside the ranks' own evidence

    @property
    def missing_ranks(self) -> list[int]:
        if not self.ranks and self.watch is None:  # a RAS report alone: no rank was expected to write
            return []
        listed = set(self.watch.missing_ranks) if self.watch else set()
        return sorted((listed | set(range(self.world_size))) - set(self.ranks))

    def host(self, rank: int) -> str | None:
        ev = self.ranks.get(rank)
        if ev is not None and ev.host:
            return ev.host
        if self.watch and rank in self.watch.hosts:
            return self.watch.hosts[rank]
        return self.ras.hosts().get(rank) if self.ras else None


# ---------------------------------------------------------------- validation helpers


class _Reader:
    """Typed field access that reports ``path: field: problem``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, where: str, msg: str) -> EvidenceError:
        return EvidenceError(self.path, f"{where}: {msg}" if where else msg)

    def obj(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, found {type(value).__name__}")
        return value

    def int_(self, d: dict, key: str, where: str, optional: bool = False) -> int | None:
        v = d.get(key)
        if v is None and optional:
            return None
        # torch writes some counters as strings ("3"); accept those, refuse everything else
        if isinstance(v, str) and v.lstrip("-").isdigit():
            return int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(f"{where}{key}", f"expected an integer, found {v!r}")
        return v

    def str_(self, d: dict, key: str, where: str, optional: bool = False) -> str | None:
        v = d.get(key)
        if v is None and optional:
            return None
        if not isinstance(v, str):
            raise self.fail(f"{where}{key}", f"expected a string, found {v!r}")
        return v

    def list_(self, d: dict, key: str, where: str, optional: bool = False) -> list:
        v = d.get(key)
        if v is None and optional:
            return []
        if not isinstance(v, list):
            raise self.fail(f"{where}{key}", f"expected a list, found {type(v).__name__}")
        return v


def _tuplify(v: list) -> tuple:
    """[[3, 4]] -> ((3, 4),): hashable, for matching. Two levels are all FR sizes have (flat loops:
    this runs for every entry of every rank)."""
    return tuple(tuple(x) if isinstance(x, list) else x for x in v)


def _frames(r: _Reader, items: list, where: str) -> tuple[Frame, ...]:
    out = []
    for i, f in enumerate(items):
        w = f"{where}[{i}]."
        f = r.obj(f, w[:-1])
        key = "locals" if "locals" in f else "args"
        loc = f.get(key) or {}
        if not isinstance(loc, dict):
            raise r.fail(f"{w}{key}", "expected an object")
        out.append(
            Frame(
                file=r.str_(f, "file", w),
                line=r.int_(f, "line", w),
                function=r.str_(f, "function", w),
                code=r.str_(f, "code", w, optional=True) or "",
                locals={str(k): str(v) for k, v in loc.items()},
            )
        )
    return tuple(out)


def _parse_ranks(text: Any) -> tuple[int, ...] | None:
    """pg_config ranks come as a string "[0, 1, 2]" (JSON) or a list (pickle)."""
    if isinstance(text, list):
        vals = text
    elif isinstance(text, str):
        inner = text.strip().strip("[]").strip()
        if not inner:
            return None
        try:
            vals = [int(x) for x in inner.split(",")]
        except ValueError:
            return None
    else:
        return None
    return tuple(int(v) for v in vals) if all(isinstance(v, int) or str(v).isdigit() for v in vals) else None


def flight_record_from_dict(d: Any, path: str, where: str = "flight_recorder") -> FlightRecord:
    r = _Reader(path)
    d = r.obj(d, where)
    w = f"{where}."
    # a rank that has run no collective yet (or has no process group yet) has no 'entries'; a file
    # with none of torch's keys is something else
    if not {"entries", "version", "pg_config", "pg_status"} & set(d):
        raise r.fail(where, "no 'entries': not a Flight Recorder dump")
    version = str(d.get("version", ""))
    groups = []
    for key, cfg in r.obj(d.get("pg_config") or {}, f"{w}pg_config").items():
        cfg = r.obj(cfg, f"{w}pg_config.{key}")
        groups.append(
            GroupConfig(
                name=str(cfg.get("name", key)),
                desc=str(cfg.get("desc", "")),
                ranks=_parse_ranks(cfg.get("ranks")),
            )
        )
    entries = []
    for i, e in enumerate(r.list_(d, "entries", w, optional=True)):
        entries.append(_entry_fast(e) or _entry_checked(r, e, f"{w}entries[{i}]."))
    lib = d.get("comm_lib_version")
    return FlightRecord(version=version, groups=tuple(groups), entries=tuple(entries),
                        comm_lib_version=lib if isinstance(lib, str) else "")  # fmt: skip


def op_name(profiling_name: str) -> str:
    """ "gloo:all_reduce" -> "all_reduce", "nccl:send 0->1" -> "send"."""
    name = profiling_name.split(":", 1)[-1].strip()
    return name.split()[0] if name else name


def _fr_frames(items: Any) -> tuple[Frame, ...]:
    """An entry's stack in torch's form ({name, filename, line}, innermost first); anything else is
    dropped rather than refused: the stack only adds a location."""
    if not isinstance(items, list):
        return ()
    out = [
        Frame(f["filename"], f["line"], str(f.get("name", "")))
        for f in items
        if isinstance(f, dict) and isinstance(f.get("filename"), str) and type(f.get("line")) is int
    ]
    return tuple(reversed(out))


def _pg(e: dict) -> tuple[str, str]:
    pg = e.get("process_group")
    if isinstance(pg, (list, tuple)) and len(pg) == 2:
        return str(pg[0]), str(pg[1])
    return str(e.get("pg_id", "")), ""


def _entry_fast(e: Any) -> FROp | None:
    """A well-formed entry in one go (thousands per rank); None sends it to the checked path, which
    names the bad field."""
    try:
        ints = (
            e["record_id"],
            e["collective_seq_id"],
            e.get("p2p_seq_id") or 0,
            e.get("time_created_ns") or 0,
        )
        lists = (e.get("input_sizes") or [], e.get("input_dtypes") or [], e.get("output_sizes") or [])
        name, state, timeout = e["profiling_name"], e.get("state") or "", e.get("timeout_ms")
    except (KeyError, TypeError, AttributeError):
        return None
    if (
        any(type(x) is not int for x in ints)
        or any(type(x) is not list for x in lists)
        or type(name) is not str
        or type(state) is not str
        or (timeout is not None and type(timeout) is not int)
    ):
        return None
    pg_name, pg_desc = _pg(e)
    return FROp(
        ints[0],
        pg_name,
        pg_desc,
        ints[1],
        ints[2],
        name,
        _tuplify(lists[0]),
        _tuplify(lists[1]),
        _tuplify(lists[2]),
        state,
        bool(e.get("retired", False)),
        bool(e.get("is_p2p", False)),
        ints[3],
        timeout,
        op_name(name),
        _fr_frames(e.get("frames")),
    )


def _entry_checked(r: _Reader, e: Any, we: str) -> FROp:
    e = r.obj(e, we[:-1])
    pg_name, pg_desc = _pg(e)
    name = r.str_(e, "profiling_name", we)
    return FROp(
        record_id=r.int_(e, "record_id", we),
        pg_name=pg_name,
        pg_desc=pg_desc,
        collective_seq_id=r.int_(e, "collective_seq_id", we),
        p2p_seq_id=r.int_(e, "p2p_seq_id", we, optional=True) or 0,
        profiling_name=name,
        input_sizes=_tuplify(r.list_(e, "input_sizes", we, optional=True)),
        input_dtypes=_tuplify(r.list_(e, "input_dtypes", we, optional=True)),
        output_sizes=_tuplify(r.list_(e, "output_sizes", we, optional=True)),
        state=r.str_(e, "state", we, optional=True) or "",
        retired=bool(e.get("retired", False)),
        is_p2p=bool(e.get("is_p2p", False)),
        time_created_ns=r.int_(e, "time_created_ns", we, optional=True) or 0,
        timeout_ms=r.int_(e, "timeout_ms", we, optional=True),
        op=op_name(name),
        frames=_fr_frames(e.get("frames")),
    )


def _check_header(r: _Reader, d: dict, fmt: str) -> None:
    if d.get("format") != fmt:
        raise r.fail("format", f"expected {fmt!r}, found {d.get('format')!r}")
    if d.get("version") != 1:
        raise r.fail("version", f"this ddpdoctor reads version 1, found {d.get('version')!r}")


def rank_from_dict(d: Any, path: str) -> RankEvidence:
    """A ``ddpdoctor-hang-evidence`` v1 document."""
    r = _Reader(path)
    d = r.obj(d, "")
    _check_header(r, d, EVIDENCE_FORMAT)
    rank = r.int_(d, "rank", "")
    world = r.int_(d, "world_size", "")
    if rank < 0 or world < 1 or rank >= world:
        raise r.fail("rank", f"rank {rank} is outside world size {world}")
    reason = r.str_(d, "reason", "", optional=True)
    if reason is not None and reason not in REASONS:
        raise r.fail("reason", f"expected one of {', '.join(REASONS)}, found {reason!r}")
    fr = d.get("flight_recorder")
    threads = []
    for i, t in enumerate(r.list_(d, "threads", "", optional=True)):
        w = f"threads[{i}]."
        t = r.obj(t, w[:-1])
        threads.append(
            ThreadStack(
                id=r.int_(t, "id", w, optional=True) or 0,
                name=r.str_(t, "name", w, optional=True) or "",
                main=bool(t.get("main", False)),
                frames=_frames(r, r.list_(t, "frames", w), f"{w}frames"),
            )
        )
    exc = d.get("exception")
    exception = None
    if exc is not None:
        exc = r.obj(exc, "exception")
        exception = ExceptionInfo(
            type=r.str_(exc, "type", "exception."),
            message=r.str_(exc, "message", "exception.", optional=True) or "",
            frames=_frames(r, r.list_(exc, "frames", "exception.", optional=True), "exception.frames"),
        )
    return RankEvidence(
        rank=rank,
        world_size=world,
        host=r.str_(d, "host", "", optional=True),
        source=path,
        kind="ddpdoctor",
        local_rank=r.int_(d, "local_rank", "", optional=True),
        node_rank=r.int_(d, "node_rank", "", optional=True),
        pid=r.int_(d, "pid", "", optional=True),
        captured_ns=r.int_(d, "captured_ns", "", optional=True),
        reason=reason,
        flight_recorder=None if fr is None else flight_record_from_dict(fr, path),
        flight_recorder_error=r.str_(d, "flight_recorder_error", "", optional=True),
        threads=tuple(threads),
        exception=exception,
    )


def torch_dump_from_dict(d: Any, path: str, rank: int) -> RankEvidence:
    """One of torch's own Flight Recorder dumps (rank from the file name; no host, no stacks)."""
    fr = flight_record_from_dict(d, path, where="")
    # the default group spans the world; torch 2.13's gloo leaves its name and desc empty, so take
    # the largest group listed
    sizes = [len(g.ranks) for g in fr.groups if g.ranks]
    return RankEvidence(
        rank=rank,
        world_size=max(sizes) if sizes else None,
        host=None,
        source=path,
        kind="torch-fr",
        flight_recorder=fr,
        reason="hang",
    )


def watch_from_dict(d: Any, path: str) -> WatchInfo:
    r = _Reader(path)
    d = r.obj(d, "")
    _check_header(r, d, WATCH_FORMAT)
    outcome = r.str_(d, "outcome", "")
    if outcome not in OUTCOMES:
        raise r.fail("outcome", f"expected one of {', '.join(OUTCOMES)}, found {outcome!r}")
    codes = r.obj(d.get("exit_codes") or {}, "exit_codes")
    try:
        exit_codes = {int(k): int(v) for k, v in codes.items() if v is not None}
    except (TypeError, ValueError):
        raise r.fail("exit_codes", "expected {rank: code} with integers") from None
    trigger = d.get("trigger")
    if trigger is not None:
        trigger = r.obj(trigger, "trigger")
    hang_after = d.get("hang_after_s")
    if hang_after is not None and not isinstance(hang_after, (int, float)):
        raise r.fail("hang_after_s", f"expected a number, found {hang_after!r}")
    missing = r.list_(d, "missing_ranks", "", optional=True)
    if not all(isinstance(m, int) for m in missing):
        raise r.fail("missing_ranks", "expected a list of integers")
    hosts = r.obj(d.get("hosts") or {}, "hosts")
    if not all(str(k).isdigit() for k in hosts):
        raise r.fail("hosts", "expected {rank: host}")
    ends = {}
    for k, v in r.obj(d.get("ends") or {}, "ends").items():
        e = r.obj(v, f"ends.{k}")
        if not str(k).isdigit():
            raise r.fail("ends", "expected {rank: end}")
        last = r.obj(e.get("last_seq") or {}, f"ends.{k}.last_seq")
        ends[int(k)] = RankEnd(
            rank=int(k),
            how=r.str_(e, "how", f"ends.{k}."),
            code=r.int_(e, "code", f"ends.{k}.", optional=True),
            detail=r.str_(e, "detail", f"ends.{k}.", optional=True) or "",
            last_seq={str(g): int(s) for g, s in last.items() if isinstance(s, int)},
        )
    certain = d.get("certain")
    if certain is not None:
        certain = r.obj(certain, "certain")
    mismatches = []
    for i, m in enumerate(r.list_(d, "collective_mismatches", "", optional=True)):
        try:
            mismatches.append(CollectiveMismatch.from_dict(m))
        except (KeyError, TypeError, ValueError) as e:
            raise r.fail(f"collective_mismatches[{i}]", f"not a collective fingerprint mismatch ({e})") from None
    return WatchInfo(
        source=path,
        command=tuple(str(c) for c in r.list_(d, "command", "", optional=True)),
        hang_after_s=hang_after,
        started_ns=r.int_(d, "started_ns", "", optional=True),
        detected_ns=r.int_(d, "detected_ns", "", optional=True),
        outcome=outcome,
        trigger=trigger,
        world_size=r.int_(d, "world_size", "", optional=True),
        exit_codes=exit_codes,
        missing_ranks=tuple(missing),
        hosts={int(k): str(v) for k, v in hosts.items() if v},
        ends=ends,
        hang_after_auto=bool(d.get("hang_after_auto", False)),
        certain=certain,
        mismatches=tuple(mismatches),
    )


def combine(
    ranks: list[RankEvidence], watch: WatchInfo | None, sources: list[str], ras: RasReport | None = None
) -> Evidence:
    """One job's evidence; refuses mixed input (two files for one rank, differing world sizes)."""
    by_rank: dict[int, RankEvidence] = {}
    for ev in ranks:
        if ev.rank in by_rank:
            raise EvidenceError(
                ev.source, f"rank {ev.rank} already read from {by_rank[ev.rank].source} (mixed runs?)"
            )
        by_rank[ev.rank] = ev
    sizes = {ev.world_size: ev for ev in ranks if ev.world_size is not None}
    if watch and watch.world_size:  # 0 / null: the watch never learnt it
        if sizes and watch.world_size not in sizes:
            other = next(iter(sizes.values()))
            raise EvidenceError(
                watch.source,
                f"world size {watch.world_size}, but {other.source} says {other.world_size} (mixed runs?)",
            )
        sizes.setdefault(watch.world_size, None)  # type: ignore[arg-type]
    if len(sizes) > 1:
        a, b = sorted(sizes)[:2]
        raise EvidenceError(sizes[b].source, f"world size {b}, but {sizes[a].source} says {a} (mixed runs?)")
    world = next(iter(sizes)) if sizes else max(by_rank, default=-1) + 1
    if ras is not None and not sizes:  # the largest NCCL communicator is the job's
        world = max(world, ras.world_size)
    for ev in ranks:
        if ev.rank >= world:
            raise EvidenceError(ev.source, f"rank {ev.rank} is outside world size {world}")
    if not by_rank and watch is None and ras is None:
        raise EvidenceError(sources[0] if sources else ".", "no evidence found")
    return Evidence(ranks=by_rank, watch=watch, world_size=max(world, 1), sources=tuple(sources), ras=ras)
