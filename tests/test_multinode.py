"""Several nodes for real: two launches on localhost, and nodes in network namespaces (DESIGN.md §6)."""

import json
import os
import signal
import socket
import subprocess
import time

import psutil
import pytest
from helpers import check, cli, load, run_cli, with_fault
from support.testbed import NetBed, netns_available

from ddpdoctor.runtime.launch_plan import free_port

NETNS_OK, NETNS_WHY = netns_available()
netns = pytest.mark.skipif(not NETNS_OK, reason=NETNS_WHY or "network namespaces unavailable")


def _node_args(n, rank, endpoint, out, extra=()):
    return ["check", "--nodes", str(n), "--node-rank", str(rank), "--rdzv-endpoint", endpoint,
            "--nproc-per-node", "1", "--rdzv-timeout", "40", "-q", "--json", str(out / f"r{rank}.json"),
            "--events", str(out / f"ev{rank}.jsonl"), *extra]


def test_two_nodes_on_localhost(tmp_path):
    ep = f"127.0.0.1:{free_port()}"
    procs = [subprocess.Popen(cli(*_node_args(2, r, ep, tmp_path)), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    rep = load(tmp_path / "r0.json")
    assert rep["run"]["world_size"] == 2
    assert sorted(r["node_rank"] for r in rep["ranks"]) == [0, 1]
    assert check(rep, "COL001")["status"] == "passed"
    # every node's CLI ends with the same verdict: node 1 has a copy of rank 0's report
    assert load(tmp_path / "r1.json")["created"] == rep["created"]


def test_unreachable_endpoint_exits_2_naming_it(tmp_path):
    port = free_port()  # nothing listens there
    t0 = time.monotonic()
    p = run_cli("check", "--nodes", "2", "--node-rank", "1", "--rdzv-endpoint", f"127.0.0.1:{port}",
                "--rdzv-timeout", "3", timeout=60)
    elapsed = time.monotonic() - t0
    assert p.returncode == 2
    assert f"127.0.0.1:{port}" in p.stderr and "unreachable after 3 s" in p.stderr
    # it gave up at --rdzv-timeout 3, not the 60 s default; the rest is interpreter start-up, which a
    # loaded 2-core machine stretches (10-12 s in all were seen at load 18, where 3 + 5 failed)
    assert elapsed < 3 + 30


def test_port_taken_exits_2(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = run_cli("check", "--nodes", "2", "--node-rank", "0", "--rdzv-endpoint", f"127.0.0.1:{port}",
                    "--rdzv-timeout", "5", timeout=60)
    assert p.returncode == 2 and "port taken" in p.stderr and f"127.0.0.1:{port}" in p.stderr


def test_rendezvous_timeout_says_who_arrived(tmp_path):
    ep = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    # 20 s: the launcher's watcher reads the rendezvous state only for timeouts of 20 s or more (its own
    # torch import would outlast a shorter rendezvous)
    p = run_cli("check", "--nodes", "2", "--node-rank", "0", "--rdzv-endpoint", ep, "--rdzv-timeout", "20",
                timeout=90)
    elapsed = time.monotonic() - t0
    assert p.returncode == 2, p.stdout + p.stderr
    assert "rendezvous timed out after 20 s" in p.stderr and ep in p.stderr
    assert "arrived: 127.0.0.1" in p.stderr  # this node, by the address it advertised
    assert elapsed < 20 + 30


@netns
def test_two_nodes_in_network_namespaces(tmp_path):
    with NetBed(2) as bed:
        ep = f"{bed.addr(0)}:29400"
        procs = [bed.popen(i, cli(*_node_args(2, i, ep, tmp_path)), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True) for i in (0, 1)]
        outs = [p.communicate(timeout=150)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    rep = load(tmp_path / "r0.json")
    assert rep["run"]["nodes"] == ["ddpd-node0", "ddpd-node1"]
    env = check(rep, "ENV001")["data"]["nodes"]
    # each node reaches the rendezvous host through its own veth, with its own address
    assert env["ddpd-node0"]["route_address"] == bed.addr(0)
    assert env["ddpd-node1"]["route_interface"] == bed.ifname(1)
    assert env["ddpd-node1"]["route_address"] == bed.addr(1)
    assert check(rep, "COL001")["status"] == "passed"


def _kill_tree(pid):
    try:
        parent = psutil.Process(pid)
        procs = parent.children(recursive=True) + [parent]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


def _wait_for_event(path, pred, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path):
            for line in open(path):
                try:
                    if pred(json.loads(line)):
                        return True
                except ValueError:
                    pass
        time.sleep(0.2)
    return False


@netns
def test_node_killed_mid_check_leaves_a_partial_report(tmp_path):
    with NetBed(2) as bed:
        ep = f"{bed.addr(0)}:29400"
        env = dict(os.environ, **with_fault("delay@COL001:rank=1:s=60"))
        procs = [bed.popen(i, cli(*_node_args(2, i, ep, tmp_path)), env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True) for i in (0, 1)]
        try:
            started = _wait_for_event(tmp_path / "ev1.jsonl",
                                      lambda e: e.get("event") == "rank_check_start" and e.get("code") == "COL001", 90)
            assert started, "node 1 never reached COL001"
            t_kill = time.monotonic()
            _kill_tree(procs[1].pid)
            out0 = procs[0].communicate(timeout=120)[0]
            survivor_s = time.monotonic() - t_kill
        finally:
            for p in procs:
                _kill_tree(p.pid)
    assert procs[0].returncode == 1, out0
    rep = load(tmp_path / "r0.json")
    col = check(rep, "COL001")
    assert col["status"] == "failed"
    assert "lost node" in col["summary"] and "ddpd-node1" in col["summary"]
    assert rep["run"]["lost_nodes"] == ["ddpd-node1"] and rep["run"]["complete"] is False
    assert check(rep, "ENV001")["status"] == "passed"
    assert survivor_s < 20 + 15  # within COL001's budget plus the CLI's wind-down
