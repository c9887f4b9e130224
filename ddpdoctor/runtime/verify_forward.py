"""`watch --verify`: forwards of the DDP-wrapped model, counted per call site in the rank.

``DistributedDataParallel.forward`` is wrapped when its module is imported; each call adds one to
the count of the user's line that made it. The rank writes its counts to ``forward-R.json`` in the
run directory (from the helper thread when they change, and when the rank ends); the watch compares
the ranks' counts (model/hang/verify.py): a site reached by some ranks only, or a different number
of times, is the bug behind a DDP hang in the next backward or buffer broadcast.

Ranks on other nodes: at ``destroy_process_group`` every rank puts its counts into the job's store
and waits a moment (at most EXCHANGE_S) for the others', which it writes beside its own, so every
node's watch compares every rank.
"""

from __future__ import annotations

import os
import sys

from ddpdoctor.runtime.verify_base import FORWARDS, user_frame, write_json

DDP_MODULE = "torch.nn.parallel.distributed"
KEY = "ddpdoctor-verify/forward/"
EXCHANGE_S = 5.0


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


def patch_destroy(agent, c10d) -> None:
    """Exchange the counts through the store when the default group is destroyed (the job's end)."""
    real = c10d.destroy_process_group
    if getattr(real, "_ddpdoctor", False):
        return

    def destroy_process_group(group=None):
        if group is None:
            try:
                exchange(agent, c10d)
            except Exception:  # noqa: BLE001 - a check never breaks the job
                pass
        return real(group)

    destroy_process_group._ddpdoctor = True  # type: ignore[attr-defined]
    c10d.destroy_process_group = destroy_process_group
    dist = sys.modules.get("torch.distributed")
    if dist is not None and getattr(dist, "destroy_process_group", None) is real:
        dist.destroy_process_group = destroy_process_group


def exchange(agent, c10d) -> None:
    if not c10d.is_initialized():
        return
    import json
    from datetime import timedelta

    store = c10d._get_default_store()
    me, world = c10d.get_rank(), c10d.get_world_size()
    doc = FORWARDS.to_dict(me, agent.host)
    store.set(f"{KEY}{me}", json.dumps(doc))
    if FORWARDS.total == 0:
        return  # no DDP forward here: nothing of ours to compare (the others compare with our zero)
    keys = [f"{KEY}{r}" for r in range(world) if r != me]
    try:
        store.wait(keys, timedelta(seconds=EXCHANGE_S))
    except Exception:  # noqa: BLE001 - a rank that never gets here: compare what there is
        keys = [k for k in keys if store.check([k])]
    for k, raw in zip(keys, store.multi_get(keys) if keys else []):
        try:
            other = json.loads(raw)
            write_json(os.path.join(agent.run_dir, f"forward-{int(other['rank'])}.json"), other)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    write(agent)
