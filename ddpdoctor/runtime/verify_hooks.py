"""The run-time checks of `ddpdoctor watch --verify` that torch does not make itself, installed in a
rank when its process group exists (torch is imported by then). Each finding is one JSON line in
``verify-R.jsonl`` in the run directory; the job goes on.

- A shuffling ``DistributedSampler`` iterated again with the epoch it had last time (no or a constant
  ``set_epoch``): ``__iter__`` seeds its permutation with ``seed + epoch``, so every epoch repeats
  the first one's order. Named with the loop that iterates the loader (the innermost frame of the
  user's code) and the epoch.
"""

from __future__ import annotations

import importlib.abc
import json
import linecache
import os
import sys
import threading

SAMPLER_MODULE = "torch.utils.data.distributed"

_TORCH_FILE = ("/torch/", "/ddpdoctor/runtime/")


def _user_frame(frame):
    """The innermost frame outside torch and ddpdoctor: the user's loop."""
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if not any(t in path for t in _TORCH_FILE) and not path.startswith("<"):
            return frame
        frame = frame.f_back
    return None


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches the sampler the moment its module is imported: a script may iterate its loader before
    the helper's thread first looks (no race with the poll)."""

    def __init__(self, agent) -> None:
        self.agent = agent

    def find_spec(self, name, path, target=None):
        if name != SAMPLER_MODULE:
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
        agent = self.agent

        def exec_module(module):
            real_exec(module)
            _patch(agent, module.DistributedSampler)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install_import_hook(agent) -> None:
    """At interpreter start (before torch is imported), when --verify is on."""
    if SAMPLER_MODULE in sys.modules:
        return install_verify_hooks(agent)
    sys.meta_path.insert(0, _PatchOnImport(agent))


def install_verify_hooks(agent) -> None:
    """When the process group exists: patch the sampler if the import hook has not (already imported)."""
    mod = sys.modules.get(SAMPLER_MODULE)
    if mod is not None:
        _patch(agent, mod.DistributedSampler)


def _patch(agent, DistributedSampler) -> None:
    if getattr(DistributedSampler.__iter__, "_ddpdoctor", False):
        return
    lock = threading.Lock()
    seen: dict[int, tuple[int, int]] = {}  # id(sampler) -> (epoch last iterated with, iterations)
    real_iter = DistributedSampler.__iter__
    path = os.path.join(agent.run_dir, f"verify-{agent.env_rank}.jsonl")

    def checked_iter(self):
        try:
            if getattr(self, "shuffle", False):
                epoch = int(getattr(self, "epoch", 0))
                with lock:
                    last = seen.get(id(self))
                    n = 1 if last is None else last[1] + 1
                    seen[id(self)] = (epoch, n)
                if last is not None and last[0] == epoch:
                    _report_sampler(agent, path, self, epoch, n)
        except Exception:  # noqa: BLE001 - a check never breaks the job
            pass
        return real_iter(self)

    checked_iter._ddpdoctor = True  # type: ignore[attr-defined]
    DistributedSampler.__iter__ = checked_iter


def _report_sampler(agent, path: str, sampler, epoch: int, n: int) -> None:
    f = _user_frame(sys._getframe(2))
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
    try:
        with open(path, "a") as fh:
            fh.write(json.dumps(finding) + "\n")
    except OSError:
        pass


def _nth(n: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")
