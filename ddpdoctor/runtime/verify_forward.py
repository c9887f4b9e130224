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

from ddpdoctor.runtime.verify_base import FORWARDS, user_frame, write_json

DDP_MODULE = "torch.nn.parallel.distributed"


def patch(agent, module) -> None:
    DDP = module.DistributedDataParallel
    if getattr(DDP.forward, "_ddpdoctor", False):
        return
    real = DDP.forward

    def forward(self, *args, **kwargs):
        try:
            f = user_frame(sys._getframe(1))
            FORWARDS.add(f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "?:0")
        except Exception:  # noqa: BLE001 - a check never breaks the job
            pass
        return real(self, *args, **kwargs)

    forward._ddpdoctor = True  # type: ignore[attr-defined]
    forward.__wrapped__ = real  # type: ignore[attr-defined]
    DDP.forward = forward


def write(agent) -> None:
    """forward-R.json, when the counts changed since the last write (called from the helper thread
    and at the rank's end)."""
    if FORWARDS.total == FORWARDS.written or FORWARDS.total == 0:
        return
    rank = agent.rank if agent.rank is not None else agent.env_rank
    doc = FORWARDS.to_dict(rank, agent.host)
    try:
        write_json(os.path.join(agent.run_dir, f"forward-{rank}.json"), doc)
        FORWARDS.written = doc["total"]
    except OSError:
        pass
