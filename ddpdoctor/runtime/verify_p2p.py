"""`watch --verify`: point-to-point requests (isend, irecv, batch_isend_irecv) in the rank.

Each request is remembered with its operation, peer, tensor and the user's path:line until it is
waited (``Work.wait``, or ``is_completed()`` seen true). When the rank ends normally, every request
never waited is a finding: its data may never have been sent or received. While the main thread
waits on one, the wait runs in a frame of ours whose locals (``request``, ``src``/``dst``) tell the
hang doctor the operation and the peer, so a cycle of such waits is named as a cycle.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass

from ddpdoctor.runtime.verify_base import forward_step, record_finding, user_frame

MAX_PENDING = 100_000  # requests remembered at most (the oldest are dropped)
WAIT_FUNCTION = "wait"  # the frame of ours a waiting main thread sits in (see rank_agent)


@dataclass(frozen=True)
class Request:
    op: str  # "isend" | "irecv" | "batch_isend_irecv"
    peer: int | None  # global rank
    tensor: str  # "float32[4]"
    file: str
    line: int
    seq: int  # this rank's count of p2p requests
    step: int | None  # DDP forwards so far


class Requests:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[int, tuple[object, Request]] = {}  # id(work) -> (work, what it is)
        self.seq = 0

    def add(self, work, op: str, peer, tensor) -> None:
        f = user_frame(sys._getframe(1))
        t = f"{str(tensor.dtype).replace('torch.', '')}{list(tensor.shape)}" if hasattr(tensor, "shape") else ""
        with self.lock:
            self.seq += 1
            req = Request(op, peer if isinstance(peer, int) else None, t, f.f_code.co_filename if f else "?",
                          f.f_lineno if f else 0, self.seq, forward_step())  # fmt: skip
            if len(self.pending) >= MAX_PENDING:
                self.pending.pop(next(iter(self.pending)))
            self.pending[id(work)] = (work, req)

    def done(self, work) -> Request | None:
        with self.lock:
            item = self.pending.pop(id(work), None)
        return item[1] if item else None


REQUESTS = Requests()


def patch(agent, c10d) -> None:
    if getattr(c10d, "_ddpdoctor_p2p", False):
        return
    c10d._ddpdoctor_p2p = True
    dist = sys.modules.get("torch.distributed")
    for op, peer_arg in (("isend", "dst"), ("irecv", "src")):
        real = getattr(c10d, op, None)
        if real is None:
            continue
        wrapped = _wrap(op, peer_arg, real, c10d)
        setattr(c10d, op, wrapped)
        if dist is not None and getattr(dist, op, None) is real:
            setattr(dist, op, wrapped)
    real_batch = getattr(c10d, "batch_isend_irecv", None)
    if real_batch is not None:
        batch = _wrap_batch(real_batch)
        c10d.batch_isend_irecv = batch
        if dist is not None and getattr(dist, "batch_isend_irecv", None) is real_batch:
            dist.batch_isend_irecv = batch
    _patch_work(c10d.Work)


def _peer(args, kwargs, name: str, c10d):
    peer = kwargs.get(name, args[1] if len(args) > 1 else None)
    if peer is None:
        local = kwargs.get(f"group_{name}")
        group = kwargs.get("group", args[2] if len(args) > 2 else None)
        if isinstance(local, int):
            try:
                peer = c10d.get_global_rank(group, local) if group is not None else local
            except Exception:  # noqa: BLE001
                peer = None
    return peer


def _wrap(op: str, peer_arg: str, real, c10d):
    import functools

    @functools.wraps(real)
    def checked(*args, **kwargs):
        work = real(*args, **kwargs)
        if work is not None:
            try:
                REQUESTS.add(work, op, _peer(args, kwargs, peer_arg, c10d), kwargs.get("tensor", args[0] if args else None))
            except Exception:  # noqa: BLE001 - a check never breaks the job
                pass
        return work

    checked._ddpdoctor = True  # type: ignore[attr-defined]
    return checked


def _wrap_batch(real):
    import functools

    @functools.wraps(real)
    def checked(p2p_op_list, *args, **kwargs):
        works = real(p2p_op_list, *args, **kwargs)
        try:
            ops = list(p2p_op_list)
            if works and len(works) == len(ops):
                for w, p in zip(works, ops):
                    REQUESTS.add(w, getattr(p.op, "__name__", "p2p"), p.peer, p.tensor)
            elif works:  # coalesced into one request (NCCL)
                REQUESTS.add(works[0], "batch_isend_irecv", None, ops[0].tensor if ops else None)
        except Exception:  # noqa: BLE001
            pass
        return works

    checked._ddpdoctor = True  # type: ignore[attr-defined]
    return checked


def _patch_work(Work) -> None:
    real_wait, real_done = Work.wait, Work.is_completed

    def wait(self, *args, **kwargs):
        req = REQUESTS.done(self)
        if req is None:
            return real_wait(self, *args, **kwargs)
        # read from this frame by the rank helper while the main thread waits here (a p2p wait that
        # Flight Recorder does not record on gloo)
        request = req.op  # noqa: F841
        src = req.peer if req.op == "irecv" else None  # noqa: F841
        dst = req.peer if req.op == "isend" else None  # noqa: F841
        p2p_seq = req.seq  # noqa: F841
        return real_wait(self, *args, **kwargs)

    def is_completed(self):
        done = real_done(self)
        if done:
            REQUESTS.done(self)
        return done

    Work.wait = wait
    Work.is_completed = is_completed


def report_unwaited(agent) -> None:
    """At the rank's normal end: one finding per request never waited."""
    with REQUESTS.lock:
        left = [req for _, req in REQUESTS.pending.values()]
        REQUESTS.pending.clear()
    rank = agent.rank if agent.rank is not None else agent.env_rank
    import linecache

    for req in left:
        record_finding(agent, {
            "kind": "p2p_unwaited", "rank": rank, "host": agent.host, "operation": req.op, "peer": req.peer,
            "seq": req.seq, "step": req.step, "file": req.file, "line": req.line, "tensor": req.tensor,
            "code": linecache.getline(req.file, req.line).strip(),
            "message": (f"an {req.op} request made here was never waited by the end of the job: its data "
                        f"may not have arrived or left; call wait() on the request it returns")})  # fmt: skip
