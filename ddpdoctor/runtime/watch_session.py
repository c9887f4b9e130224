"""The watch process of `ddpdoctor watch`: runs the user's launch command unchanged with the rank
helper switched on through the environment, notices a hang (or a crash), gets every rank's evidence,
ends the whole process tree and says how the job ended.

The watch and the ranks talk through files in a private run directory (``DDPDOCTOR_WATCH_RUN``):
ranks write ``rank-R.meta.json`` once their process group exists and ``trigger-R.json`` when they
have waited in one operation longer than --hang-after; the watch answers with ``request``, and every
rank writes ``rank-R.json`` into the dumps directory. Ranks on other nodes learn of the request
through the job's rendezvous store (see rank_agent.py). No torch here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ddpdoctor.boundary.processes import end_tree
from ddpdoctor.model.hang.pending import poll_interval
from ddpdoctor.runtime import rank_agent

SITE_DIR = Path(__file__).resolve().parent / "watch_site"
WATCH_FORMAT = "ddpdoctor-hang-watch"
TICK_S = 0.2
GRACE_S = 5.0  # SIGTERM first (the ranks write their evidence on it), SIGKILL after this


@dataclass
class WatchResult:
    outcome: str  # "hang" | "crash" | "finished" | "interrupted"
    exit_code: int  # the job's own code (or what it died of)
    trigger: dict | None
    started_ns: int
    detected_ns: int | None
    world_size: int | None
    missing_ranks: list[int]
    evidence_ranks: list[int]
    dumps: Path
    record: dict = field(default_factory=dict)


def default_dumps_dir(now: float | None = None) -> Path:
    return Path(time.strftime("ddpdoctor-hang-%Y%m%d-%H%M%S", time.localtime(now)))


def job_environment(base: dict, run_dir: Path, dumps: Path, hang_after: float) -> dict:
    """The job's environment: the user's, plus Flight Recorder and the rank helper. A value the user
    set already is kept."""
    env = dict(base)
    env[rank_agent.ENV_RUN] = str(run_dir)
    env[rank_agent.ENV_DUMPS] = str(dumps.resolve())
    env[rank_agent.ENV_HANG_AFTER] = repr(float(hang_after))
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR)] + [p for p in [base.get("PYTHONPATH")] if p])
    env.setdefault("TORCH_FR_BUFFER_SIZE", "2000")  # read when the process group is created
    # NCCL's own evidence path (not exercised here: no GPU): dump Flight Recorder on a watchdog
    # timeout, and a pipe per rank that dumps on demand.
    env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    env.setdefault("TORCH_FR_DUMP_TEMP_FILE", str(dumps.resolve() / "nccl_trace_rank_"))
    env.setdefault("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", str(run_dir / "nccl_pipe_"))
    return env


class Watch:
    def __init__(
        self, command: list[str], hang_after: float, dumps: Path, collect_s: float | None = None, echo=None
    ) -> None:
        self.command = command
        self.hang_after = hang_after
        self.dumps = dumps
        poll = poll_interval(hang_after)
        # ranks answer a request within a poll; other nodes need one more poll plus the store copy
        self.collect_s = collect_s if collect_s is not None else 3 * poll + 6.0
        self.echo = echo or (lambda msg: print(f"ddpdoctor watch: {msg}", file=sys.stderr, flush=True))
        self.run_dir = Path(tempfile.mkdtemp(prefix="ddpdoctor-watch-"))
        self.proc: subprocess.Popen | None = None
        self._signal: int | None = None

    # -- what the ranks wrote ---------------------------------------------------------------------
    def _metas(self) -> dict[int, dict]:
        out = {}
        for p in self.run_dir.glob("rank-*.meta.json"):
            try:
                d = json.loads(p.read_text())
                out[int(d["rank"])] = d
            except (OSError, ValueError, KeyError):
                pass
        return out

    def _triggers(self) -> list[dict]:
        out = []
        for p in sorted(self.run_dir.glob("trigger-*.json")):
            try:
                out.append(json.loads(p.read_text()))
            except (OSError, ValueError):
                pass
        return out

    def _evidence(self) -> dict[int, str]:
        """rank -> reason, for every rank file in the dumps directory."""
        out = {}
        if not self.dumps.is_dir():
            return out
        for p in self.dumps.glob("rank-*.json"):
            try:
                d = json.loads(p.read_text())
                out[int(d["rank"])] = str(d.get("reason"))
            except (OSError, ValueError, KeyError, TypeError):
                pass
        return out

    def _released(self) -> bool:
        """Several nodes: this node's first rank says every node has copied everyone's evidence."""
        if max((int(m.get("nodes") or 1) for m in self._metas().values()), default=1) <= 1:
            return True
        return any(self.run_dir.glob("released-*.json"))

    def _world_size(self) -> int | None:
        sizes = [m.get("world_size") for m in self._metas().values() if m.get("world_size")]
        return max(sizes) if sizes else None

    # -- the run ----------------------------------------------------------------------------------
    def run(self) -> WatchResult:
        started = time.time_ns()
        env = job_environment(os.environ, self.run_dir, self.dumps, self.hang_after)
        old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        for s in old:
            signal.signal(s, self._on_signal)
        try:
            # its own session, so that ending it reaches every process it started and nothing else
            self.proc = subprocess.Popen(self.command, env=env, start_new_session=True)
            return self._watch(started)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            if self.proc is not None:
                self._end_tree()
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def _on_signal(self, signum, frame) -> None:
        self._signal = signum

    def _watch(self, started: int) -> WatchResult:
        assert self.proc is not None
        while True:
            code = self.proc.poll()
            if code is not None:
                return self._after_exit(started, code)
            if self._signal is not None:
                self.echo(f"got {signal.Signals(self._signal).name}: ending the job")
                self._end_tree(self._signal)
                return self._result("interrupted", 130, None, started, None)
            triggers = self._triggers()
            # a hang seen on another node reaches us as evidence our ranks wrote on request
            remote = [r for r, why in self._evidence().items() if why == "hang"] if not triggers else []
            if triggers or remote:
                return self._on_hang(started, triggers)
            time.sleep(TICK_S)

    def _on_hang(self, started: int, triggers: list[dict]) -> WatchResult:
        detected = time.time_ns()
        trig = min(triggers, key=lambda t: t.get("since_ns", 0)) if triggers else None
        if trig:
            self.echo(
                f"rank {trig['rank']} ({trig.get('host', '?')}) has waited {trig['waiting_s']:.0f} s in "
                f"{trig['operation']}"
                + (f" #{trig['seq']}" if trig.get("seq") is not None else "")
                + f" (--hang-after {self.hang_after:g} s): collecting evidence from every rank"
            )
        else:
            self.echo("another node called a hang: collecting evidence from every rank")
        (self.run_dir / "request").write_text("hang")
        deadline = time.monotonic() + self.collect_s
        while time.monotonic() < deadline:
            world = self._world_size()
            if world and len(self._evidence()) >= world and self._released():
                break
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(TICK_S)
        self._end_tree()
        return self._result("hang", 1, trig, started, detected)

    def _after_exit(self, started: int, code: int) -> WatchResult:
        # the job is over; whatever it left behind (a rank in another session) goes too
        self._end_tree()
        if code == 0:
            return self._result("finished", 0, None, started, None)
        # ranks dying of SIGTERM write evidence just before: give the last writes a moment
        time.sleep(TICK_S)
        return self._result("crash", code if code > 0 else 128 - code, None, started, time.time_ns())

    # -- ending the process tree ---------------------------------------------------------------------
    def _tree(self) -> list[psutil.Process]:
        if self.proc is None:
            return []
        procs = []
        try:
            root = psutil.Process(self.proc.pid)
            procs = root.children(recursive=True) + [root]
        except psutil.NoSuchProcess:
            pass
        # ranks that left the tree (reparented) but are still ours: their pids are in the metas
        for m in self._metas().values():
            try:
                p = psutil.Process(int(m["pid"]))
                if p not in procs and _environ(p).get(rank_agent.ENV_RUN) == str(self.run_dir):
                    procs.append(p)
            except (psutil.Error, KeyError, ValueError):
                pass
        return procs

    def _end_tree(self, first_signal: int = signal.SIGTERM) -> None:
        """SIGTERM to every process the job started (ranks write evidence on it), SIGKILL after
        GRACE_S to whatever is left, then reap. Bounded."""
        end_tree(self.proc.pid, GRACE_S, first_signal, extra=[p.pid for p in self._tree()])

    # -- the record ---------------------------------------------------------------------------------
    def _result(
        self, outcome: str, exit_code: int, trigger: dict | None, started: int, detected: int | None
    ) -> WatchResult:
        metas = self._metas()
        world = self._world_size()
        evidence = sorted(self._evidence())
        missing = sorted(set(range(world)) - set(evidence)) if world else []
        job_code = self.proc.returncode if self.proc is not None else None
        record = {
            "format": WATCH_FORMAT,
            "version": 1,
            "command": self.command,
            "hang_after_s": self.hang_after,
            "started_ns": started,
            "detected_ns": detected,
            "outcome": outcome,
            "trigger": None
            if trigger is None
            else {
                "rank": trigger["rank"],
                "operation": trigger["operation"],
                "waiting_s": trigger["waiting_s"],
                "seq": trigger.get("seq"),
                "host": trigger.get("host"),
                "source": trigger.get("source"),
            },
            "world_size": world,
            "exit_codes": {},
            "job_exit_code": job_code,
            "missing_ranks": missing,
            "hosts": {str(r): m.get("host") for r, m in sorted(metas.items())},
        }
        return WatchResult(
            outcome, exit_code, trigger, started, detected, world, missing, evidence, self.dumps, record
        )


def _environ(p: psutil.Process) -> dict:
    try:
        return p.environ()
    except psutil.Error:
        return {}


def save_record(result: WatchResult) -> Path:
    result.dumps.mkdir(parents=True, exist_ok=True)
    path = result.dumps / "watch.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result.record, indent=1) + "\n")
    os.replace(tmp, path)
    return path
