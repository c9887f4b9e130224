"""The control plane (ddpdoctor.runtime.control) on a real TCPStore, ranks simulated by threads."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

dist = pytest.importorskip("torch.distributed")

from ddpdoctor.runtime import control as ctl  # noqa: E402


class Meter:
    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    def __call__(self, k: int = 1) -> None:
        with self.lock:
            self.n += k


@pytest.fixture
def store():
    s = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    yield s


def _world(store, nodes: int, per_node: int, meter=None, alive=lambda pid: True):
    """Connected links for every rank, rank 0's coordinator with the world announced."""
    links = []
    for r in range(nodes * per_node):
        c = ctl.Control("127.0.0.1", store.port, "t/", 30, meter=meter)
        links.append(ctl.NodeLink(c, r, r % per_node, r // per_node, per_node, alive=alive))
    for link in links:  # leaders first: the others look up their node's store
        if link.is_leader:
            link.connect(30)
    for link in links:
        if not link.is_leader:
            link.connect(30)
    coord = ctl.Coordinator(links[0].control, len(links))
    for link in links:
        link.post("info", {"rank": link.rank, "node_rank": link.node_rank, "pid": 1000 + link.rank})
    got = coord.gather("info", 30, watch_nodes=False)
    assert sorted(got.values) == list(range(len(links)))
    coord.node_of = {r: v["node_rank"] for r, v in got.values.items()}
    coord.announce("world", [got.values[r] for r in range(len(links))])
    for link in links:
        assert [i["rank"] for i in link.wait("world", 30)] == list(range(len(links)))
    return links, coord


def test_every_rank_posts_and_rank_0_gathers_in_node_batches(store):
    meter = Meter()
    links, coord = _world(store, nodes=3, per_node=4, meter=meter)
    before = meter.n
    coord.announce("go/0", {"action": "run"})
    for link in links:
        assert link.wait("go/0", 30) == {"action": "run"}
        link.post("res/0", {"status": "ok", "rank": link.rank})
    got = coord.gather("res/0", 30)
    assert {r: v["rank"] for r, v in got.values.items()} == {r: r for r in range(12)} and not got.lost
    # The run store saw a few requests per node, not per rank: go down (2 per node), one batch up per node
    # (push 1 + pop 2), one announce; 12 ranks posting one by one would be 36 or more.
    assert meter.n - before <= 3 * 2 + 3 * 3 + 1 + 3 * 3  # slack: a node's posts may come in two batches
    for link in links:
        link.close()


def test_a_node_that_stops_beating_is_lost_and_the_gather_ends_early(store):
    links, coord = _world(store, nodes=2, per_node=2)
    links[2].relay.close()  # node 1's relay stops: no more beats, no more batches (as if the node died)
    coord.announce("go/0", {"action": "run"})
    for link in links[:2]:
        link.wait("go/0", 30)
        link.post("res/0", {"status": "ok"})
    t0 = time.monotonic()
    got = coord.gather("res/0", 60)
    assert sorted(got.values) == [0, 1] and got.lost == {2, 3}
    assert time.monotonic() - t0 < 30  # ended by the lost node, well before the 60 s budget
    for link in links:
        link.close()


def test_a_dead_local_rank_is_named_by_its_node(store):
    dead = {1003}  # rank 3's pid
    links, coord = _world(store, nodes=2, per_node=2, alive=lambda pid: pid not in dead)
    coord.announce("go/0", {"action": "run"})
    for link in links[:3]:
        link.wait("go/0", 30)
        link.post("res/0", {"status": "ok"})
    got = coord.gather("res/0", 30)
    assert sorted(got.values) == [0, 1, 2] and got.lost == {3}
    for link in links:
        link.close()


def test_wait_returns_none_after_its_timeout(store):
    c = ctl.Control("127.0.0.1", store.port, "t/", 30)
    t0 = time.monotonic()
    assert c.wait_get("never", 0.3) is None
    assert 0.25 < time.monotonic() - t0 < 10
    c.put("k", {"a": 1})
    assert c.wait_get("k", 1) == {"a": 1}
