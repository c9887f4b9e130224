"""The in-rank helper of `ddpdoctor watch`, started by the sitecustomize in ``watch_site/`` in every
process of the job that is a rank (RANK or SLURM_PROCID set), with no change to the training script.

It is one daemon thread. Blocking process-group calls release the GIL, so it keeps running while the
main thread waits in a collective (and gets its share of the GIL while the main thread spins in
Python). Until the script has created its process group it only sleeps. Then, every poll interval:

- it answers a request for evidence (a file ``request`` in the run directory, or a key in the job's
  rendezvous store for ranks on other nodes) by writing ``rank-R.json`` (the contract's format) into
  the dumps directory and into the store; a node's first rank also copies the other nodes' evidence
  from the store, so every node's watch ends up with every rank's file;
- it looks at its own Flight Recorder entries (and, for operations Flight Recorder does not record,
  at the main thread's stack): when it has waited in one operation for longer than --hang-after it
  writes ``trigger-R.json`` for its node's watch and sets the request key for the other nodes.

A rank that dies of an exception writes its evidence from ``sys.excepthook``; one told to stop
(SIGTERM, as torchrun does to the survivors when a rank dies) writes it before stopping, through the
signal wake-up fd so that this also works while the main thread is blocked in C++.
Every wait is bounded; nothing here ever raises into the training script.
"""

from __future__ import annotations

import atexit
import faulthandler
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback

from ddpdoctor.model.hang.certain import NEW_GROUP_CALLS, P2P_CALLS, WaitState
from ddpdoctor.model.hang.pending import (
    C10D_FILE_SUFFIX,
    Pending,
    ProgressTracker,
    Rhythm,
    StackWaitTracker,
    c10d_wait,
    oldest_pending_entry,
    pending_of,
    poll_interval,
)

ENV_RUN = "DDPDOCTOR_WATCH_RUN"  # control files: request, trigger-R.json, rank-R.meta.json
ENV_DUMPS = "DDPDOCTOR_WATCH_DUMPS"  # evidence: rank-R.json
ENV_HANG_AFTER = "DDPDOCTOR_WATCH_HANG_AFTER"
ENV_VERIFY = "DDPDOCTOR_WATCH_VERIFY"  # `watch --verify`: check DDP misuse while the job runs
FORMAT, VERSION = "ddpdoctor-hang-evidence", 1
STORE_TIMEOUT_S = 5.0
GATHER_S = 10.0  # how long a node's first rank keeps copying other nodes' evidence from the store
THREAD_NAME = "ddpdoctor-watch"
AUTO_FLOOR_S = 60.0  # --hang-after auto never calls a wait shorter than this a hang
AUTO_FACTOR = 10.0  # ... nor one shorter than this many times the longest gap the job has shown
PROBE_S = 0.5  # a wait this long is published (wait-R.json) for the watch's certainty check
# operations Flight Recorder does not record on gloo: only the main thread's stack says we wait in them
STACK_ONLY = P2P_CALLS | NEW_GROUP_CALLS | {"monitored_barrier"}
# where `watch --verify` waits on an isend/irecv request: verify_p2p.py's Work.wait (not imported here:
# plain watch never loads the --verify modules)
_REQUEST_WAIT = ("ddpdoctor/runtime/verify_p2p.py", "wait")


def should_activate(environ: dict, argv: list[str]) -> bool:
    """Only in ranks: not in the torchrun agent, not in a DataLoader worker started by spawn."""
    if not environ.get(ENV_RUN) or not environ.get(ENV_DUMPS):
        return False
    if "RANK" not in environ and "SLURM_PROCID" not in environ:
        return False
    return not any("multiprocessing" in a for a in argv)


