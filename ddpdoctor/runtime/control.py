"""The control plane: a TCPStore side channel that keeps working when the process group does not.

Results, heartbeats and "go/abort" decisions travel through the rendezvous store (or, when torchrun does
not share its store, a store hosted by rank 0), never through the process group: a collective that
hangs or a group poisoned by a timeout cannot stop the run from ending with a report.

The run's store is shared with torchrun and the process group, so its load must grow with nodes, not
ranks (2,048 ranks polling it would swamp it). Two levels:

- every node's first rank (local rank 0) hosts a small store of its own for its node, and runs a relay
  (NodeRelay): what the node's ranks post goes up as one batch per node, and the coordinator's keys
  ("world", "go/<i>") come down once per node, by blocking waits, never by polling;
- the node relay also beats for the whole node (`hb/<node>`, twice a second), naming any local rank whose
  process is gone, so rank 0 tells a stuck rank (its node beats) from a lost one.

Rank 0's coordinator reads each gathered batch from one queue per gather (`up/<tag>`), blocking, and
looks at the nodes' heartbeats (one request for all of them) only while it waits.

Each thread gets its own store clients, because a blocking call on a shared client would hold the others.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable

LOST_AFTER_S = 3.0  # a node whose relay has not beaten for this long is gone
BEAT_S = 1.0  # the node relay's heartbeat period (three missed beats: lost)
WAIT_SLICE_S = 0.5  # how long the coordinator blocks on a queue before it looks at the heartbeats
DOWN_SLICE_S = 5.0  # how long a relay blocks on the coordinator's next key before it looks at its stop flag
GATHER_WINDOW_S = 0.005  # a relay waits this long for the rest of its node's posts of a tag, to send one batch


def _timeout_error(e: Exception) -> bool:
    return "timeout" in str(e).lower() or type(e).__name__ in ("DistStoreError", "QueueEmptyError")


class Control:
    """Thread-local clients of one TCPStore, under this run's key prefix.

    ``client_factory(host, port, is_master, timeout_s)`` makes a raw client (default: torch's TCPStore);
    ``meter(n)``, when given, is told of every n messages these helpers send the store server (the
    control-plane benchmark counts them). TCPStore's client sends two for a get, a multi_get or a blocking
    queue pop (it waits for the key first), one for the rest.
    """

    def __init__(self, host: str, port: int, prefix: str, timeout_s: float = 60.0, *, host_server: bool = False,
                 client_factory: Callable[..., Any] | None = None, meter: Callable[[int], None] | None = None) -> None:
        self.host = host
        self.port = port
        self.prefix = prefix
        self.timeout_s = timeout_s
        self._host_server = host_server
        self._server = None  # keeps the server alive when this process hosts the store
        self._factory = client_factory or tcp_store
        self._meter = meter or (lambda n: None)
        self._local = threading.local()
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, rank: int, prefix: str, timeout_s: float = 60.0) -> Control:
        """The store torchrun names in MASTER_ADDR/MASTER_PORT; rank 0 hosts it when torchrun's agent does not."""
        agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        return cls(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), prefix, timeout_s,
                   host_server=(not agent_store) and rank == 0)

    def client(self, name: str = "main", timeout_s: float | None = None):
        """This thread's store client called ``name`` (PrefixStore for this run)."""
        clients = getattr(self._local, "clients", None)
        if clients is None:
            clients = self._local.clients = {}
        store = clients.get(name)
        if store is None:
            import torch.distributed as dist

            with self._lock:
                is_master = self._host_server and self._server is None
                raw = self._factory(self.host, self.port, is_master, timeout_s or self.timeout_s)
                if is_master:
                    self._server = raw
            store = clients[name] = dist.PrefixStore(self.prefix, raw)
        return store

    # -- small typed helpers -----------------------------------------------------------------------
    def put(self, key: str, obj: Any) -> None:
        self._meter(1)
        self.client().set(key, json.dumps(obj, default=str))

    def get(self, key: str) -> Any:
        self._meter(2)
        return json.loads(self.client().get(key))

    def get_many(self, keys: list[str]) -> list[Any]:
        """Several existing keys in one request."""
        self._meter(2)
        return [json.loads(v) for v in self.client().multi_get(keys)]

    def wait_get(self, key: str, timeout_s: float) -> Any:
        """The value at key once it exists (one blocking get, no polling); None after timeout_s."""
        store = self.client("wait")
        store.set_timeout(timedelta(seconds=max(0.001, timeout_s)))
        self._meter(2)
        try:
            return json.loads(store.get(key))
        except Exception as e:
            if _timeout_error(e):
                return None
            raise

    def drain(self, queue: str) -> list[Any]:
        """Every item already in a queue, without waiting (one request, then one per item)."""
        store = self.client()
        n = int(store.queue_len(queue))
        self._meter(1 + n)
        return [json.loads(store.queue_pop(queue, False)) for _ in range(n)]

    def push(self, queue: str, obj: Any) -> None:
        self._meter(1)
        self.client().queue_push(queue, json.dumps(obj, default=str))

    def pop(self, queue: str, timeout_s: float) -> Any:
        """The next item of a queue (blocking up to timeout_s); None when none came."""
        store = self.client("pop")
        store.set_timeout(timedelta(seconds=max(0.001, timeout_s)))
        self._meter(2)
        try:
            return json.loads(store.queue_pop(queue, True))
        except Exception as e:
            if _timeout_error(e):
                return None
            raise



