"""BW001 and P2P001: their pure halves on recorded per-rank data, and a real run on gloo."""

from __future__ import annotations

import pytest
from ddpdoctor.checks import bw001_collective_sweep as bw
from ddpdoctor.checks import p2p001_p2p_matrix as p2p
from helpers import check, load, run_cli

from ddpdoctor.core.report import Severity, Status
from ddpdoctor.core.world import WorldInfo

WORLD = WorldInfo.from_dicts(
    [{"rank": r, "node_rank": r // 2, "local_rank": r % 2, "hostname": f"node{r // 2}"} for r in range(4)],
    backend="gloo",
)


def _bw_rank(times: dict[int, float], verified=True, stopped=None):
    rows = [
        {"size_B": s, "median_s": t, "min_s": t, "iters": 5, "verified": verified} for s, t in times.items()
    ]
    return {
        "ops": {"all_reduce": rows, "broadcast": rows},
        "stopped": stopped,
        "sizes_B": list(times),
        "device": "cpu",
    }


def test_bw001_takes_the_slowest_rank_and_computes_busbw():
    fast = {1 << 20: 1e-3, 4 << 20: 4e-3}
    slow = {1 << 20: 2e-3, 4 << 20: 4e-3}
    s = bw.summarize({0: _bw_rank(fast), 1: _bw_rank(slow), 2: _bw_rank(fast), 3: _bw_rank(fast)}, WORLD)
    assert s.final_status() is Status.PASSED
    row = s.data["ops"]["all_reduce"][0]
    assert row["time_us"] == 2000.0 and row["slowest_rank"] == 1
    assert row["algbw_GBps"] == pytest.approx((1 << 20) / 2e-3 / 1e9, rel=1e-5)
    assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 1.5, rel=1e-5)  # 2(n-1)/n, n = 4
    assert s.data["ops"]["broadcast"][0]["busbw_GBps"] == pytest.approx(row["algbw_GBps"], rel=1e-5)
    assert s.data["all_reduce"] == {
        "unit_x": "B",
        "unit_y": "s",
        "points": [[1 << 20, 2e-3], [4 << 20, 4e-3]],
    }
    assert s.data["busbw"]["all_reduce"]["unit_y"] == "GB/s"
    assert s.data["fit"]["all_reduce"][0]["beta_GBps"] == pytest.approx((3 << 20) / 2e-3 / 1e9, rel=1e-3)
    assert s.data["world_size"] == 4 and s.data["nnodes"] == 2
    assert "all_reduce busbw" in s.summary and "2 collectives × 2 sizes" in s.summary


def test_bw001_wrong_data_is_an_error_naming_ranks_and_a_short_sweep_says_why():
    t = {1024: 1e-4}
    stop = {"at_size_B": 4096, "elapsed_s": 20.0, "estimated_s": 9.0}
    s = bw.summarize(
        {0: _bw_rank(t, stopped=stop), 1: _bw_rank(t), 2: _bw_rank(t, verified=False), 3: None}, WORLD
    )
    errors = [f for f in s.findings if f.severity is Severity.ERROR]
    assert len(errors) == 2 and all(f.where["ranks"] == [2] for f in errors)
    assert s.final_status() is Status.FAILED
    info = [f for f in s.findings if f.severity is Severity.INFO]
    assert info and "stopped before 4 KiB" in info[0].message
    assert bw.summarize({r: None for r in range(4)}, WORLD).summary == "no rank returned measurements"


def _p2p_rank(sent: dict[int, float], mode="pairs", remeasured=(), cpus=64):
    return {
        "sent": {str(d): {"GBps": v, "latency_us": 50.0} for d, v in sent.items()},
        "mode": mode,
        "plan": "full",
        "rounds": 3,
        "pairs": 6,
        "size_B": 8 << 20,
        "remeasured": [list(p) for p in remeasured],
        "suspects": [list(p) for p in remeasured],
        "cpus": cpus,
    }


def _p2p_results(bwf, **kw):
    return {r: _p2p_rank({d: bwf(r, d) for d in range(4) if d != r}, **kw) for r in range(4)}


def test_p2p001_builds_the_matrix_and_flags_only_remeasured_links():
    def bwf(i, j):  # node1 -> node0 slow
        return 0.02 if (i // 2, j // 2) == (1, 0) else (2.0 if i // 2 == j // 2 else 1.0)

    s = p2p.summarize(_p2p_results(bwf, remeasured=[(2, 0)]), WORLD)
    m = s.data["matrix"]
    assert m["unit"] == "GB/s" and m["labels"][2] == "r2@node1"
    assert m["values"][2][0] == 0.02 and m["values"][0][0] is None
    assert s.data["outliers"] == [[2, 0], [2, 1], [3, 0], [3, 1]]
    assert s.data["latency"]["values"][0][1] == 50.0
    (f,) = [f for f in s.findings if f.severity is not Severity.INFO]
    assert f.severity is Severity.ERROR and "node1 → node0" in f.message
    assert s.final_status() is Status.FAILED
    # the same matrix with nothing re-measured alone: only a hint
    s = p2p.summarize(_p2p_results(bwf), WORLD)
    assert {f.severity for f in s.findings} == {Severity.INFO} and "not re-measured alone" in s.findings[
        0
    ].message
    # sequential measurements need no second look
    s = p2p.summarize(_p2p_results(bwf, mode="sequential"), WORLD)
    assert s.final_status() is Status.FAILED


def test_p2p001_relaxes_thresholds_when_gloo_ranks_outnumber_cpus():
    def bwf(i, j):  # noisy but healthy: one link at 40 % of the others
        return 0.4 if (i, j) == (0, 1) else 1.0

    strict = p2p.summarize(_p2p_results(bwf, remeasured=[(0, 1)]), WORLD)
    assert any(f.severity is Severity.WARNING for f in strict.findings)
    relaxed = p2p.summarize(_p2p_results(bwf, remeasured=[(0, 1)], cpus=2), WORLD)
    assert not [f for f in relaxed.findings if f.severity is not Severity.INFO]
    assert any("CPU-bound" in f.message for f in relaxed.findings)


@pytest.mark.slow
def test_bw001_and_p2p001_run_on_gloo(tmp_path):
    rj = tmp_path / "r.json"
    p = run_cli(
        "check", "--select", "BW001,P2P001", "--max-size", "1M", "--p2p-size", "1M", "--json", str(rj), "-q"
    )
    assert p.returncode in (0, 1), p.stdout + p.stderr
    rep = load(rj)
    sweep = check(rep, "BW001")
    assert sweep["status"] == "passed", sweep
    assert sweep["data"]["sizes_B"][0] == 1024 and sweep["data"]["sizes_B"][-1] == 1 << 20
    assert all(r["verified"] and r["busbw_GBps"] > 0 for rows in sweep["data"]["ops"].values() for r in rows)
    assert set(sweep["data"]["busbw"]) == {"all_reduce", "all_gather", "reduce_scatter", "broadcast"}
    mat = check(rep, "P2P001")["data"]["matrix"]
    assert mat["values"][0][1] > 0 and mat["values"][1][0] > 0 and mat["values"][0][0] is None
    assert check(rep, "P2P001")["data"]["pairs_measured"] == 2


def test_bad_bandwidth_options_exit_2():
    p = run_cli("check", "--max-size", "lots")
    assert p.returncode == 2 and "--max-size" in p.stderr and "lots" in p.stderr
    p = run_cli("check", "--p2p-mode", "fast")
    assert p.returncode == 2 and "invalid choice" in p.stderr
