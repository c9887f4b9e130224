"""What a rank left when it died without writing its own evidence: faulthandler's report in the run
directory, and the cgroup's OOM-kill counter (the OOM killer sends SIGKILL, which leaves nothing)."""

from __future__ import annotations

import linecache
import time
from pathlib import Path

from ddpdoctor.model.hang.ends import parse_fault
from ddpdoctor.model.hang.evidence import RankEnd

EVIDENCE_FORMAT, EVIDENCE_VERSION = "ddpdoctor-hang-evidence", 1
_CGROUP_EVENTS = (Path("/sys/fs/cgroup/memory.events"), Path("/sys/fs/cgroup/memory/memory.oom_control"))


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def oom_kills() -> int | None:
    """The OOM kills counted in this cgroup so far (cgroup v2 memory.events, v1 oom_control)."""
    for p in _CGROUP_EVENTS:
        for line in _read(p).splitlines():
            k, _, v = line.partition(" ")
            if k == "oom_kill" and v.strip().isdigit():
                return int(v)
    return None


def end_from_fault(rank: int, path: Path) -> RankEnd | None:
    fatal = parse_fault(_read(path))
    if fatal is None:
        return None
    return RankEnd(rank, "signal", fatal.signum or None, fatal.signal)


def fault_evidence(path: Path, meta: dict, backend_error: str | None) -> dict | None:
    """A rank file (ddpdoctor-hang-evidence v1) for a rank killed by a fatal signal: its exception is
    the signal, its frames the main thread's Python stack; the backend's own words when it said
    why (gloo: "Received data size doesn't match expected size")."""
    fatal = parse_fault(_read(path))
    if fatal is None:
        return None
    message = fatal.message + (f" after the backend said: {backend_error}" if backend_error else "")
    return {
        "format": EVIDENCE_FORMAT,
        "version": EVIDENCE_VERSION,
        "rank": int(meta["rank"]),
        "world_size": int(meta["world_size"]),
        "local_rank": meta.get("local_rank"),
        "node_rank": meta.get("node_rank"),
        "host": meta.get("host"),
        "pid": meta.get("pid"),
        "captured_ns": time.time_ns(),
        "reason": "crash",
        "flight_recorder": None,
        "threads": [],
        "exception": {
            "type": fatal.signal,
            "message": message,
            "frames": [{"file": f, "line": n, "function": fn, "code": linecache.getline(f, n).strip()} for f, n, fn in fatal.frames],
        },
    }
