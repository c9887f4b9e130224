"""NCCL RAS's JSON report (``ncclras -f json``, NCCL >= 2.28.7) as typed evidence, and what it says
about a hang: communicators whose ranks launched different numbers of collectives (MISMATCH),
ranks that gave RAS no data (INCOMPLETE) and processes RAS considers dead (DEAD).

Written from NCCL's documentation (troubleshooting/ras.rst, "JSON Output") and the field names NCCL's
RAS client writes; untested on hardware (no GPU here). Pure: no torch, no I/O. (It does not import evidence.py, which holds a RasReport.)

Read: ``nccl_version``, ``timestamp``, per communicator ``hash``, ``size``, ``ranks`` (``rank``,
``host``, ``pid``, ``cuda_dev``, ``status.init_state``/``async_error``/``abort_flag``,
``collective_counts``) and ``missing_ranks`` (``rank``, ``host``, ``pid``, ``cuda_dev``,
``status.unresponsive``/``considered_dead``). Ignored: CUDA versions, ``secondary_hash``,
``nvml_dev``, ``finalize_called``, ``destroy_flag``, the ``ras`` footer, and monitoring-mode events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class RasError(ValueError):
    """A malformed RAS report; the reader turns it into the EvidenceError every bad file gets."""

    def __init__(self, path: str, msg: str) -> None:
        super().__init__(f"{path}: {msg}")
        self.path, self.msg = path, msg

INIT_OK, INIT_IN_PROGRESS = 0, 7  # ncclSuccess, ncclInProgress (NCCL's documentation)


@dataclass(frozen=True)
class RasRank:
    rank: int  # the rank within its communicator
    host: str  # RAS names hosts by IP address; "unknown" when it could not tell
    pid: int
    cuda_dev: int
    counts: dict[str, int] = field(default_factory=dict)  # collective -> how many this rank launched
    init_state: int = INIT_OK
    async_error: int = 0
    abort_flag: bool = False

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def where(self) -> str:
        host = f" on {self.host}" if self.host and self.host != "unknown" else ""
        pid = f" (pid {self.pid}, GPU {self.cuda_dev})" if self.pid >= 0 else ""
        return f"rank {self.rank}{host}{pid}"


@dataclass(frozen=True)
class RasMissing:
    rank: int
    host: str
    pid: int
    cuda_dev: int
    unresponsive: bool
    dead: bool

    def where(self) -> str:
        return RasRank(self.rank, self.host, self.pid, self.cuda_dev).where()


@dataclass(frozen=True)
class RasComm:
    hash: str
    size: int
    ranks: tuple[RasRank, ...]
    missing: tuple[RasMissing, ...]


@dataclass(frozen=True)
class RasReport:
    source: str
    nccl_version: str
    timestamp: str
    comms: tuple[RasComm, ...]

    @property
    def world_size(self) -> int:
        """The largest communicator: with torch, the default process group's (its ranks are global)."""
        return max((c.size for c in self.comms), default=0)

    def hosts(self) -> dict[int, str]:
        """Global rank -> host, from the largest communicator."""
        out: dict[int, str] = {}
        for c in self.comms:
            if c.size == self.world_size:
                for r in (*c.ranks, *c.missing):
                    if r.host and r.host != "unknown":
                        out.setdefault(r.rank, r.host)
        return out

    def global_rank(self, host: str, pid: int) -> int | None:
        """The job's rank of the process ``host``/``pid`` (from the largest communicator), if known."""
        for c in self.comms:
            if c.size == self.world_size:
                for r in (*c.ranks, *c.missing):
                    if r.pid >= 0 and (r.host, r.pid) == (host, pid):
                        return r.rank
        return None


