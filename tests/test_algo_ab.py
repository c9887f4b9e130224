"""ALG001's lockstep between ranks (rank 0 decides, the others follow), with scripted launches and an
in-memory store standing in for the TCP store: which arms run, stopping on a peer's failure or the budget."""

import threading
import time

import pytest
from ddpdoctor.checks._algo_ab import ABORT_KEY, AbPlan, AbRunner

from ddpdoctor.core.world import WorldInfo
from ddpdoctor.runtime.context import ClusterContext


class MemoryStore:
    """The few torch Store calls the runner makes, shared by threads."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.cv = threading.Condition()

    def set(self, key, value) -> None:
        with self.cv:
            self.data[key] = value.encode() if isinstance(value, str) else value
            self.cv.notify_all()

    def get(self, key) -> bytes:
        with self.cv:
            return self.data[key]

    def check(self, keys) -> bool:
        with self.cv:
            return all(k in self.data for k in keys)

    def wait(self, keys, timeout) -> None:
        with self.cv:
            if not self.cv.wait_for(lambda: all(k in self.data for k in keys), timeout.total_seconds()):
                raise RuntimeError(f"wait timeout for {keys}")


def ctx(rank, store, world_size=2, local_world_size=2, nnodes=1, budget_s=60.0) -> ClusterContext:
    w = WorldInfo.from_dicts([{"rank": r} for r in range(world_size)], backend="nccl")
    return ClusterContext(
        rank=rank, world_size=world_size, local_rank=rank % local_world_size, local_world_size=local_world_size,
        node_rank=rank // local_world_size, nnodes=nnodes, hostname="h", backend="nccl", device=None, world=w,
        budget_s=budget_s, store=store, store_endpoint=("127.0.0.1", 1, "p/"),
    )  # fmt: skip


PLAN = AbPlan(backend="nccl", candidates=["Ring", "Tree"], sizes=[1 << 20], reps=2, iters=1, warmup=0,
              launch_timeout_s=10.0)  # fmt: skip


class Scripted(AbRunner):
    """Launches that meet like children do (each waits for its peers), fail or take time on cue."""

    fail_at: tuple[int, int] | None = None  # (rank, k)
    seconds = 0.0

    def launch(self, k, arm, rep):
        store, me = self.ctx.store, self.ctx.rank
        store.set(f"t/{k}/{me}", "1")
        if self.fail_at == (me, k):
            raise RuntimeError("boom")
        time.sleep(self.seconds)
        self.durations.append(self.seconds)
        peers = [f"t/{k}/{r}" for r in range(self.ctx.world_size)]
        end = time.monotonic() + 5
        while not (store.check(peers) or store.check([ABORT_KEY])) and time.monotonic() < end:
            time.sleep(0.01)
        return {"arm": arm, "rep": rep, "ok": True}


def run_ranks(make, n=2, nvls=(False, False)):
    results, errors = {}, {}

    def one(r):
        runner = make(r)
        try:
            arms = runner.agree_arms(nvls[r])
            results[r] = (arms, runner.run(arms))
        except RuntimeError as e:
            errors[r] = e

    threads = [threading.Thread(target=one, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    return results, errors


def test_every_rank_runs_the_same_alternation():
    store = MemoryStore()
    results, errors = run_ranks(lambda r: Scripted(ctx(r, store), PLAN))
    assert not errors
    for arms, out in results.values():
        assert arms == ["default", "Ring", "Tree"]
        assert [(x["arm"], x["rep"]) for x in out["launches"]] == [
            ("default", 0), ("Ring", 0), ("Tree", 0), ("default", 1), ("Ring", 1), ("Tree", 1)
        ]  # fmt: skip
        assert out["stopped_early"] is None


@pytest.mark.parametrize(
    ("nvls", "local_world_size", "nnodes", "extra"),
    [((True, True), 4, 1, ["NVLS"]), ((True, True), 4, 2, ["NVLSTree"]), ((True, False), 4, 1, []),
     ((True, True), 2, 1, [])],
)  # fmt: skip
def test_nvls_joins_only_when_every_gpu_can(nvls, local_world_size, nnodes, extra):
    store = MemoryStore()
    results, _ = run_ranks(lambda r: Scripted(ctx(r, store, local_world_size=local_world_size, nnodes=nnodes), PLAN),
                           nvls=nvls)  # fmt: skip
    assert results[0][0] == results[1][0] == ["default", "Ring", "Tree", *extra]


def test_a_rank_that_gives_up_stops_the_others_at_once():
    store = MemoryStore()

    def make(r):
        runner = Scripted(ctx(r, store), PLAN)
        runner.fail_at = (1, 1)
        return runner

    t0 = time.monotonic()
    results, errors = run_ranks(make)
    assert time.monotonic() - t0 < 10
    assert isinstance(errors[1], RuntimeError) and str(errors[1]) == "boom"
    out = results[0][1]
    assert len(out["launches"]) == 2
    assert out["stopped_early"] == "after 2 of 6 launches: rank 1 gave up (RuntimeError: boom)"


def test_the_budget_stops_new_launches_on_every_rank():
    store = MemoryStore()

    def make(r):
        runner = Scripted(ctx(r, store, budget_s=12.0), PLAN)
        runner.seconds = 2.5  # after one launch: ~9.5 s left < 2.5 + 2 × 5 s margins
        return runner

    results, errors = run_ranks(make)
    assert not errors
    for _, out in results.values():
        assert len(out["launches"]) == 1
        assert out["stopped_early"] == "the check's time budget ran out after 1 of 6 launches"


def test_a_runner_needs_the_store_endpoint():
    c = ctx(0, MemoryStore())
    c.store_endpoint = None
    with pytest.raises(RuntimeError, match="needs the check store and its endpoint"):
        AbRunner(c, PLAN)
