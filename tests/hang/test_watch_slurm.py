"""`ddpdoctor watch` run once around `srun` on the real Slurm bed (DESIGN.md §7): two namespace nodes,
one task each, sharing this machine's file system (the --dumps folder is the "shared storage").

Skipped with the reason where Slurm is not installed or network namespaces are not permitted. The
daemons, namespaces and every process the job started are gone after each test, pass or fail."""

from __future__ import annotations

import json
import os
import sys

import psutil
import pytest
from support.slurmbed import SlurmBed, slurm_available
from support.testbed import NetBed, netns_available

from ._watch_run import SCRIPTS, watch_argv

NETNS_OK, NETNS_WHY = netns_available()
SLURM_OK, SLURM_WHY = slurm_available() if NETNS_OK else (False, "")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.netns,
    pytest.mark.skipif(not NETNS_OK, reason=NETNS_WHY or "network namespaces unavailable"),
    pytest.mark.skipif(not SLURM_OK, reason=SLURM_WHY or "Slurm unavailable"),
]
SRUN = ["srun", "-N2", "--ntasks-per-node=1", sys.executable, str(SCRIPTS / "slurm_barrier.py")]


def _job_processes(dumps) -> list[psutil.Process]:
    """Every process `watch` started for this run (srun, the tasks), wherever it was reparented."""
    target, out = str(dumps.resolve()), []
    for p in psutil.process_iter():
        try:
            if p.environ().get("DDPDOCTOR_WATCH_DUMPS") == target:
                out.append(p)
        except psutil.Error:
            pass
    return out


def _where(rank: dict) -> str:
    path, line = rank["location"].rsplit(":", 1)
    return f"{os.path.basename(path)}:{line}"


def _watch_srun(tmp_path, env: dict | None = None):
    """(watch's exit code, its output, the diagnosis, left-over processes, squeue's jobs)."""
    dumps, js = tmp_path / "dumps", tmp_path / "diag.json"
    with NetBed(2) as bed, SlurmBed(bed) as slurm:
        try:
            p = slurm.run(watch_argv(5, dumps, js, SRUN), env={**os.environ, **(env or {})}, timeout=120)
            left = [f"{q.pid} {' '.join(q.cmdline()[:3])}" for q in _job_processes(dumps)]
            jobs = slurm.run(["squeue", "-h", "-o", "%i %T"], timeout=20).stdout.strip()
        finally:
            for q in _job_processes(dumps):
                try:
                    q.kill()
                except psutil.Error:
                    pass
    diag = json.loads(js.read_text()) if js.exists() else None
    return p.returncode, p.stdout + p.stderr, diag, dumps, left, jobs


def test_watch_around_srun_names_the_task_its_node_and_line(tmp_path):
    rc, out, diag, dumps, left, jobs = _watch_srun(tmp_path)
    assert rc == 1, out
    assert (left, jobs) == ([], ""), out
    assert sorted(p.name for p in dumps.glob("rank-*.json")) == ["rank-0.json", "rank-1.json"], out
    assert diag is not None, out
    assert diag["culprit_ranks"] == [0] and (diag["kind"], diag["seq"]) == ("mismatch_op", 4), diag["verdict"]
    ranks = {r["rank"]: r for r in diag["ranks"]}
    assert (ranks[0]["host"], ranks[1]["host"]) == ("ddpd-node0", "ddpd-node1")
    assert (ranks[0]["operation"], ranks[1]["operation"]) == ("barrier", "all_reduce")
    assert (_where(ranks[0]), _where(ranks[1])) == ("slurm_barrier.py:28", "slurm_barrier.py:36")
    # one diagnosis, printed once, naming the culprit's node
    assert out.count("Hang diagnosis:") == 1, out
    assert "rank 0 on ddpd-node0" in out and "this is DDP301" in out, out


def test_healthy_job_under_srun_exits_0_and_leaves_no_dumps(tmp_path):
    rc, out, diag, dumps, left, jobs = _watch_srun(tmp_path, env={"HEALTHY_PAUSE_S": "7"})  # > --hang-after 5
    assert rc == 0, out
    assert (left, jobs) == ([], ""), out
    assert "ddpdoctor watch:" not in out
    assert not dumps.exists()
    assert diag["outcome"] == "finished" and diag["world_size"] == 2  # --json: the watch's record
