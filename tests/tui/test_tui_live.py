"""Live mode's data side: the event-file tail and the child process, with the fake check."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

from ddpdoctor.events import EventTail
from ddpdoctor.tui.live import LiveConfig, LiveRun, check_command

from .helpers import fake_command


def test_tail_reads_only_complete_lines(tmp_path):
    p = tmp_path / "e.jsonl"
    tail = EventTail(p)

    def read() -> list[dict]:
        return [e.to_json() for e in tail.read()]

    assert read() == []  # not there yet
    p.write_bytes(b'{"event": "a"}\n{"event": "b", "x"')
    assert read() == [{"event": "a"}]
    with open(p, "ab") as f:
        f.write(b': 1}\nnot json\n[1, 2]\n\n{"event": "c"}\n')
    assert read() == [{"event": "b", "x": 1}, {"event": "c"}]
    assert tail.bad_lines == 2
    p.write_bytes(b'{"event": "new"}\n')  # rewritten, shorter: start over
    assert read() == [{"event": "new"}]


def test_check_command_puts_events_and_json_first(tmp_path):
    cmd = check_command(LiveConfig(check_args=["--nodes", "2"]), tmp_path / "e", tmp_path / "r")
    assert cmd[:4] == [sys.executable, "-m", "ddpdoctor", "check"]
    assert cmd[4:] == ["--events", str(tmp_path / "e"), "--json", str(tmp_path / "r"), "--nodes", "2"]


async def collect(run: LiveRun) -> list[dict]:
    await run.start()
    out: list[dict] = []
    async for batch in run.batches():
        out.extend(e.to_json() for e in batch)
    return out


@pytest.mark.timeout(60)
def test_live_run_streams_every_event_and_writes_report(tmp_path):
    run = LiveRun(LiveConfig(command=fake_command("--delay", "0.01"), workdir=str(tmp_path), poll_s=0.05))
    events = asyncio.run(collect(run))
    kinds = [e["event"] for e in events]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end"
    assert kinds.count("check_end") == 5
    assert run.returncode == 1  # the sample report has a failed check
    assert json.loads(run.report_path.read_text())["schema_version"] == 1
    assert "rendezvous done" in run.log_tail()  # the child's stdout went to the log, not the screen


@pytest.mark.timeout(60)
def test_live_run_timeout_stops_a_hung_check(tmp_path):
    cfg = LiveConfig(
        command=fake_command("--delay", "0", "--hang"),
        workdir=str(tmp_path),
        poll_s=0.05,
        timeout_s=1.0,
        stop_grace_s=2.0,
    )
    run = LiveRun(cfg)
    events = asyncio.run(collect(run))
    assert run.timed_out and run.returncode is not None and run.returncode < 0
    assert any(e["event"] == "check_start" for e in events)
    with pytest.raises(ProcessLookupError):
        os.killpg(run.proc.pid, 0)  # the whole group is gone


def test_live_run_missing_program_raises_oserror(tmp_path):
    run = LiveRun(LiveConfig(command=[str(tmp_path / "no-such-program")], workdir=str(tmp_path)))
    with pytest.raises(OSError):
        asyncio.run(run.start())
