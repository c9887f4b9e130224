"""The pure halves (summarize) of ENV001, RDZ001 and COL001 on recorded per-rank data."""

from ddpdoctor.checks import col001_collectives as col
from ddpdoctor.checks import env001_environment as env
from ddpdoctor.checks import rdz001_rendezvous as rdz

from ddpdoctor.core.report import Severity, Status
from ddpdoctor.core.world import WorldInfo

WORLD = WorldInfo.from_dicts([
    {"rank": r, "node_rank": r // 2, "local_rank": r % 2, "hostname": f"node{r // 2}"} for r in range(4)
])


def _col(ok=True, **bad):
    ops = {op: {"ok": True} for op in ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier")}
    ops.update(bad)
    return {"ops": ops}


def test_col001_names_ranks_with_wrong_data():
    wrong = {"ok": False, "bad_elements": 3, "first_bad": {"index": 5, "got": 9.0, "expected": 10.0}}
    results = {0: _col(), 1: _col(), 2: _col(all_reduce=wrong), 3: _col()}
    s = col.summarize(results, WORLD)
    assert s.final_status() is Status.FAILED
    assert "all_reduce: ranks [2] got wrong data (rank 2, element 5: got 9.0, expected 10.0)" in s.findings[0].message
    assert s.findings[0].where["nodes"] == ["node1"]
    clean = col.summarize({r: _col() for r in range(4)}, WORLD)
    assert clean.final_status() is Status.PASSED and not clean.findings


def _env(rank, **over):
    d = {"hostname": f"node{rank // 2}", "python": "3.11.7", "torch": "2.13.0", "cuda": None, "nccl": None,
         "driver": None, "gpu": None, "env": {}, "interfaces": {"lo": {}, "eth0": {}}, "socket_ifname": None,
         "socket_ifname_var": "GLOO_SOCKET_IFNAME"}
    d.update(over)
    return d


def test_env001_flags_version_skew_env_skew_shared_gpu_and_bad_ifname():
    results = {r: _env(r) for r in range(4)}
    assert not env.summarize(results, WORLD).findings
    results[3] = _env(3, torch="2.12.0", env={"NCCL_ALGO": "Tree"}, socket_ifname="ib9")
    results[0]["gpu"] = results[1]["gpu"] = {"uuid": "GPU-1"}
    s = env.summarize(results, WORLD)
    msgs = [f.message for f in s.findings]
    # Two nodes, no majority: every value with its node; within node1 the ranks disagree.
    assert ("torch versions differ across nodes: 2.13.0 on node0 (ranks 0-1), node1 (rank 2); "
            "2.12.0 on node1 (rank 3)") in msgs
    assert "NCCL_ALGO is set differently across nodes: unset on node0 (ranks 0-1), node1 (rank 2); " \
           "'Tree' on node1 (rank 3)" in msgs
    assert any("ranks [0, 1] share one GPU (GPU-1) on node0" in m for m in msgs)
    assert any("GLOO_SOCKET_IFNAME=ib9 on node1 matches no interface" in m for m in msgs)
    assert s.final_status() is Status.FAILED


WORLD6 = WorldInfo.from_dicts([
    {"rank": r, "node_rank": r // 2, "local_rank": r % 2, "hostname": f"node{r // 2}"} for r in range(6)
])


def test_env001_names_the_odd_node():
    """ENV001's skew says which node, and which node is the odd one out, not only rank numbers."""
    results = {r: _env(r) for r in range(6)}
    for r in (2, 3):
        results[r]["env"] = {"NCCL_ALGO": "Tree"}
        results[r]["torch"] = "2.12.0"
    s = env.summarize(results, WORLD6)
    by_text = {f.message: f for f in s.findings}
    assert set(by_text) == {
        "NCCL_ALGO is set differently: odd node node1 has 'Tree' (ranks 2-3) where the 2 other nodes have it unset",
        "torch versions differ: odd node node1 has 2.12.0 (ranks 2-3) where the 2 other nodes have 2.13.0",
    }
    assert all(f.where == {"node": "node1", "ranks": [2, 3]} for f in s.findings)


def test_rdz001_flags_non_contiguous_ranks_and_shared_hostnames():
    odd = WorldInfo.from_dicts([
        {"rank": 0, "node_rank": 0, "hostname": "a"}, {"rank": 1, "node_rank": 1, "hostname": "a"},
        {"rank": 2, "node_rank": 0, "hostname": "a"}, {"rank": 3, "node_rank": 1, "hostname": "a"},
    ])
    s = rdz.summarize({r: {"join_s": 1.0} for r in range(4)}, odd)
    msgs = [f.message for f in s.findings]
    assert any("not contiguous" in m for m in msgs) and any("same hostname" in m for m in msgs)
    assert all(f.severity is Severity.WARNING for f in s.findings)
    fine = rdz.summarize({r: {"join_s": 1.0, "pg_init_s": 0.1} for r in range(4)}, WORLD)
    assert not fine.findings and fine.data["nodes"][1]["ranks"] == [2, 3]
