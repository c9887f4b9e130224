"""The control plane: a TCPStore side channel that keeps working when the process group does not.

Results, heartbeats and "go/abort" decisions travel through the rendezvous store (or, when torchrun does
not share its store, a store hosted by rank 0), never through the process group: a collective that
hangs or a group poisoned by a timeout cannot stop the run from ending with a report.

Each thread gets its own store client, because a blocking call on a shared client would hold the others.
"""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import timedelta
from typing import Any


class Control:
    def __init__(self, rank: int, world_size: int, prefix: str, timeout_s: float = 60.0) -> None:
        self.rank = rank
        self.world_size = world_size
        self.prefix = prefix
        self.timeout_s = timeout_s
        self.host = os.environ["MASTER_ADDR"]
        self.port = int(os.environ["MASTER_PORT"])
        self.agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        self._master = None  # keeps rank 0's server alive when it hosts the store
        self._local = threading.local()

    def client(self):
        """This thread's store client (PrefixStore for this run)."""
        store = getattr(self._local, "store", None)
        if store is None:
            import torch.distributed as dist

            is_master = (not self.agent_store) and self.rank == 0 and self._master is None
            raw = dist.TCPStore(
                self.host,
                self.port,
                is_master=is_master,
                timeout=timedelta(seconds=self.timeout_s),
                wait_for_workers=False,
            )
            if is_master:
                self._master = raw
            store = dist.PrefixStore(self.prefix, raw)
            self._local.store = store
        return store

    # -- small typed helpers -----------------------------------------------------------------------
    def put(self, key: str, obj: Any) -> None:
        self.client().set(key, json.dumps(obj, default=str))

    def get(self, key: str) -> Any:
        return json.loads(self.client().get(key))

    def has(self, key: str) -> bool:
        return bool(self.client().check([key]))

    def add(self, key: str, n: int = 1) -> int:
        return int(self.client().add(key, n))

    def poll(self, key: str, timeout_s: float, interval_s: float = 0.05, stop: threading.Event | None = None):
        """The value at key once it exists; None after timeout_s (or when stop is set)."""
        end = time.monotonic() + timeout_s
        while True:
            if self.has(key):
                return self.get(key)
            if time.monotonic() >= end or (stop is not None and stop.is_set()):
                return None
            time.sleep(interval_s)


class Heartbeat(threading.Thread):
    """Bumps ``hb/<rank>`` twice a second so rank 0 can tell a stuck rank (beating) from a lost one."""

    def __init__(self, control: Control, interval_s: float = 0.5) -> None:
        super().__init__(name="ddpdoctor-heartbeat", daemon=True)
        self.control = control
        self.interval_s = interval_s
        self.stopped = threading.Event()

    def run(self) -> None:
        key = f"hb/{self.control.rank}"
        while not self.stopped.is_set():
            try:
                self.control.add(key, 1)
            except Exception:
                return  # the store is gone: the run is ending anyway
            self.stopped.wait(self.interval_s)