def tcp_store(host: str, port: int, is_master: bool, timeout_s: float):
    import torch.distributed as dist

    return dist.TCPStore(host, port, is_master=is_master, timeout=timedelta(seconds=timeout_s),
                         wait_for_workers=False)


def pid_alive(pid: int) -> bool:
    """A local rank's process still runs (a zombie waiting for torchrun to reap it does not)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# -- every rank: its link to its node -------------------------------------------------------------------
class NodeLink:
    """A rank's side of the control plane: post to its node's relay, wait for the coordinator's word.

    The node's first rank (local rank 0) hosts the node store and starts the relay; the others find its
    address in the run store (one request each, once).
    """

    def __init__(self, control: Control, rank: int, local_rank: int, node_rank: int, local_world_size: int,
                 *, alive: Callable[[int], bool] = pid_alive, host: str = "127.0.0.1",
                 node_meter: Callable[[int], None] | None = None) -> None:
        self.control = control
        self.rank = rank
        self.local_rank = local_rank
        self.node_rank = node_rank
        self.local_world_size = local_world_size
        self.alive = alive
        self.host = host
        self.node_meter = node_meter
        self.node: Control | None = None
        self.relay: NodeRelay | None = None

    @property
    def is_leader(self) -> bool:
        return self.local_rank == 0

    def connect(self, timeout_s: float) -> None:
        if self.is_leader:
            node = Control(self.host, 0, self.control.prefix, timeout_s, host_server=True,
                           client_factory=self.control._factory, meter=self.node_meter)
            node.client()  # starts the server on a free port
            node.port = int(node._server.port)
            self.node = node
            self.relay = NodeRelay(self.control, node, self.node_rank, self.local_world_size, alive=self.alive)
            self.relay.start()
            self.control.put(f"node/{self.node_rank}", [self.host, node.port])
        else:
            where = self.control.wait_get(f"node/{self.node_rank}", timeout_s)
            if where is None:
                raise TimeoutError(f"node {self.node_rank}'s first rank never published its control store")
            self.node = Control(where[0], int(where[1]), self.control.prefix, timeout_s,
                                client_factory=self.control._factory, meter=self.node_meter)

    def post(self, tag: str, obj: Any) -> None:
        """Send obj up to rank 0 under tag ("info", "ready", "res/<i>")."""
        assert self.node is not None, "connect() first"
        self.node.push("up", {"tag": tag, "rank": self.rank, "v": obj})

    def wait(self, key: str, timeout_s: float) -> Any:
        """The coordinator's value at key ("world", "go/<i>") once relayed to this node; None after timeout_s
        or when the node store is gone (its first rank ended)."""
        assert self.node is not None, "connect() first"
        try:
            return self.node.wait_get(key, timeout_s)
        except Exception:
            return None

    def close(self) -> None:
        if self.relay is not None:
            self.relay.close()


class NodeRelay:
    """On a node's first rank: forwards the node's posts up in batches, the coordinator's keys down, and
    beats for the node. Two daemon threads, each with its own store clients."""

    def __init__(self, run: Control, node: Control, node_rank: int, local_world_size: int, *,
                 alive: Callable[[int], bool] = pid_alive) -> None:
        self.run = run
        self.node = node
        self.node_rank = node_rank
        self.local_world_size = local_world_size
        self.alive = alive
        self.stop = threading.Event()
        self.pids: dict[int, int] = {}  # rank -> pid, from the "info" posts passing through
        self.beat = 0

    def start(self) -> None:
        self._beat()  # the key exists before the node's first post: rank 0 reads all beats in one request
        self.threads = [threading.Thread(target=target, name=f"ddpdoctor-relay-{name}", daemon=True)
                        for target, name in ((self._up, "up"), (self._down, "down"))]
        for t in self.threads:
            t.start()

    def close(self) -> None:
        """Stop the relay: the up thread is joined; the down thread ends by itself once it relayed the final
        go, or at its next wait slice (a daemon thread blocked in a store call does not hold up the exit)."""
        self.stop.set()
        try:
            self.node.push("up", {"tag": "", "rank": -1, "v": None})  # wakes the up thread's blocking pop
        except Exception:
            pass  # the node store is gone: the thread ends at its pop's timeout
        self.threads[0].join(BEAT_S + 1.0)

    def _beat(self) -> None:
        dead = sorted(r for r, pid in self.pids.items() if not self.alive(pid))
        self.beat += 1
        self.run.put(f"hb/{self.node_rank}", {"beat": self.beat, "dead": dead})

    def _up(self) -> None:
        next_beat = time.monotonic() + BEAT_S
        try:
            while not self.stop.is_set():
                first = self.node.pop("up", max(0.001, next_beat - time.monotonic()))
                items = [first] if first is not None else []
                if items:  # the node's other ranks usually post within a few ms: one batch for all
                    window = time.monotonic() + GATHER_WINDOW_S
                    while sum(it["tag"] == first["tag"] for it in items) < self.local_world_size:
                        more = self.node.pop("up", window - time.monotonic())
                        if more is None:
                            break
                        items.append(more)
                batches: dict[str, list] = {}
                for it in items:
                    if not it["tag"]:
                        continue  # close()'s wake-up
                    if it["tag"] == "info" and isinstance(it["v"], dict) and it["v"].get("pid"):
                        self.pids[int(it["rank"])] = int(it["v"]["pid"])
                    batches.setdefault(it["tag"], []).append([it["rank"], it["v"]])
                for tag, batch in batches.items():
                    self.run.push(f"up/{tag}", {"node": self.node_rank, "items": batch})
                if time.monotonic() >= next_beat:
                    self._beat()
                    next_beat = time.monotonic() + BEAT_S
        except Exception:
            return  # a store is gone: the run is ending anyway

    def _down(self) -> None:
        """Relays "world", then "go/0", "go/1", ... until the coordinator says end or abort."""
        keys = itertools.chain(["world"], (f"go/{i}" for i in itertools.count()))
        try:
            for key in keys:
                value = None
                while value is None and not self.stop.is_set():
                    value = self.run.wait_get(key, DOWN_SLICE_S)
                if value is None:
                    return
                self.node.put(key, value)
                if key.startswith("go/") and value.get("action") != "run":
                    return
        except Exception:
            return


# -- rank 0: the coordinator's side -------------------------------------------------------------------------
@dataclass
class Gathered:
    """What one gather brought: each rank's value, the ranks judged lost, and when the last value came."""

    values: dict[int, Any] = field(default_factory=dict)
    lost: set[int] = field(default_factory=set)
    last_at: float | None = None  # time.monotonic() when the last value was read


