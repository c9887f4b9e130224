"""`watch --verify`: forwards of the DDP-wrapped model, counted per call site in the rank.

``DistributedDataParallel.forward`` is wrapped when its module is imported; each call adds one to
the count of the user's line that made it. The rank writes its counts to ``forward-R.json`` in the
run directory (from the helper thread when they change, and when the rank ends); the watch compares
the ranks' counts (model/hang/verify.py): a site reached by some ranks only, or a different number
of times, is the bug behind a DDP hang in the next backward or buffer broadcast.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field

from ddpdoctor.runtime.verify_hooks import user_frame

DDP_MODULE = "torch.nn.parallel.distributed"


@dataclass
class ForwardCounts:
    total: int = 0
    sites: dict[str, list[int]] = field(default_factory=dict)  # "path:line" -> [count, first #, last #]
    written: int = -1
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, where: str) -> None:
        with self.lock:
            self.total += 1
            s = self.sites.get(where)
            if s is None:
                self.sites[where] = [1, self.total, self.total]
            else:
                s[0] += 1
                s[2] = self.total

    def to_dict(self, rank: int | None, host: str) -> dict:
        with self.lock:
            return {"rank": rank, "host": host, "total": self.total,
                    "sites": {k: {"count": c, "first": a, "last": b} for k, (c, a, b) in self.sites.items()}}  # fmt: skip


COUNTS = ForwardCounts()


def patch(agent, module) -> None:
    DDP = module.DistributedDataParallel
    if getattr(DDP.forward, "_ddpdoctor", False):
        return
    real = DDP.forward

    def forward(self, *args, **kwargs):
        try:
            f = user_frame(sys._getframe(1))
            COUNTS.add(f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "?:0")
        except Exception:  # noqa: BLE001 - a check never breaks the job
            pass
        return real(self, *args, **kwargs)

    forward._ddpdoctor = True  # type: ignore[attr-defined]
    forward.__wrapped__ = real  # type: ignore[attr-defined]
    DDP.forward = forward


def write(agent) -> None:
    """forward-R.json, when the counts changed since the last write (called from the helper thread
    and at the rank's end)."""
    if COUNTS.total == COUNTS.written or COUNTS.total == 0:
        return
    rank = agent.rank if agent.rank is not None else agent.env_rank
    doc = COUNTS.to_dict(rank, agent.host)
    try:
        from ddpdoctor.runtime.rank_agent import _write_json

        _write_json(os.path.join(agent.run_dir, f"forward-{rank}.json"), doc)
        COUNTS.written = doc["total"]
    except OSError:
        pass
