"""The progress event stream on disk: JSON lines that the ranks and the CLI write and the CLI's progress
and the TUI read. The events themselves are typed in ddpdoctor/core/events.py.

Every process that writes (the CLI and each rank) appends whole lines with O_APPEND, one write per
event, so lines from different processes never interleave inside a line.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from ddpdoctor.core.events import Event, parse_event


class EventWriter:
    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = str(path) if path else None
        self._fd: int | None = None
        self._lock = threading.Lock()
        if self.path and self.path != "-":
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def emit(self, event: Event) -> None:
        if event.t is None:
            event.t = time.time()
        line = (json.dumps(event.to_json(), default=str, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._fd is not None:
                os.write(self._fd, line)
            elif self.path == "-":
                os.write(1, line)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class EventTail:
    """Reads new complete lines from an events file that other processes are still writing (no threads;
    call read()). The CLI's progress and the TUI both use it.

    A line that is not a JSON object with an "event" is counted in ``bad_lines`` and skipped (the stream is
    advisory, never fatal); a file rewritten shorter is read again from the start; one read takes at most
    1 MiB, so a caller's loop (the TUI's event loop) never stalls on a huge backlog.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.pos = 0
        self.partial = b""
        self.bad_lines = 0

    def read(self) -> list[Event]:
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self.pos:  # rewritten from scratch
                    self.pos, self.partial = 0, b""
                f.seek(self.pos)
                chunk = f.read(1 << 20)
        except FileNotFoundError:
            return []
        self.pos += len(chunk)
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()  # an unfinished line waits for the next read
        out = []
        for raw in lines:
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                obj = None
            if isinstance(obj, dict) and "event" in obj:
                out.append(parse_event(obj))
            else:
                self.bad_lines += 1
        return out


def read_events(path: str | os.PathLike[str]) -> Iterator[Event]:
    """Every event of a finished file."""
    tail = EventTail(path)
    while batch := tail.read():
        yield from batch