def _write_json(path: str, doc: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def _frames(summary) -> list[dict]:
    out = []
    for f in summary:
        d = {"file": f.filename, "line": f.lineno, "function": f.name, "code": f.line or ""}
        out.append(d)
    return out


def _c10d_args(frame) -> dict:
    """Peer and tensor of a c10d call (gloo's send/recv leave no Flight Recorder entry to say so)."""
    out = {}
    for name in ("dst", "src", "group_dst", "group_src"):
        v = frame.f_locals.get(name)
        if isinstance(v, int):
            out[name] = str(v)
    ranks = frame.f_locals.get("ranks")
    if frame.f_locals.get("use_local_synchronization") is True and isinstance(ranks, (list, tuple)):
        out["ranks"] = ",".join(str(int(r)) for r in ranks)
    t = frame.f_locals.get("tensor")
    if t is not None and hasattr(t, "shape") and hasattr(t, "dtype"):
        out["tensor"] = f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}"
    return out


def _chain(frame) -> list:
    """The frame objects from the outermost to ``frame``."""
    out = []
    while frame is not None:
        out.append(frame)
        frame = frame.f_back
    out.reverse()
    return out


def _request_wait(chain: list):
    """The frame of ours in which the main thread waits on a p2p request (watch --verify), if any."""
    for fo in reversed(chain):
        if fo.f_code.co_name == _REQUEST_WAIT[1] and fo.f_code.co_filename.replace("\\", "/").endswith(_REQUEST_WAIT[0]):
            return fo if isinstance(fo.f_locals.get("request"), str) else None
    return None


def stack_of(frame) -> list[dict]:
    frames = _frames(traceback.extract_stack(frame))
    # extract_stack walks f_back too; pair its summaries with the frames to add c10d arguments
    for d, fo in zip(frames, _chain(frame)):
        path = d["file"].replace("\\", "/")
        if path.endswith(C10D_FILE_SUFFIX):
            args = _c10d_args(fo)
            if args:
                d["locals"] = args
        elif path.endswith(_REQUEST_WAIT[0]) and d["function"] == _REQUEST_WAIT[1]:
            req = fo.f_locals.get("request")
            if isinstance(req, str):
                d["locals"] = {"request": req, "p2p_seq": str(fo.f_locals.get("p2p_seq")), **_c10d_args(fo)}
    return frames


