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
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ddpdoctor.boundary.processes import end_tree
from ddpdoctor.model.hang.certain import Certainty, Confirmer, WaitState, certain
from ddpdoctor.model.hang.evidence import RankEnd
from ddpdoctor.model.hang.pending import poll_interval
from ddpdoctor.probes.rank_ends import end_from_fault, fault_evidence, oom_kills
from ddpdoctor.runtime import rank_agent

SITE_DIR = Path(__file__).resolve().parent / "watch_site"
WATCH_FORMAT = "ddpdoctor-hang-watch"
TICK_S = 0.2
GRACE_S = 5.0  # SIGTERM first (the ranks write their evidence on it), SIGKILL after this
CONFIRM_S = 3.0  # default --confirm: a certain deadlock seen unchanged this long ends the job
AUTO = "auto"  # --hang-after auto: the ranks take the threshold from the job's own rhythm
# the exception torchrun raises on the SIGTERM we send it: its traceback is ours, not the job's
_OUR_SIGNAL = re.compile(r"SignalException|got signal: 15|Signals\.SIGTERM")
# a backend's own words for a collective mismatch (gloo aborts the rank with it)
_BACKEND_MISMATCH = re.compile(r"(Received data size doesn't match expected size[^\n]*|"
                               r"enforce fail at [^\n]*(size|count|dtype)[^\n]*)")  # fmt: skip


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


def job_environment(base: dict, run_dir: Path, dumps: Path, hang_after: float | str, verify: bool = False) -> dict:
    """The job's environment: the user's, plus Flight Recorder and the rank helper. A value the user
    set already is kept."""
    env = dict(base)
    env[rank_agent.ENV_RUN] = str(run_dir)
    env[rank_agent.ENV_DUMPS] = str(dumps.resolve())
    env[rank_agent.ENV_HANG_AFTER] = AUTO if hang_after == AUTO else repr(float(hang_after))
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR)] + [p for p in [base.get("PYTHONPATH")] if p])
    env.setdefault("TORCH_FR_BUFFER_SIZE", "2000")  # read when the process group is created
    if verify:
        # the ranks check collectives, p2p requests, DDP forwards and samplers themselves (see
        # verify_hooks.py). Not TORCH_DISTRIBUTED_DEBUG=DETAIL: on torch 2.13 CPU builds it crashes
        # DDP's constructor (SIGSEGV, seen here); a user who sets it keeps it.
        env[rank_agent.ENV_VERIFY] = "1"
    # NCCL's own evidence path (not exercised here: no GPU): dump Flight Recorder on a watchdog
    # timeout, and a pipe per rank that dumps on demand.
    env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    env.setdefault("TORCH_FR_DUMP_TEMP_FILE", str(dumps.resolve() / "nccl_trace_rank_"))
    env.setdefault("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", str(run_dir / "nccl_pipe_"))
    return env