@dataclass
class RasFinding:
    """One thing RAS shows wrong. ``culprits`` are communicator ranks; ``global_ranks`` says whether
    they are the job's ranks too (the largest communicator) or only the communicator's own."""

    kind: str  # "mismatch" | "incomplete" | "dead"
    comm: str  # the communicator's hash, as NCCL's logs print it
    operation: str  # the collective whose counts differ (mismatch), else ""
    summary: str
    details: list[str]
    culprits: list[int]
    waiting: list[int]
    global_ranks: bool


# ---------------------------------------------------------------- parsing


def _fail(path: str, where: str, msg: str) -> RasError:
    return RasError(path, f"NCCL RAS report: {where}: {msg}")


def _get(d: Any, key: str, kind: type | tuple[type, ...], path: str, where: str) -> Any:
    if not isinstance(d, dict):
        raise _fail(path, where.rstrip("."), f"expected an object, found {type(d).__name__}")
    v = d.get(key)
    if isinstance(v, bool) and kind is int or not isinstance(v, kind):
        want = {int: "an integer", str: "a string", list: "a list", dict: "an object", bool: "true/false"}
        raise _fail(path, f"{where}{key}", f"expected {want.get(kind, kind)}, found {v!r}")  # type: ignore[call-overload]
    return v


def _rank(d: Any, path: str, where: str) -> tuple[int, str, int, int, dict]:
    status = _get(d, "status", dict, path, where)
    return (_get(d, "rank", int, path, where), _get(d, "host", str, path, where),
            _get(d, "pid", int, path, where), _get(d, "cuda_dev", int, path, where), status)  # fmt: skip


def is_ras_report(doc: Any) -> bool:
    return isinstance(doc, dict) and "nccl_version" in doc and "communicators" in doc


def ras_from_dict(doc: Any, path: str) -> RasReport:
    """The report in ``doc`` (parsed JSON); RasError naming the file and field otherwise."""
    if not is_ras_report(doc):
        raise RasError(path, "not an NCCL RAS JSON report (no 'nccl_version' and 'communicators')")
    comms = []
    for i, c in enumerate(_get(doc, "communicators", list, path, "")):
        w = f"communicators[{i}]."
        ranks = []
        for j, r in enumerate(_get(c, "ranks", list, path, w)):
            rw = f"{w}ranks[{j}]."
            rank, host, pid, dev, st = _rank(r, path, rw)
            counts = _get(r, "collective_counts", dict, path, rw)
            for k in counts:
                _get(counts, k, int, path, f"{rw}collective_counts.")
            ranks.append(RasRank(rank, host, pid, dev, dict(counts),
                                 _get(st, "init_state", int, path, f"{rw}status."),
                                 _get(st, "async_error", int, path, f"{rw}status."),
                                 _get(st, "abort_flag", bool, path, f"{rw}status.")))  # fmt: skip
        missing = []
        for j, r in enumerate(_get(c, "missing_ranks", list, path, w)):
            rw = f"{w}missing_ranks[{j}]."
            rank, host, pid, dev, st = _rank(r, path, rw)
            missing.append(RasMissing(rank, host, pid, dev, _get(st, "unresponsive", bool, path, f"{rw}status."),
                                      _get(st, "considered_dead", bool, path, f"{rw}status.")))  # fmt: skip
        comms.append(RasComm(_get(c, "hash", str, path, w), _get(c, "size", int, path, w),
                             tuple(ranks), tuple(missing)))  # fmt: skip
    return RasReport(path, _get(doc, "nccl_version", str, path, ""), str(doc.get("timestamp", "")), tuple(comms))


# ---------------------------------------------------------------- what it says


def _list(ranks: list[int], world: bool = True) -> str:
    """A sub-communicator's ranks are its own numbering: say so."""
    word = ("rank " if len(ranks) == 1 else "ranks ") if world else (
        "communicator rank " if len(ranks) == 1 else "communicator ranks ")
    return word + ", ".join(map(str, ranks))