class Agent:
    def __init__(self, environ: dict) -> None:
        self.run_dir = environ[ENV_RUN]
        self.dumps = environ[ENV_DUMPS]
        raw = environ.get(ENV_HANG_AFTER, "300")
        self.auto = raw == "auto"  # --hang-after auto: the threshold follows the job's rhythm
        self.hang_after = AUTO_FLOOR_S if self.auto else float(raw)
        self.rhythm = Rhythm()
        self.poll = poll_interval(self.hang_after)
        self.rank: int | None = None
        self.world = None
        # before the process group exists (a rank that dies in init) the launcher's variables say who
        # we are: evidence is written in every state a rank can be in
        self.env_rank = _int(environ.get("RANK", environ.get("SLURM_PROCID")))
        self.env_world = _int(environ.get("WORLD_SIZE", environ.get("SLURM_NTASKS")))
        self.local_rank = int(environ.get("LOCAL_RANK", environ.get("SLURM_LOCALID", "0")))
        self.node_rank = int(environ.get("GROUP_RANK", environ.get("SLURM_NODEID", "0")))
        self.nodes = int(environ.get("GROUP_WORLD_SIZE", environ.get("SLURM_NNODES", "1")))
        self.metas_missing: set[int] = set()  # other nodes' ranks whose host this node does not know yet
        self.released = False
        self.host = socket.gethostname()
        self.store = None
        self.prefix = "ddpdoctor-watch/{}/{}/".format(
            environ.get("TORCHELASTIC_RUN_ID", "job"), environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        )
        self.dumped: str | None = None  # the reason of the evidence written, once written
        self.triggered = False
        self.gather_until = 0.0
        # re-entrant: a second SIGTERM may run the main thread's handler again inside a dump
        self.lock = threading.RLock()
        self.stack_wait = StackWaitTracker()
        self.progress = ProgressTracker()
        self.main_ident = threading.main_thread().ident
        self.wake_r = -1
        self.wake_w = -1
        self.stop = threading.Event()  # set at interpreter exit: the thread ends before finalization
        self.in_hook = False  # an exception hook of ours is running (never re-enter)
        # the uncaught exception the main thread is dying of, once our hook has it: a SIGTERM that
        # lands while it is being reported must not lose it from the evidence
        self.dying_of: BaseException | None = None
        self.pid = os.getpid()  # a forked DataLoader worker inherits our hooks: it is not the rank
        self.exit_code: int | str | None = None  # what sys.exit was called with
        self.ended = False
        self.published: tuple | None = None  # the wait last written to wait-R.json
        self.fault_file = None
        self.verify = environ.get(ENV_VERIFY) == "1"
        self.thread: threading.Thread | None = None

    # -- installation (main thread, at interpreter start) ------------------------------------------
    def install(self) -> None:
        self._install_sigterm()
        sys.excepthook = self._chained_hook(sys.excepthook)
        self._install_ends()
        if self.verify:
            from ddpdoctor.runtime.verify_hooks import install_import_hook

            install_import_hook(self)
        self.thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self.thread.start()

    def _install_ends(self) -> None:
        """Record how this rank ends: sys.exit's code, a normal interpreter exit, os._exit, and (with
        faulthandler, unless the user enabled it already) the Python stack of a fatal signal."""
        if self.env_rank is not None and not faulthandler.is_enabled():
            try:
                self.fault_file = open(os.path.join(self.run_dir, f"fault-{self.env_rank}.txt"), "w")  # noqa: SIM115
                faulthandler.enable(self.fault_file, all_threads=True)
            except OSError:
                self.fault_file = None
        real_exit, real_os_exit = sys.exit, os._exit

        def exit_(code=None):
            self.exit_code = code
            return real_exit(code)

        def os_exit(code):
            self.record_end("exit", code if isinstance(code, int) else None)
            return real_os_exit(code)

        sys.exit = exit_
        os._exit = os_exit
        atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        """End our thread and drop our store client while the interpreter is whole: a C++ call of
        ours still running when finalization destroys torch's objects can abort the process
        ("terminate called without an active exception", seen here)."""
        self.stop.set()
        if self.wake_w >= 0:
            try:
                os.write(self.wake_w, b"\0")  # wakes the select; not SIGTERM, so only the stop is seen
            except OSError:
                pass
        if self.thread is not None and self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout=2.0)
        self._record_exit()
        self.store = None

    def _record_exit(self) -> None:
        code = self.exit_code
        if self.verify and not self.in_hook and code in (None, 0):
            from ddpdoctor.runtime.verify_p2p import report_unwaited

            report_unwaited(self)  # a normal end: every request not waited by now never will be
        if code is None or isinstance(code, int):
            self.record_end("exit", code if code is not None else 0)
        else:  # sys.exit("message") exits 1 after printing it
            self.record_end("exit", 1, str(code))

    def _install_sigterm(self) -> None:
        if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
            return  # someone else handles SIGTERM: leave it to them
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        try:
            old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (ValueError, OSError):
            os.close(r)
            os.close(w)
            return
        if old != -1:  # the wake-up fd is someone else's: give it back, no SIGTERM dump
            signal.set_wakeup_fd(old)
            os.close(r)
            os.close(w)
            return
        self.wake_r, self.wake_w = r, w
        signal.signal(signal.SIGTERM, self._sigterm_main)

    # -- the process group ------------------------------------------------------------------------
    @staticmethod
    def _dist():
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is not None and dist.is_available() and dist.is_initialized():
                return dist
        except Exception:  # noqa: BLE001 - half-imported torch
            return None
        return None

    def _register(self, dist) -> None:
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        meta = {
            "rank": self.rank,
            "world_size": self.world,
            "local_rank": self.local_rank,
            "node_rank": self.node_rank,
            "nodes": self.nodes,
            "host": self.host,
            "pid": os.getpid(),
        }
        _write_json(os.path.join(self.run_dir, f"rank-{self.rank}.meta.json"), meta)
        self.store = self._connect_store()
        self._store_set(f"meta/{self.rank}", json.dumps(meta))
        self.metas_missing = set(range(self.world)) - {self.rank} if self.local_rank == 0 else set()

    def _connect_store(self):
        """Our own client of the job's store (the torchrun agent's or rank 0's): the main thread may be
        inside a store call of its own, and a client serialises its calls."""
        addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if not addr or not port:
            return None
        try:
            from datetime import timedelta

            from torch.distributed import TCPStore

            return TCPStore(
                addr,
                int(port),
                is_master=False,
                timeout=timedelta(seconds=STORE_TIMEOUT_S),
                wait_for_workers=False,
            )
        except Exception:  # noqa: BLE001 - no store: evidence stays on this node's files
            return None

    def _store_has(self, key: str) -> bool:
        if self.store is None:
            return False
        try:
            return bool(self.store.check([self.prefix + key]))
        except Exception:  # noqa: BLE001
            self.store = None
            return False

    def _store_set(self, key: str, value: bytes | str) -> None:
        if self.store is None:
            return
        try:
            self.store.set(self.prefix + key, value)
        except Exception:  # noqa: BLE001
            self.store = None

    # -- evidence ---------------------------------------------------------------------------------
    def evidence(self, reason: str, exc: BaseException | None = None) -> dict:
        fr, fr_err = None, None
        try:
            import torch._C._distributed_c10d as c10d

            fr = json.loads(c10d._dump_fr_trace_json(True, False))
        except Exception as e:  # noqa: BLE001
            fr_err = f"{type(e).__name__}: {e}"
        names = {t.ident: t.name for t in threading.enumerate()}
        threads = []
        for tid, frame in sys._current_frames().items():
            if names.get(tid) == THREAD_NAME:
                continue
            if tid == threading.get_ident():  # the main thread, in our excepthook or SIGTERM handler
                if exc is not None:
                    continue  # unwound already: "exception" holds where it was
                frames = [f for f in stack_of(frame) if f["file"] != __file__]
            else:
                frames = stack_of(frame)
            threads.append(
                {"id": tid, "name": names.get(tid, "?"), "main": tid == self.main_ident, "frames": frames}
            )
        threads.sort(key=lambda t: not t["main"])
        doc = {
            "format": FORMAT,
            "version": VERSION,
            "rank": self.rank if self.rank is not None else self.env_rank,
            "world_size": self.world if self.world is not None else self.env_world,
            "local_rank": self.local_rank,
            "node_rank": self.node_rank,
            "host": self.host,
            "pid": os.getpid(),
            "captured_ns": time.time_ns(),
            "reason": reason,
            "flight_recorder": fr,
            "threads": threads,
            "exception": None,
        }
        if fr_err:
            doc["flight_recorder_error"] = fr_err
        if exc is not None:
            doc["exception"] = {
                "type": type(exc).__name__,
                "message": str(exc),
                "frames": _frames(traceback.extract_tb(exc.__traceback__)),
            }
        return doc

    def dump(self, reason: str, exc: BaseException | None = None) -> None:
        """Write this rank's evidence once; a later reason never overwrites an earlier one. Before the
        process group exists, the launcher's RANK/WORLD_SIZE name the file."""
        rank = self.rank if self.rank is not None else self.env_rank
        if rank is None or (self.world is None and self.env_world is None) or os.getpid() != self.pid:
            return
        with self.lock:
            if self.dumped is not None:
                return
            if self.verify:
                try:
                    from ddpdoctor.runtime.verify_collectives import shared_mismatch

                    shared_mismatch(self)
                except Exception:  # noqa: BLE001 - the evidence matters more
                    pass
            doc = self.evidence(reason, exc)
            try:
                os.makedirs(self.dumps, exist_ok=True)
                _write_json(os.path.join(self.dumps, f"rank-{rank}.json"), doc)
            except OSError as e:
                print(f"ddpdoctor watch: rank {rank} could not write its evidence: {e}", file=sys.stderr)
            self._store_set(f"evidence/{rank}", json.dumps(doc))
            self.dumped = reason

    def record_end(self, how: str, code: int | None, detail: str = "") -> None:
        """end-R.json for the watch: how this rank ended and the last collective it entered in each
        group (a member that ended before a collective will never enter it). First one wins."""
        rank = self.rank if self.rank is not None else self.env_rank
        if rank is None or self.ended or os.getpid() != self.pid:
            return
        self.ended = True
        if self.verify:
            from ddpdoctor.runtime import verify_forward

            verify_forward.write(self)
        last: dict[str, int] = {}
        try:
            import torch._C._distributed_c10d as c10d

            doc = json.loads(c10d._dump_fr_trace_json(True, False))
            for e in doc.get("entries") or []:
                if not e.get("is_p2p"):
                    g = _group_of(e)
                    last[g] = max(last.get(g, 0), int(e.get("collective_seq_id") or 0))
        except Exception:  # noqa: BLE001 - no Flight Recorder: the end alone still counts
            pass
        end = {"rank": rank, "how": how, "code": code, "detail": detail, "last_seq": last,
               "host": self.host, "pid": os.getpid()}  # fmt: skip
        try:
            _write_json(os.path.join(self.run_dir, f"end-{rank}.json"), end)
        except OSError:
            pass
        if self.nodes > 1:  # other nodes' watches learn of it through the store
            self._store_set(f"end/{rank}", json.dumps(end))

    def _copy_from_store(self, key: str, path: str) -> bool:
        if os.path.exists(path):
            return True
        if not self._store_has(key):
            return False
        try:
            raw = self.store.get(self.prefix + key)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(raw)
            os.replace(tmp, path)
            return True
        except Exception:  # noqa: BLE001 - the store went away: what we have is what we have
            self.store = None
            return False

    def _copy_metas(self) -> None:
        """Learn the other nodes' ranks (host, pid) so that a rank lost later can still be named."""
        for r in sorted(self.metas_missing):
            if self._copy_from_store(f"meta/{r}", os.path.join(self.run_dir, f"rank-{r}.meta.json")):
                self.metas_missing.discard(r)

    def _gather(self) -> None:
        """Copy the other nodes' evidence from the store into this node's dumps directory; once this
        node has everyone's, say so, and tell the watch it may end the job when every node has (the
        store lives in node 0's launcher: ending it early would cut the other nodes off)."""
        if self.store is None or self.world is None:
            return self._release()
        have = all(
            [
                self._copy_from_store(f"evidence/{r}", os.path.join(self.dumps, f"rank-{r}.json"))  # noqa: C419 - copy every one
                for r in range(self.world)
            ]
        )
        if have:
            self._store_set(f"gathered/{self.node_rank}", "1")
        if all(self._store_has(f"gathered/{n}") for n in range(self.nodes)):
            self._release()

    def _release(self) -> None:
        if not self.released:
            self.released = True
            _write_json(os.path.join(self.run_dir, f"released-{self.node_rank}.json"), {"rank": self.rank})

    # -- detection ----------------------------------------------------------------------------------
    def _pending(self) -> tuple[Pending | None, WaitState | None]:
        """Where this rank waits: one continuous wait in one operation (a Flight Recorder entry not
        yet retired, or for what Flight Recorder does not record, one c10d call on the main stack)."""
        now = time.time_ns()
        fr_ok = False
        try:
            import torch._C._distributed_c10d as c10d

            # the small per-group status first: a full dump (up to TORCH_FR_BUFFER_SIZE entries) only
            # once a group has something enqueued and has completed nothing for a second
            status = json.loads(c10d._dump_fr_trace_json(False, False)).get("pg_status", {})
            fr_ok = True
            self.rhythm.update(status, now)
            if self.auto:
                self.hang_after = self.rhythm.threshold_s(AUTO_FLOOR_S, AUTO_FACTOR)
            if self.progress.stalled_s(status, now) >= min(self.hang_after, PROBE_S):
                doc = json.loads(c10d._dump_fr_trace_json(True, False))
                e = oldest_pending_entry(doc.get("entries") or [])
                if e is not None:
                    self.stack_wait.update(None, None, now)
                    return pending_of(e), self._wait_state(e, doc.get("pg_config") or {})
        except Exception:  # noqa: BLE001 - no Flight Recorder: the stack still says where we wait
            pass
        frame = sys._current_frames().get(self.main_ident)
        key, op, args = None, None, {}
        if frame is not None:
            chain = _chain(frame)
            op = c10d_wait([(fo.f_code.co_filename, fo.f_code.co_name) for fo in chain])
            req = _request_wait(chain) if op is None else None
            if req is not None:  # wait() on an isend/irecv request (watch --verify): a p2p wait
                op = str(req.f_locals.get("request"))
            # collectives are Flight Recorder's to time when it works: the stack cannot tell one call
            # from the next at the same line
            if op is not None and fr_ok and op not in STACK_ONLY:
                op = None
            if op is not None:
                key = (frame, frame.f_lineno, len(chain))
                args = _c10d_args(req if req is not None else next(fo for fo in chain if fo.f_code.co_name == op))
        p = self.stack_wait.update(key, op, now)
        if p is None:
            return None, None
        peer = args.get("dst", args.get("src"))
        members = tuple(int(x) for x in args["ranks"].split(",")) if args.get("ranks") else ()
        ws = WaitState(self.rank, op, p.since_ns, None, "default_pg", members,
                       int(peer) if peer is not None else None, args.get("tensor", ""), self.host)  # fmt: skip
        return p, ws

    def _wait_state(self, e: dict, pg_config: dict) -> WaitState:
        p = pending_of(e)
        group = _group_of(e)
        name = str((e.get("process_group") or [""])[0]) if isinstance(e.get("process_group"), list) else ""
        members: tuple[int, ...] = ()
        cfg = pg_config.get(name) if isinstance(pg_config, dict) else None
        if isinstance(cfg, dict) and group != "default_pg":
            try:
                members = tuple(int(x) for x in str(cfg.get("ranks", "")).strip("[]").split(",") if x.strip())
            except ValueError:
                members = ()
        sizes = " ".join("x".join(map(str, s)) for s in e.get("input_sizes") or [])
        dtypes = "/".join(map(str, e.get("input_dtypes") or []))
        op = p.operation.split(":", 1)[-1].split()[0]
        return WaitState(self.rank, op, p.since_ns, p.seq, group, members, None,
                         f"{sizes} {dtypes}".strip(), self.host)  # fmt: skip

    def _publish(self, ws: WaitState | None) -> None:
        """wait-R.json (and the store, for other nodes) while this rank has waited a second or more
        in one operation; removed when it moves on. Written only when it changes."""
        now = time.time_ns()
        if ws is not None and (now - ws.since_ns) / 1e9 < PROBE_S:
            ws = None
        key = None if ws is None else (ws.operation, ws.seq, ws.since_ns, ws.group)
        if key == self.published:
            return
        self.published = key
        path = os.path.join(self.run_dir, f"wait-{self.rank}.json")
        if ws is None:
            try:
                os.unlink(path)
            except OSError:
                pass
        else:
            _write_json(path, ws.to_dict())
        if self.nodes > 1:
            self._store_set(f"wait/{self.rank}", "" if ws is None else json.dumps(ws.to_dict()))

    def _copy_remote(self) -> None:
        """A node's first rank keeps the other nodes' waits and ends in this node's run directory,
        so that this node's watch can judge certainty across nodes. Only while a local rank waits."""
        if self.store is None or self.local_rank != 0 or self.nodes <= 1 or self.world is None:
            return
        if not any(f.startswith("wait-") for f in os.listdir(self.run_dir)):
            return
        local = set()
        for f in os.listdir(self.run_dir):
            if f.startswith("rank-") and f.endswith(".meta.json"):
                try:
                    with open(os.path.join(self.run_dir, f)) as fh:
                        m = json.load(fh)
                    if m.get("node_rank") == self.node_rank and m.get("host") == self.host:
                        local.add(int(m["rank"]))
                except (OSError, ValueError, KeyError):
                    pass
        for r in range(self.world):
            if r in local:
                continue
            for kind in ("wait", "end"):
                path = os.path.join(self.run_dir, f"{kind}-{r}.json")
                if not self._store_has(f"{kind}/{r}"):
                    continue
                try:
                    raw = self.store.get(self.prefix + f"{kind}/{r}")
                except Exception:  # noqa: BLE001
                    self.store = None
                    return
                if raw:
                    with open(f"{path}.{os.getpid()}.tmp", "wb") as fh:
                        fh.write(raw)
                    os.replace(f"{path}.{os.getpid()}.tmp", path)
                elif os.path.exists(path):
                    os.unlink(path)

    def _tick(self) -> None:
        local_req = os.path.join(self.run_dir, "request")
        requested = os.path.exists(local_req)
        if requested and self.nodes > 1 and not self._store_has("request"):
            try:  # the watch on this node decided (a certain deadlock): tell the other nodes
                with open(local_req) as f:
                    self._store_set("request", f.read())
            except OSError:
                pass
        if not requested and self._store_has("request"):
            requested = True
            remote = os.path.join(self.run_dir, "trigger-remote.json")
            if not os.path.exists(remote) and self.local_rank == 0:
                try:
                    raw = self.store.get(self.prefix + "request")
                    if raw.strip().startswith(b"{"):
                        with open(remote + ".tmp", "wb") as f:
                            f.write(raw)
                        os.replace(remote + ".tmp", remote)
                except Exception:  # noqa: BLE001
                    pass
        if requested:
            self.dump("hang")
            if self.local_rank == 0 and not self.released:
                if not self.gather_until:
                    self.gather_until = time.monotonic() + GATHER_S
                if time.monotonic() < self.gather_until:
                    self._gather()
                else:
                    self._release()
            return
        if self.metas_missing:
            self._copy_metas()
        if self.verify:
            from ddpdoctor.runtime import verify_forward

            verify_forward.write(self)
        p, ws = self._pending()
        self._publish(ws)
        self._copy_remote()
        if p is None or self.triggered:
            return
        now = time.time_ns()
        if p.waiting_s(now) >= self.hang_after:
            self.triggered = True
            trig = {"rank": self.rank, "host": self.host, **p.to_dict(now)}
            if self.auto:
                trig["auto"] = self.rhythm.to_dict(AUTO_FLOOR_S, AUTO_FACTOR)
            _write_json(os.path.join(self.run_dir, f"trigger-{self.rank}.json"), trig)
            self._store_set("request", json.dumps(trig))
            self.dump("hang")

    # -- the thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self.stop.is_set():
            if self._wait(self.poll):
                self._terminate()
                return
            if self.stop.is_set():
                return
            try:
                self._ensure_registered()
                if self.rank is None:
                    continue
                self._tick()
            except Exception as e:  # noqa: BLE001 - never take the rank down; say why once and stop
                print(
                    f"ddpdoctor watch: the in-rank helper stopped: {type(e).__name__}: {e}", file=sys.stderr
                )
                return

    def _wait(self, seconds: float) -> bool:
        """Sleep; True when SIGTERM arrived (through the wake-up fd)."""
        if self.wake_r < 0:
            time.sleep(seconds)
            return False
        ready, _, _ = select.select([self.wake_r], [], [], seconds)
        if not ready:
            return False
        try:
            data = os.read(self.wake_r, 512)
        except BlockingIOError:
            return False
        return signal.SIGTERM in data and signal.getsignal(signal.SIGTERM) == self._sigterm_main

    def _terminate(self) -> None:
        """SIGTERM while the main thread may be blocked: evidence first, then die as SIGTERM would."""
        try:
            self._ensure_registered()
            self.dump("exit", self._main_exception())
            self.record_end("terminated", signal.SIGTERM, "SIGTERM")
        finally:
            _die_by_sigterm()

    def _main_exception(self) -> BaseException | None:
        """The exception the main thread is dying of or handling right now, seen from our thread: a
        SIGTERM (torchrun stops the survivors 0.1 s after a rank dies) can reach this thread while the
        main thread is still reporting the error that death caused ("Connection closed by peer")."""
        if self.dying_of is not None:
            return self.dying_of
        current = getattr(sys, "_current_exceptions", None)  # CPython; a tuple per thread before 3.12
        try:
            exc = current().get(self.main_ident) if current else None
        except Exception:  # noqa: BLE001
            return None
        if isinstance(exc, tuple):
            exc = exc[1]
        return exc if isinstance(exc, BaseException) else None

    def _ensure_registered(self) -> None:
        """Before a dump on SIGTERM or an exception, which may come before the first poll did it."""
        with self.lock:
            dist = self._dist() if self.rank is None else None
            if dist is not None:
                self._register(dist)
                self._hook_exceptions()
                if self.verify:
                    from ddpdoctor.runtime.verify_hooks import install_verify_hooks

                    install_verify_hooks(self)

    def _hook_exceptions(self) -> None:
        """Be first in sys.excepthook: init_process_group replaces the hook with torch's own (which
        prefixes "[rankN]:" and calls the one it found: ours). Putting a new link in front of it never
        loops: each link calls the hook it was put in front of, and our dump runs once."""
        if getattr(sys.excepthook, "_ddpdoctor", False):
            return
        sys.excepthook = self._chained_hook(sys.excepthook)

    def _chained_hook(self, following):
        def hook(etype, value, tb):
            if not self.in_hook:
                self.in_hook = True
                self.dying_of = value
                try:
                    self._ensure_registered()
                    self.dump("crash", value)
                    if not issubclass(etype, KeyboardInterrupt):
                        self.record_end("exception", 1, f"{etype.__name__}: {value}")
                except Exception:  # noqa: BLE001
                    pass
            (following or sys.__excepthook__)(etype, value, tb)

        hook._ddpdoctor = True  # type: ignore[attr-defined]
        return hook

    def _sigterm_main(self, signum, frame) -> None:
        """SIGTERM seen by the main thread (it was not blocked): the same, from here."""
        try:
            self._ensure_registered()
            # torchrun stops the survivors 0.1 s after a rank dies: often while they are still handling
            # the exception that death caused them ("Connection reset by peer"): keep it
            self.dump("exit", sys.exc_info()[1] or self.dying_of)
            self.record_end("terminated", signal.SIGTERM, "SIGTERM")
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)



def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _group_of(entry: dict) -> str:
    """A Flight Recorder entry's group as the diagnosis names it: its description ("default_pg"),
    else its name."""
    pg = entry.get("process_group")
    if isinstance(pg, (list, tuple)) and len(pg) == 2:
        # torch 2.13 describes every sub-group as "undefined": only the name tells them apart
        return "default_pg" if pg[1] == "default_pg" else f"group {pg[0]}"
    return str(entry.get("pg_id", ""))


def _die_by_sigterm() -> None:
    """Restore SIGTERM's default action from a non-main thread (signal.signal cannot) and re-raise it,
    so the launcher sees the exit status it expects (-15)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal(signal.SIGTERM, 0)  # SIG_DFL
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    finally:
        os._exit(128 + signal.SIGTERM)


def activate(environ: dict | None = None, argv: list[str] | None = None) -> Agent | None:
    env = os.environ if environ is None else environ
    if not should_activate(env, list(sys.argv if argv is None else argv)):
        return None
    agent = Agent(dict(env))
    agent.install()
    return agent
