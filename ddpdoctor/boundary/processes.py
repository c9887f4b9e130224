"""The process boundary: every process ddpdoctor starts is ended here, on every exit path.

``end_tree`` ends a child and everything it started. A launcher such as torchrun starts each rank in
a session of its own, so signalling the launcher's process group alone orphans the ranks when the
launcher dies before passing the signal on: the whole tree is recorded first (psutil), the first
signal goes to the launcher's group (torchrun forwards it and its ranks write what they can), and
after a grace period everything of the recorded tree that is left is killed and reaped. Bounded.

``signals_raise`` turns SIGTERM and SIGHUP (a cancelled CI job, ``timeout``, a closed terminal) into
an ``Interrupted`` exception, as Python already does for SIGINT, so the ``finally`` blocks that end
children and remove temp folders run for them too.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterable
from contextlib import contextmanager

GRACE_S = 5.0


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived; ``signum`` says which (exit status 128 + signum)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_status(exc: KeyboardInterrupt) -> int:
    """The shell's status for a process ended by this signal: 130 for SIGINT, 143 SIGTERM, 129 SIGHUP."""
    return 128 + getattr(exc, "signum", signal.SIGINT)


def _raise(signum: int, _frame) -> None:
    raise Interrupted(signum)


@contextmanager
def signals_raise(signums: Iterable[int] = (signal.SIGTERM, signal.SIGHUP)):
    """Within the block, the given signals raise Interrupted (main thread only; elsewhere a no-op)."""
    old = {}
    try:
        for s in signums:
            try:
                old[s] = signal.signal(s, _raise)
            except ValueError:  # not the main thread
                break
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _tree(pid: int) -> list:
    import psutil

    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _wait(procs: list, timeout: float, keep_pid: int | None) -> list:
    """psutil.wait_procs, except that process ``keep_pid`` is not reaped (its owner, e.g. asyncio,
    waits for it itself and would otherwise read a made-up exit status): it counts as gone once it is
    a zombie. The processes still running."""
    import time

    import psutil

    others = [p for p in procs if p.pid != keep_pid]
    root = [p for p in procs if p.pid == keep_pid]
    deadline = time.monotonic() + timeout
    _, alive = psutil.wait_procs(others, timeout=timeout)
    while root:
        try:
            if root[0].status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                root = []
                break
        except psutil.Error:
            root = []
            break
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    return alive + root


def end_tree(pid: int, grace_s: float = GRACE_S, first_signal: int = signal.SIGTERM,
             extra: Iterable[int] = (), reap: bool = True) -> None:
    """End process ``pid`` (started with start_new_session=True: it leads its own group) and every
    process under it, plus the pids in ``extra`` (processes of ours that left the tree). ``first_signal``
    goes to ``pid``'s process group; SIGKILL to whatever of the tree is left after ``grace_s``.
    ``reap=False``: ``pid`` itself is left for its owner to reap (an asyncio subprocess)."""
    import psutil

    keep = None if reap else pid
    procs = _tree(pid)
    for e in extra:
        try:
            procs.append(psutil.Process(e))
        except psutil.Error:
            pass
    if first_signal != signal.SIGKILL:
        try:
            os.killpg(pid, first_signal)
        except (ProcessLookupError, PermissionError):
            for p in procs[:1]:
                try:
                    p.send_signal(first_signal)
                except psutil.Error:
                    pass
        alive = _wait(procs, grace_s, keep)
    else:
        alive = procs
    try:  # the group too: a process that double-forked out of the tree is still in it
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    seen = {p.pid for p in alive}
    for p in alive + [q for q in _tree(pid) if q.pid not in seen]:
        try:
            p.kill()
        except psutil.Error:
            pass
    _wait(alive, grace_s, keep)


def end_process(proc: subprocess.Popen, grace_s: float = GRACE_S, first_signal: int = signal.SIGTERM) -> None:
    """``end_tree`` for a Popen we started, then reap it (no zombie)."""
    if proc.poll() is None:
        end_tree(proc.pid, grace_s, first_signal)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
