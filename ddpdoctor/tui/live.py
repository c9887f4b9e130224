"""Live mode's data side: start `ddpdoctor check --events … --json …` and tail its event file.

asyncio only (no textual), so the app's event loop never blocks on the check: the child runs in its
own process group with its output in a log file (it must not write on the app's terminal), and the
event file is read in small increments between polls.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from ddpdoctor.boundary.processes import end_tree
from ddpdoctor.core.events import Event
from ddpdoctor.events import EventTail


@dataclass
class LiveConfig:
    check_args: list[str] = field(default_factory=list)  # options passed on to `ddpdoctor check`
    command: list[str] | None = None  # replaces `python -m ddpdoctor check` (tests, benchmarks)
    workdir: str | None = None  # where events/report/log go; a fresh temp dir by default
    poll_s: float = 0.1
    timeout_s: float = 3600.0  # the whole run; the check has its own per-check watchdog
    stop_grace_s: float = 5.0


def check_command(cfg: LiveConfig, events: Path, report: Path) -> list[str]:
    prefix = cfg.command or [sys.executable, "-m", "ddpdoctor", "check"]
    return [*prefix, "--events", str(events), "--json", str(report), *cfg.check_args]


class LiveRun:
    """One run of the check as a child process; ``batches()`` yields its events as they arrive."""

    def __init__(self, cfg: LiveConfig) -> None:
        self.cfg = cfg
        self.dir = Path(cfg.workdir or tempfile.mkdtemp(prefix="ddpdoctor-tui-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.events_path = self.dir / "events.jsonl"
        self.report_path = self.dir / "report.json"
        self.log_path = self.dir / "check.log"
        self.command = check_command(cfg, self.events_path, self.report_path)
        self.tail = EventTail(self.events_path)
        self.proc: asyncio.subprocess.Process | None = None
        self.timed_out = False
        self.stopped = False

    async def start(self) -> None:
        for p in (self.events_path, self.report_path):
            p.unlink(missing_ok=True)  # never show a previous run's data
        with open(self.log_path, "wb") as log:  # noqa: ASYNC230 -- creating a local file is instant
            self.proc = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends torchrun's ranks too
            )

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    async def batches(self) -> AsyncIterator[list[Event]]:
        assert self.proc is not None, "start() first"
        deadline = time.monotonic() + self.cfg.timeout_s
        while True:
            batch = self.tail.read()
            if batch:
                yield batch
            if self.proc.returncode is not None:
                rest = self.tail.read()  # what it wrote just before exiting
                if rest:
                    yield rest
                return
            if time.monotonic() > deadline and not self.timed_out:
                self.timed_out = True
                await self.stop()
            try:
                await asyncio.wait_for(self.proc.wait(), self.cfg.poll_s)
            except asyncio.TimeoutError:
                pass

    async def stop(self) -> None:
        """SIGTERM to the child and everything under it, SIGKILL after the grace period
        (boundary/processes.end_tree, in a thread: it waits)."""
        if self.proc is None or self.proc.returncode is not None:
            return
        self.stopped = True
        await asyncio.to_thread(end_tree, self.proc.pid, self.cfg.stop_grace_s, reap=False)
        try:
            await asyncio.wait_for(self.proc.wait(), self.cfg.stop_grace_s)
        except asyncio.TimeoutError:
            pass

    def kill_now(self) -> None:
        """Last resort when the app exits without an event loop to wait in."""
        if self.proc is not None and self.proc.returncode is None:
            end_tree(self.proc.pid, 0.0, first_signal=signal.SIGKILL, reap=False)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
