"""The progress event stream: JSON lines that the CLI prints from and the TUI reads.

Every process that writes (the CLI and each rank) appends whole lines with O_APPEND, one write per
event, so lines from different processes never interleave inside a line.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator


class EventWriter:
    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = str(path) if path else None
        self._fd: int | None = None
        self._lock = threading.Lock()
        if self.path and self.path != "-":
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def emit(self, event: str | dict[str, Any], **fields: Any) -> None:
        if isinstance(event, dict):
            obj = dict(event)
        else:
            obj = {"event": event, **fields}
        obj.setdefault("t", time.time())
        line = (json.dumps(obj, default=str, separators=(",", ":")) + "\n").encode()
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
    """Reads new complete lines from an events file as it grows (no threads; call poll())."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._pos = 0
        self._partial = b""

    def poll(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                chunk = f.read()
                self._pos = f.tell()
        except FileNotFoundError:
            return []
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        out = []
        for raw in lines:
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except ValueError:
                continue  # a foreign line; the stream is advisory, never fatal
            if isinstance(obj, dict) and "event" in obj:
                out.append(obj)
        return out


def read_events(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    yield from EventTail(path).poll()