class Coordinator:
    """Rank 0's reads and writes of the run store: gathers by tag, heartbeats of the nodes, its decisions."""

    def __init__(self, control: Control, world_size: int) -> None:
        self.control = control
        self.world_size = world_size
        self.node_of: dict[int, int] = {}  # rank -> node rank, once the world is known

    def announce(self, key: str, obj: Any) -> None:
        """A decision every rank waits for ("world", "go/<i>"); the node relays bring it down."""
        self.control.put(key, obj)

    def gather(self, tag: str, timeout_s: float, *, watch_nodes: bool = True) -> Gathered:
        """Every rank's post under tag, or what came before timeout_s; with watch_nodes, ranks on a node
        whose relay stopped beating (or that the relay names as dead) are lost, and the gather ends as
        soon as every missing rank is lost."""
        out = Gathered()
        deadline = time.monotonic() + timeout_s
        beats: dict[int, tuple[int, float]] = {}
        nodes = sorted(set(self.node_of.values())) if watch_nodes else []
        while len(out.values) < self.world_size:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            batch = self.control.pop(f"up/{tag}", min(WAIT_SLICE_S, left))
            if batch is not None:
                # Nodes end a check together: what queued meanwhile comes without a wait each.
                for b in [batch, *self.control.drain(f"up/{tag}")]:
                    for rank, value in b["items"]:
                        out.values[int(rank)] = value
                out.last_at = time.monotonic()
                continue
            if nodes:
                out.lost |= self._lost(nodes, beats) - set(out.values)
                missing = set(range(self.world_size)) - set(out.values)
                if missing and missing <= out.lost:
                    break
        return out

    def _lost(self, nodes: list[int], beats: dict[int, tuple[int, float]]) -> set[int]:
        now = time.monotonic()
        lost: set[int] = set()
        for n, hb in zip(nodes, self.control.get_many([f"hb/{n}" for n in nodes])):
            lost.update(int(r) for r in hb.get("dead") or [])
            last = beats.get(n)
            if last is None or hb["beat"] != last[0]:
                beats[n] = (hb["beat"], now)
            elif now - last[1] > LOST_AFTER_S:
                lost.update(r for r, node in self.node_of.items() if node == n)
        return lost
