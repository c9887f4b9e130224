"""While the rendezvous waits: read the c10d rendezvous state from the store, to say who arrived."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from datetime import timedelta

from ddpdoctor.runtime.launch_plan import LaunchPlan
from ddpdoctor.runtime.rdzv_state import StateError, arrived_addrs


class RendezvousWatcher(threading.Thread):
    """Reads the c10d rendezvous state from the store while we wait, to say who arrived."""

    def __init__(self, plan: LaunchPlan) -> None:
        super().__init__(name="ddpdoctor-rdzv-watch", daemon=True)
        self.plan = plan
        self.stop = threading.Event()
        self.participants: list[str] = []
        self.looked = False  # whether the state was ever read: only then do the participants say anything

    def run(self) -> None:
        store = None
        key = "torch.rendezvous." + self.plan.rdzv_id
        # Start reading only if the rendezvous is slow: the store client imports torch, a second or more
        # of CPU that a quick rendezvous (the usual case) does not need, spent while the agents and
        # workers start. Half the timeout still sees who waits long before anyone gives up.
        if self.stop.wait(min(30.0, self.plan.rdzv_timeout_s / 2)):
            return
        while not self.stop.wait(0.3):
            try:
                if store is None:
                    # A plain connect first: a TCPStore client built before the server listens spends
                    # seconds in its own retries, and the rendezvous may be over by then.
                    with socket.create_connection((self.plan.endpoint_host, self.plan.endpoint_port), timeout=0.5):
                        pass
                    import torch.distributed as dist

                    store = dist.TCPStore(self.plan.endpoint_host, self.plan.endpoint_port, is_master=False,
                                          timeout=timedelta(seconds=2), wait_for_workers=False)
                if not store.check([key]):
                    self.looked = True
                    continue
                # Read through a restricted unpickler: the store is open to anyone who reaches its port.
                seen = arrived_addrs(store.get(key))
                # Union over reads: an agent that gives up removes itself from the state before exiting.
                self.participants = sorted(set(self.participants) | seen)
                self.looked = True
            except StateError as e:  # not a state we read (or a refused one): say nothing of it, keep looking
                if os.environ.get("DDPDOCTOR_DEBUG"):
                    print(f"{time.time():.1f} rendezvous watcher: {e}", file=sys.stderr)
            except Exception as e:
                if os.environ.get("DDPDOCTOR_DEBUG"):
                    print(f"{time.time():.1f} rendezvous watcher: {type(e).__name__}: {e}", file=sys.stderr)
                store = None


