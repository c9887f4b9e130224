"""The symbolic neighbour-exchange walk and the lossy send payload check (DDP201, pipeline code)."""

from __future__ import annotations

import ast
import textwrap

from ddpdoctor.script.analysis import ModuleAnalysis
from ddpdoctor.script.p2p_exchange import neighbour_deadlocks, neighbour_lines, split_points
from ddpdoctor.script.p2p_payload import lost_payloads


def _module(src: str) -> ModuleAnalysis:
    src = textwrap.dedent(src)
    return ModuleAnalysis("m.py", src, ast.parse(src))


def _deadlocks(src: str):
    m = _module(src)
    return neighbour_deadlocks(m.tree, m.functions, m.aliases, m.source)


_HELPER = """
import torch.distributed as dist

def _xfer(t, buf, send_to, recv_from):
    ops = []
    if send_to is not None:
        ops.append(dist.P2POp(dist.isend, t, send_to))
    if recv_from is not None:
        ops.append(dist.P2POp(dist.irecv, buf, recv_from))
    if len(ops) > 0:
        reqs = dist.batch_isend_irecv(ops)
        for r in reqs:
            r.wait()
    return buf
"""


def test_split_exchange_with_both_neighbours_is_reported_where_it_splits():
    src = (
        _HELPER
        + """
def fwd_exchange(t, buf, next_rank, split):
    if split:
        _xfer(t, None, next_rank, None)
        return _xfer(None, buf, None, next_rank)
    return _xfer(t, buf, next_rank, next_rank)

def bwd_exchange(t, buf, prev_rank, split):
    if split:
        _xfer(t, None, prev_rank, None)
        return _xfer(None, buf, None, prev_rank)
    return _xfer(t, buf, prev_rank, prev_rank)
"""
    )
    found = _deadlocks(src)
    assert len(found) == 1
    down, up = found[0]
    assert (down.fn.name, up.fn.name) == ("fwd_exchange", "bwd_exchange")
    send, recv = split_points(down)
    assert (send.lineno, recv.lineno) == (18, 19)


def test_a_receive_first_order_on_some_path_is_quiet():
    """The fixed form: a flag (stage parity, given by the schedule) picks which half goes first."""
    src = (
        _HELPER
        + """
def fwd_exchange(t, buf, next_rank, send_first):
    if send_first:
        _xfer(t, None, next_rank, None)
        return _xfer(None, buf, None, next_rank)
    buf = _xfer(None, buf, None, next_rank)
    _xfer(t, None, next_rank, None)
    return buf

def bwd_exchange(t, buf, prev_rank, send_first):
    if send_first:
        _xfer(t, None, prev_rank, None)
        return _xfer(None, buf, None, prev_rank)
    buf = _xfer(None, buf, None, prev_rank)
    _xfer(t, None, prev_rank, None)
    return buf
"""
    )
    assert _deadlocks(src) == []


def test_one_neighbour_only_is_quiet():
    """Without the other half the partner's order is unknown (it may receive first)."""
    src = """
import torch.distributed as dist

def fwd_exchange(t, buf, next_rank):
    dist.send(t, next_rank)
    dist.recv(buf, next_rank)
"""
    assert _deadlocks(src) == []


def test_halo_exchange_with_both_neighbours_in_order_is_quiet():
    """send next, recv prev, send prev, recv next: the last stage unblocks the chain."""
    src = """
import torch.distributed as dist

def halo(left, right, lbuf, rbuf, next_rank, prev_rank):
    dist.send(right, next_rank)
    dist.recv(lbuf, prev_rank)
    dist.send(left, prev_rank)
    dist.recv(rbuf, next_rank)
"""
    assert _deadlocks(src) == []


def test_rank_arithmetic_names_the_neighbours():
    src = """
import torch.distributed as dist

def exchange_up(t, buf, rank, world_size):
    peer = (rank + 1) % world_size
    req = dist.isend(t, peer)
    req.wait()
    req = dist.irecv(buf, peer)
    req.wait()

def exchange_down(t, buf, rank, world_size):
    peer = (rank - 1) % world_size
    dist.send(t, peer)
    dist.recv(buf, peer)
"""
    found = _deadlocks(src)
    assert [(d.fn.name, u.fn.name) for d, u in found] == [("exchange_up", "exchange_down")]


def test_neighbour_lines_find_identifiers_not_words():
    src = "a = 1\nnext_rank = get_next_rank()\nx = next(it)\nrecv_prev = True\ny = prev_stage\n"
    assert neighbour_lines(src) == [2, 2, 5]


def test_lossy_payload_needs_a_send_of_the_result():
    base = """
import torch
import torch.distributed as dist

def pack(x, half):
    if isinstance(x, torch.Tensor):
        if half:
            x = x.half()
        return x
    out = []
    for t in x:
        if half:
            out.append(t.half())
    return out
"""
    sent = (
        base
        + """
def send(x, dst, half):
    x = pack(x, half)
    for t in x:
        dist.send(t, dst)
"""
    )
    logged = (
        base
        + """
def show(x, half):
    x = pack(x, half)
    print(x)
"""
    )
    m = _module(sent)
    found = lost_payloads(m.functions, m.aliases)
    assert [(f.builder.fn.name, f.builder.drop.lineno, f.send.lineno) for f in found] == [("pack", 12, 19)]
    m = _module(logged)
    assert lost_payloads(m.functions, m.aliases) == []


def test_a_deadlock_the_rank_simulation_found_is_said_once(tmp_path):
    from ddpdoctor.lint import LintConfig, lint_paths

    script = tmp_path / "pipe.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            import torch.distributed as dist

            def send_fwd_recv_bwd(out, grad, next_rank):
                dist.send(out, next_rank)
                dist.recv(grad, next_rank)

            def send_bwd_recv_fwd(g, inp, prev_rank):
                dist.send(g, prev_rank)
                dist.recv(inp, prev_rank)

            def main():
                dist.init_process_group("gloo")
                rank, world = dist.get_rank(), dist.get_world_size()
                t = torch.ones(4)
                if rank < world - 1:
                    send_fwd_recv_bwd(t, t, rank + 1)
                if rank > 0:
                    send_bwd_recv_fwd(t, t, rank - 1)
                dist.destroy_process_group()

            if __name__ == "__main__":
                main()
            """
        )
    )
    found = lint_paths([script], LintConfig(select=("DDP201",)), jobs=1)
    assert [f.location.line for f in found] == [6]
    assert "world size 2" in found[0].message
