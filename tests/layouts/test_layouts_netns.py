"""Layouts from a matrix measured for real: two emulated nodes (network namespaces, a shaped link),
ranks numbered across nodes (rank r on node r % 2), a bare send/recv probe on gloo."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.model.layouts import analyze, check_layout
from ddpdoctor.testbed import NetBed, netns_available

NETNS_OK, NETNS_WHY = netns_available()
pytestmark = [
    pytest.mark.netns,
    pytest.mark.slow,
    pytest.mark.skipif(not NETNS_OK, reason=NETNS_WHY or "network namespaces unavailable"),
]
PROBE = Path(__file__).with_name("p2p_probe.py")


def test_islands_and_layouts_on_a_measured_matrix(tmp_path):
    out = tmp_path / "p2p.json"
    with NetBed(2) as bed:
        for node in (0, 1):
            bed.shape(node, rate_mbit=200)  # 25 MB/s between nodes; loopback inside a node is GB/s
        procs = []
        for rank in range(4):
            node, local = rank % 2, rank // 2
            argv = [sys.executable, str(PROBE), str(rank), "4", str(node), str(local),
                    f"{bed.addr(0)}:29500", str(out), str(2 * 2**20)]  # fmt: skip
            procs.append(bed.popen(node, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        try:
            logs = [p.communicate(timeout=150)[0] for p in procs]
        finally:
            for p in procs:
                p.kill()
    assert [p.returncode for p in procs] == [0] * 4, logs
    measured = json.loads(out.read_text())
    assert [r["hostname"] for r in measured["ranks"]] == ["ddpd-node0", "ddpd-node1"] * 2
    cl = analyze(measured["values"], measured["ranks"])
    assert cl.islands.groups == [[0, 2], [1, 3]] and cl.islands.agrees_with_nodes
    assert cl.islands.gap.ratio > 10  # loopback against a 200 Mbit/s link
    assert 0.015 < cl.islands.gap.below_GBps < 0.03  # the shaped rate, 0.025 GB/s
    assert cl.ddp.reorder and cl.ddp.default.crossings == 4 and cl.ddp.best.crossings == 2
    assert cl.tp_dp.mesh.nested() == [[0, 2], [1, 3]]
    chk = check_layout(cl, "dp=2,tp=2")  # as numbered, TP pairs (0,1) and (2,3) cross nodes
    assert chk.worse and chk.proposed_costs["tp"].worst.slowest_GBps < 0.03