class Watch:
    def __init__(
        self,
        command: list[str],
        hang_after: float | str,
        dumps: Path,
        collect_s: float | None = None,
        echo=None,
        confirm_s: float = CONFIRM_S,
        verify: bool = False,
    ) -> None:
        self.verify = verify
        self.command = command
        self.hang_after = hang_after
        self.dumps = dumps
        poll = poll_interval(rank_agent.AUTO_FLOOR_S if hang_after == AUTO else float(hang_after))
        # ranks answer a request within a poll; other nodes need one more poll plus the store copy
        self.collect_s = collect_s if collect_s is not None else 3 * poll + 6.0
        self.echo = echo or (lambda msg: print(f"ddpdoctor watch: {msg}", file=sys.stderr, flush=True))
        self.run_dir = Path(tempfile.mkdtemp(prefix="ddpdoctor-watch-"))
        self.proc: subprocess.Popen | None = None
        self._signal: int | None = None
        self.confirmer = Confirmer(confirm_s)
        self.confirm_s = confirm_s
        self.certainty: Certainty | None = None
        self.ending = False  # we are ending the job: its launcher's complaint about our signal is ours
        self.gone_before_stop: set[int] = set()  # ranks whose process had gone before we ended the job
        self.backend_error: str | None = None
        self.host = socket.gethostname()
        self.oom_at_start = oom_kills()
        self.pump: threading.Thread | None = None

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

    def _waits(self) -> dict[int, WaitState]:
        out = {}
        for p in self.run_dir.glob("wait-*.json"):
            try:
                w = WaitState.from_dict(json.loads(p.read_text()))
                out[w.rank] = w
            except (OSError, ValueError, KeyError, TypeError):
                pass
        return out

    def _ends(self) -> dict[int, RankEnd]:
        """How each rank that ended, ended: its own record (end-R.json: exit, exception, SIGTERM), else
        for a rank of this node whose process is gone, the fatal signal faulthandler wrote down, else
        "killed" (SIGKILL, or the OOM killer when the cgroup counted one since the job started)."""
        out: dict[int, RankEnd] = {}
        for p in self.run_dir.glob("end-*.json"):
            try:
                d = json.loads(p.read_text())
                out[int(d["rank"])] = RankEnd(int(d["rank"]), str(d["how"]), d.get("code"),
                                              str(d.get("detail") or ""),
                                              {str(k): int(v) for k, v in (d.get("last_seq") or {}).items()})  # fmt: skip
            except (OSError, ValueError, KeyError, TypeError):
                pass
        for r, m in self._metas().items():
            if r in out or m.get("host") != self.host or _alive(m.get("pid")):
                continue
            fault = self.run_dir / f"fault-{r}.txt"
            end = end_from_fault(r, fault)
            if end is None and self.ending and r not in self.gone_before_stop:
                # gone without a word after we began ending the job: our signal, or the launcher's
                # (srun cancels its step with SIGKILL), not a crash of its own
                end = RankEnd(r, "terminated", 9, "ended when watch stopped the job")
            if end is None:
                ooms = oom_kills()
                oom = ooms is not None and self.oom_at_start is not None and ooms > self.oom_at_start
                end = RankEnd(r, "signal", 9, "SIGKILL (the OOM killer)" if oom else "SIGKILL or the OOM killer")
            out[r] = end
        return out

    def _records(self, pattern: str, lines: bool = False) -> list[dict]:
        """The JSON the ranks left in the run folder, files in name order: one object per file, or
        per line (``lines``); a file being written or unreadable is skipped until the next look."""
        out: list[dict] = []
        for p in sorted(self.run_dir.glob(pattern)):
            try:
                text = p.read_text()
                out += [json.loads(x) for x in text.splitlines() if x.strip()] if lines else [json.loads(text)]
            except (OSError, ValueError):
                pass
        return out

    def _triggers(self) -> list[dict]:
        return self._records("trigger-*.json")

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

    def _certain(self) -> Certainty | None:
        """A deadlock certain from the ranks' published waits and ends, seen unchanged for --confirm."""
        waits = self._waits()
        if not waits:
            self.confirmer.update(None, time.time_ns())
            return None
        world = self._world_size() or (max(waits) + 1)
        return self.confirmer.update(certain(waits, self._ends(), world), time.time_ns())

    # -- the run ----------------------------------------------------------------------------------
    def run(self) -> WatchResult:
        started = time.time_ns()
        env = job_environment(os.environ, self.run_dir, self.dumps, self.hang_after, self.verify)
        old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        for s in old:
            signal.signal(s, self._on_signal)
        try:
            # its own session, so that ending it reaches every process it started and nothing else;
            # stderr through us, byte for byte, so that what the launcher says about our own signal
            # can be left out (see _pump)
            self.proc = subprocess.Popen(self.command, env=env, start_new_session=True, stderr=subprocess.PIPE)
            self.pump = threading.Thread(target=self._pump, args=(self.proc.stderr,), daemon=True)
            self.pump.start()
            return self._watch(started)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            if self.proc is not None:
                self._end_tree()
            if self.pump is not None:
                self.pump.join(timeout=2.0)
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def _pump(self, stream) -> None:
        """Copy the job's stderr to ours as it comes. Once we are ending the job, hold each Python
        traceback until its last line: one that ends in the exception our SIGTERM raised in the
        launcher (torchrun's SignalException) is left out, with one line saying so."""
        out = sys.stderr.buffer
        fd = stream.fileno()
        held: list[bytes] = []
        partial = b""
        said = False
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            m = _BACKEND_MISMATCH.search(chunk.decode("utf-8", "replace"))
            if m and self.backend_error is None:
                self.backend_error = m.group(1).strip()
            if not self.ending and not held and not partial:
                _write(out, chunk)
                continue
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            for line in lines:
                text = line.decode("utf-8", "replace")
                if not held and text.startswith("Traceback (most recent call last)"):
                    held.append(line)
                elif held:
                    held.append(line)
                    if text and not text.startswith((" ", "\t", "Traceback", "During handling",
                                                     "The above exception")):  # fmt: skip
                        if _OUR_SIGNAL.search(text):
                            if not said:
                                _write(out, b"ddpdoctor watch: (the launcher's traceback for the SIGTERM "
                                            b"watch sent it is left out)\n")  # fmt: skip
                                said = True
                        else:
                            _write(out, b"\n".join(held) + b"\n")
                        held = []
                else:
                    _write(out, line + b"\n")
        _write(out, b"\n".join(held) + (b"\n" if held else b"") + partial)

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
            sure = self._certain()
            if sure is not None:
                self.certainty = sure
                return self._on_hang(started, [self._certain_trigger(sure)])
            time.sleep(TICK_S)

    def _verify_findings(self) -> list[dict]:
        """What the ranks' --verify checks found while the job ran (verify-R.jsonl, one per line)."""
        return self._records("verify-*.jsonl", lines=True)

    def _forwards(self) -> list[dict]:
        """Each rank's forwards of the DDP model per call site (forward-R.json, --verify)."""
        return self._records("forward-*.json")

    def _certain_trigger(self, c: Certainty) -> dict:
        waits = self._waits()
        first = min((waits[r] for r in c.ranks if r in waits), key=lambda w: w.since_ns, default=None)
        now = time.time_ns()
        return {
            "rank": c.ranks[0] if first is None else first.rank,
            "host": None if first is None else first.host,
            "operation": "?" if first is None else first.operation,
            "seq": None if first is None else first.seq,
            "since_ns": now if first is None else first.since_ns,
            "waiting_s": 0.0 if first is None else round((now - first.since_ns) / 1e9, 3),
            "source": "certain",
            "certain": {"kind": c.kind, "reason": c.reason, "ranks": list(c.ranks),
                        "confirm_s": self.confirm_s},  # fmt: skip
        }

    def _on_hang(self, started: int, triggers: list[dict]) -> WatchResult:
        detected = time.time_ns()
        trig = min(triggers, key=lambda t: t.get("since_ns", 0)) if triggers else None
        if trig and trig.get("certain"):
            self.echo(f"certain deadlock, unchanged for {self.confirm_s:g} s (--confirm): "
                      f"{trig['certain']['reason']}: collecting evidence from every rank")  # fmt: skip
        elif trig:
            limit = (f"--hang-after auto: {trig['auto']['threshold_s']:.0f} s" if trig.get("auto")
                     else f"--hang-after {float(self.hang_after):g} s")  # fmt: skip
            self.echo(
                f"rank {trig['rank']} ({trig.get('host', '?')}) has waited {trig['waiting_s']:.0f} s in "
                f"{trig['operation']}"
                + (f" #{trig['seq']}" if trig.get("seq") is not None else "")
                + f" ({limit}): collecting evidence from every rank"
            )
        else:
            self.echo("another node called a hang: collecting evidence from every rank")
        (self.run_dir / "request").write_text(json.dumps(trig) if trig else "hang")
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
        self._fault_evidence()
        return self._result("crash", code if code > 0 else 128 - code, None, started, time.time_ns())

    def _fault_evidence(self) -> None:
        """A rank of this node that died of a fatal signal left no evidence of its own, but
        faulthandler wrote its Python stack: turn that into its rank file."""
        have = self._evidence()
        metas = self._metas()
        for r, m in metas.items():
            if r in have or m.get("host") != self.host:
                continue
            doc = fault_evidence(self.run_dir / f"fault-{r}.txt", m, self.backend_error)
            if doc is not None:
                try:
                    self.dumps.mkdir(parents=True, exist_ok=True)
                    rank_agent._write_json(str(self.dumps / f"rank-{r}.json"), doc)
                except OSError:
                    pass

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
        assert self.proc is not None
        self.gone_before_stop = set(self._ends())
        self.ending = True  # what the launcher now says about our signal is ours (see _pump)
        end_tree(self.proc.pid, GRACE_S, first_signal, extra=[p.pid for p in self._tree()])

    # -- the record ---------------------------------------------------------------------------------
    def _result(
        self, outcome: str, exit_code: int, trigger: dict | None, started: int, detected: int | None
    ) -> WatchResult:
        metas = self._metas()
        world = self._world_size()
        ends = self._ends()
        evidence = sorted(self._evidence())
        missing = sorted(set(range(world)) - set(evidence)) if world else []
        job_code = self.proc.returncode if self.proc is not None else None
        verify = self._verify_findings()
        record = {
            "format": WATCH_FORMAT,
            "version": 1,
            "command": self.command,
            "hang_after_s": None if self.hang_after == AUTO else float(self.hang_after),
            "hang_after_auto": self.hang_after == AUTO,
            "confirm_s": self.confirm_s,
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
                **({"auto": trigger["auto"]} if trigger.get("auto") else {}),
            },
            "certain": trigger.get("certain") if trigger else None,
            "backend_error": self.backend_error,
            "world_size": world,
            "verify": verify,
            "collective_mismatches": [d["mismatch"] for d in verify if d.get("kind") == "collective_mismatch"
                                      and isinstance(d.get("mismatch"), dict)][:1],
            "forwards": self._forwards(),
            "exit_codes": {str(r): e.exit_code for r, e in sorted(ends.items()) if e.exit_code is not None},
            "ends": {str(r): e.to_dict() for r, e in sorted(ends.items())},
            "job_exit_code": job_code,
            "missing_ranks": missing,
            "hosts": {str(r): m.get("host") for r, m in sorted(metas.items())},
        }
        return WatchResult(
            outcome, exit_code, trigger, started, detected, world, missing, evidence, self.dumps, record
        )


def _alive(pid) -> bool:
    try:
        return psutil.Process(int(pid)).status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, TypeError, ValueError):
        return False


def _write(out, data: bytes) -> None:
    try:
        out.write(data)
        out.flush()
    except (OSError, ValueError):
        pass


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
