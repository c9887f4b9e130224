"""The run-time checks of `ddpdoctor watch --verify`, installed in a rank by an import hook the
moment torch's modules are imported (no race with the script). Each finding is one JSON line in
``verify-R.jsonl`` in the run directory; the job goes on unless said otherwise.

- Collectives whose operation, shapes, dtypes or root differ across ranks: verify_collectives.py
  (the rank raises instead of running the collective).
- isend/irecv requests never waited by the end of the job, and waits on them for the hang doctor:
  verify_p2p.py.
- Forwards of the DDP model per call site, compared across ranks by the watch: verify_forward.py.
- A shuffling ``DistributedSampler`` iterated again with the epoch it had last time (no or a constant
  ``set_epoch``): ``__iter__`` seeds its permutation with ``seed + epoch``, so every epoch repeats
  the first one's order. Named with the loop that iterates the loader (the innermost frame of the
  user's code) and the epoch.
"""

from __future__ import annotations

import importlib.abc
import linecache
import sys
import threading

from ddpdoctor.runtime import verify_collectives, verify_forward, verify_p2p
from ddpdoctor.runtime.verify_base import record_finding, user_frame

SAMPLER_MODULE = "torch.utils.data.distributed"

def _patchers(agent) -> dict:
    """module name -> what to do with the module once it has run."""
    def c10d(module):
        verify_collectives.patch(agent, module)
        verify_p2p.patch(agent, module)
        verify_forward.patch_destroy(agent, module)

    return {
        SAMPLER_MODULE: lambda m: _patch(agent, m.DistributedSampler),
        verify_collectives.C10D_MODULE: c10d,
        verify_forward.DDP_MODULE: lambda m: verify_forward.patch(agent, m),
    }


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches torch's modules the moment they are imported: a script may call a collective or
    iterate its loader before the helper's thread first looks (no race with the poll)."""

    def __init__(self, agent, patchers: dict) -> None:
        self.agent = agent
        self.patchers = patchers

    def find_spec(self, name, path, target=None):
        if name not in self.patchers:
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util

            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        real_exec = spec.loader.exec_module
        then = self.patchers[name]

        def exec_module(module):
            real_exec(module)
            try:
                then(module)
            except Exception:  # noqa: BLE001 - a check never breaks the job
                pass

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install_import_hook(agent) -> None:
    """At interpreter start (before torch is imported), when --verify is on."""
    patchers = _patchers(agent)
    sys.meta_path.insert(0, _PatchOnImport(agent, patchers))
    install_verify_hooks(agent, patchers)


def install_verify_hooks(agent, patchers: dict | None = None) -> None:
    """Patch what is imported already (the import hook does the rest; each patch is done once)."""
    for name, then in (patchers or _patchers(agent)).items():
        mod = sys.modules.get(name)
        if mod is not None:
            try:
                then(mod)
            except Exception:  # noqa: BLE001 - a check never breaks the job
                pass


def _patch(agent, DistributedSampler) -> None:
    if getattr(DistributedSampler.__iter__, "_ddpdoctor", False):
        return
    lock = threading.Lock()
    seen: dict[int, tuple[int, int]] = {}  # id(sampler) -> (epoch last iterated with, iterations)
    real_iter = DistributedSampler.__iter__

    def checked_iter(self):
        try:
            if getattr(self, "shuffle", False):
                epoch = int(getattr(self, "epoch", 0))
                with lock:
                    last = seen.get(id(self))
                    n = 1 if last is None else last[1] + 1
                    seen[id(self)] = (epoch, n)
                if last is not None and last[0] == epoch:
                    _report_sampler(agent, self, epoch, n)
        except Exception:  # noqa: BLE001 - a check never breaks the job
            pass
        return real_iter(self)

    checked_iter._ddpdoctor = True  # type: ignore[attr-defined]
    DistributedSampler.__iter__ = checked_iter


def _report_sampler(agent, sampler, epoch: int, n: int) -> None:
    f = user_frame(sys._getframe(2))
    where = {"file": f.f_code.co_filename, "line": f.f_lineno, "function": f.f_code.co_name} if f else {}
    code = linecache.getline(where["file"], where["line"]).strip() if where else ""
    finding = {
        "kind": "sampler_epoch",
        "rank": agent.rank if agent.rank is not None else agent.env_rank,
        "host": agent.host,
        "epoch": epoch,
        "iteration": n,
        "sampler": f"DistributedSampler(shuffle=True, seed={getattr(sampler, 'seed', 0)})",
        "code": code,
        **where,
        "message": (
            f"a shuffling DistributedSampler was iterated for the {_nth(n)} time with epoch {epoch}, "
            f"as before: this pass repeats the order of the last one (call sampler.set_epoch(epoch) "
            f"before each epoch)"
        ),
    }
    record_finding(agent, finding)


def _nth(n: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")