def _mismatch(c: RasComm, world: bool) -> RasFinding | None:
    if len(c.ranks) < 2:
        return None
    top = max(r.total for r in c.ranks)
    behind = sorted((r for r in c.ranks if r.total < top), key=lambda r: (r.total, r.rank))
    if not behind:
        return None
    ahead = [r.rank for r in c.ranks if r.total == top]
    ops = [k for k in c.ranks[0].counts if len({r.counts.get(k, 0) for r in c.ranks}) > 1]
    op = ops[0] if ops else ""
    details = [f"{r.where()} is {top - r.total} collective(s) behind ({r.total} launched, others {top})"
               for r in behind]  # fmt: skip
    details.append(f"{_list(ahead, world)} launched {top} and wait")
    if ops:
        details.append("counts differ in " + ", ".join(ops))
    lag = max(top - r.total for r in behind)
    summary = (f"NCCL RAS: {_list([r.rank for r in behind], world)} launched fewer collectives "
               f"(up to {lag} behind{' in ' + op if op else ''})")  # fmt: skip
    return RasFinding("mismatch", c.hash, op, summary, details, [r.rank for r in behind], ahead, world)


def _missing(c: RasComm, world: bool) -> list[RasFinding]:
    out: list[RasFinding] = []
    dead = [m for m in c.missing if m.dead]
    silent = [m for m in c.missing if not m.dead]
    if dead:
        out.append(RasFinding("dead", c.hash, "", "NCCL RAS considers " + "; ".join(m.where() for m in dead)
                              + f" dead (unreachable) in communicator {c.hash}",
                              [f"{m.where()}: considered dead by RAS" for m in dead],
                              [m.rank for m in dead], [r.rank for r in c.ranks], world))  # fmt: skip
    if silent:
        why = lambda m: "unresponsive" if m.unresponsive else "reachable, but not a member"  # noqa: E731
        out.append(RasFinding("incomplete", c.hash, "", "NCCL RAS has no data from "
                              + "; ".join(f"{m.where()} ({why(m)})" for m in silent),
                              [f"{m.where()}: {why(m)}" for m in silent],
                              [m.rank for m in silent], [r.rank for r in c.ranks], world))  # fmt: skip
    return out


def _errors(c: RasComm) -> list[str]:
    """Ranks whose own NCCL state is an error, as notes on the communicator's findings."""
    notes = []
    for r in c.ranks:
        if r.init_state not in (INIT_OK, INIT_IN_PROGRESS):
            notes.append(f"{r.where()}: initialisation failed (NCCL error {r.init_state})")
        if r.async_error not in (INIT_OK, INIT_IN_PROGRESS):
            notes.append(f"{r.where()}: asynchronous NCCL error {r.async_error}")
        if r.abort_flag:
            notes.append(f"{r.where()}: communicator aborted")
    return notes


def ras_findings(report: RasReport) -> list[RasFinding]:
    """Dead processes first (the cause others wait on), then missing data, then count mismatches."""
    found: list[RasFinding] = []
    for c in report.comms:
        world = c.size == report.world_size
        notes = _errors(c)
        here = _missing(c, world)
        if (m := _mismatch(c, world)) is not None:
            here.append(m)
        for f in here:
            f.details.extend(notes)
            if not world:  # a sub-communicator's ranks are its own: map them to the job's by process
                _to_global(f, c, report)
        found += here
    order = {"dead": 0, "incomplete": 1, "mismatch": 2}
    # a finding that names the job's ranks comes first: the verdict can name its culprits
    return sorted(found, key=lambda f: (not f.global_ranks, order[f.kind]))


def _to_global(f: RasFinding, c: RasComm, report: RasReport) -> None:
    procs = {r.rank: (r.host, r.pid) for r in (*c.ranks, *c.missing)}
    culprits = [report.global_rank(*procs[r]) for r in f.culprits]
    waiting = [report.global_rank(*procs[r]) for r in f.waiting]
    if all(r is not None for r in culprits) and culprits:
        f.culprits[:] = culprits  # type: ignore[assignment]
        f.waiting[:] = [r for r in waiting if r is not None]
        f.global_ranks = True
