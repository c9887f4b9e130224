"""The per-rank interpreter and the p2p simulator, directly (pure: no files, no torch)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from ddpdoctor.script.analysis import ModuleAnalysis
from ddpdoctor.script.p2p import P2POp, simulate


def ops_per_rank(src: str, sizes=(2, 3, 4)) -> dict[int, list[list[str]]]:
    src = textwrap.dedent(src)
    m = ModuleAnalysis("t.py", src, ast.parse(src), sizes)
    run = {r.world_size: r for r in m.runs if r.entry == "<module>"}
    return {w: [[e.op for e in t.events if e.kind == "collective"] for t in run[w].traces] for w in run}


@pytest.mark.parametrize(
    "cond, ranks_taking",
    [
        ("rank == 0", {4: [0]}),
        ("rank % 2", {4: [1, 3]}),
        ("rank < world_size - 1", {4: [0, 1, 2]}),
        ("local_rank in (-1, 0)", {4: [0]}),
        ("int(os.environ['RANK']) >= 2", {4: [2, 3]}),
        ("os.environ.get('LOCAL_RANK') == '1'", {4: [1]}),
        ("is_leader()", {4: [0]}),
    ],
)
def test_rank_conditions(cond, ranks_taking):
    src = f"""
    import os
    import torch.distributed as dist
    def is_leader():
        return dist.get_rank() == 0
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    if {cond}:
        dist.barrier()
    dist.all_reduce(t)
    """
    got = ops_per_rank(src, sizes=(4,))[4]
    assert [r for r, ops in enumerate(got) if ops[:1] == ["barrier"]] == ranks_taking[4]
    assert all(ops[-1] == "all_reduce" for ops in got)


def test_calls_spawn_and_early_return():
    src = """
    import torch.distributed as dist
    import torch.multiprocessing as mp
    def sync():
        dist.all_reduce(t)
    def worker(rank, world_size):
        if rank != 0:
            return
        sync()
    if __name__ == "__main__":
        mp.spawn(worker, args=(3,), nprocs=3)
    """
    got = ops_per_rank(src)
    assert list(got) == [3]  # the script fixes its world size
    assert got[3] == [["all_reduce"], [], []]


def test_unknown_conditions_are_walked_alike_and_loops_unrolled():
    src = """
    import torch.distributed as dist
    if args.flag:
        dist.broadcast(t, 0)
    for peer in range(dist.get_world_size()):
        dist.barrier()
    """
    got = ops_per_rank(src, sizes=(2, 3))
    assert got[2] == [["broadcast", "barrier", "barrier"]] * 2
    assert got[3] == [["broadcast"] + ["barrier"] * 3] * 3


def test_infinite_recursion_and_huge_values_do_not_hang():
    src = """
    import torch.distributed as dist
    def f(n):
        return f(n + 1)
    x = "a" * 10 ** 12
    y = 2 ** 10 ** 10
    while True:
        f(dist.get_rank())
    """
    assert ops_per_rank(src, sizes=(2,))[2] == [[], []]


def P(op, peer=None, req=None):
    return P2POp(op, peer, req, ref=op)


def test_p2p_deadlock_both_send_first():
    out = simulate([[P("send", 1), P("recv", 1)], [P("send", 0), P("recv", 0)]])
    assert not out.ok and [s.rank for s in out.stuck] == [0, 1]


def test_p2p_ordered_exchange_and_any_source():
    assert simulate([[P("send", 1), P("recv", 1)], [P("recv", 0), P("send", 0)]]).ok
    assert simulate([[P("recv", None), P("recv", None)], [P("send", 0)], [P("send", 0)]]).ok


def test_p2p_nonblocking_and_wait():
    ok = [
        [P("isend", 1, 1), P("recv", 1), P("wait", req=1)],
        [P("isend", 0, 1), P("recv", 0), P("wait", req=1)],
    ]
    assert simulate(ok).ok
    stuck = simulate([[P("irecv", 1, 1), P("wait", req=1)], []])
    assert not stuck.ok and stuck.stuck[0].op.op == "wait" and stuck.finished == [1]


def test_p2p_unmatched_recv_and_bad_peer():
    out = simulate([[P("recv", 1)], [P("recv", 0)], [P("send", 0)]])
    assert not out.ok
    bad = simulate([[P("send", 2)], [P("recv", 0)]])
    assert not bad.ok and bad.bad_peer[0].rank == 0


def test_a_return_the_walk_cannot_decide_makes_the_value_unknown():
    # `linked()` may return False (the branch the walk cannot decide) or True: the caller's test is
    # unknown, so both of its arms are walked, and rank 0's extra barrier is seen
    src = """
    import torch.distributed as dist
    def linked(path):
        if path.exists():
            return False
        return True
    def save(path):
        if not linked(path):
            dist.barrier()
    rank = dist.get_rank()
    if rank == 0:
        save(p)
    """
    assert ops_per_rank(src, (2,))[2] == [["barrier"], []]


def test_returns_that_agree_keep_their_value():
    src = """
    import torch.distributed as dist
    def always(path):
        if path.exists():
            return True
        return True
    if not always(p):
        dist.barrier()
    """
    assert ops_per_rank(src, (2,))[2] == [[], []]


def test_nested_functions_and_lambdas_read_the_frame_they_were_made_in():
    # ``leader`` and ``sync`` are locals of main(): a nested def or a lambda called later reads them
    src = """
    import torch.distributed as dist
    def main():
        leader = dist.get_rank() == 0
        def report():
            if leader:
                dist.barrier()
        sync = lambda t: dist.all_reduce(t)
        report()
        sync(t)
    main()
    """
    got = ops_per_rank(src, sizes=(2,))[2]
    assert got == [["barrier", "all_reduce"], ["all_reduce"]]


def test_event_engine_handlers_run_on_the_ranks_that_register_them():
    src = """
    import torch.distributed as dist
    from ignite.engine import Engine, Events
    def step(engine, batch):
        dist.all_reduce(batch)
    def main():
        trainer = Engine(step)
        if dist.get_rank() == 0:
            trainer.add_event_handler(Events.STARTED, lambda e: dist.barrier())
        trainer.run(data)
    main()
    """
    got = ops_per_rank(src, sizes=(2,))[2]
    assert got == [["barrier", "all_reduce"], ["all_reduce"]]


def test_an_engine_of_another_library_is_unknown():
    src = """
    import torch.distributed as dist
    from mylib import Engine
    def main():
        trainer = Engine(None)
        if dist.get_rank() == 0:
            trainer.add_event_handler("start", lambda e: dist.barrier())
    main()
    """
    assert ops_per_rank(src, sizes=(2,))[2] == [[], []]
