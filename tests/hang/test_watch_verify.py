"""`ddpdoctor watch --verify` end to end on gloo: a collective that differs across ranks, named by our
own fingerprint exchange before it runs; an isend never waited; a cycle of irecv waits; a forward of
the DDP model run by rank 0 only; a shuffling DistributedSampler iterated again with the same epoch
(the job goes on); each with path:line, when, and the lint rule it confirms. A healthy DDP job runs
(TORCH_DISTRIBUTED_DEBUG=DETAIL crashes DDP's constructor on torch 2.13 CPU: --verify must not set it)
and exits with its own code."""

from __future__ import annotations

import re
import subprocess

import pytest

from ._watch_run import job_env, leftovers, location, torchrun, watch

pytestmark = pytest.mark.slow


def test_uneven_all_gather_is_named_with_shapes_and_sequence_number(tmp_path):
    run = watch(tmp_path, torchrun("verify_uneven_gather.py", 2), hang_after=300, extra=("--verify",))
    assert leftovers(run.dumps) == [], run.out
    assert run.rc == 1, run.out
    d = run.diag
    # collective #2: the all_reduce before it is #1 (our count, per group)
    assert d["kind"] == "mismatch_size" and d["operation"] == "all_gather" and d["seq"] == 2
    assert "float32[100]" in d["verdict"] and "float32[101]" in d["verdict"]
    assert "verify_uneven_gather.py:9" in d["verdict"]
    assert sorted(d["culprit_ranks"]) == [0, 1]  # two ranks, two shapes: no majority to blame
    for r in (0, 1):
        assert location(run, r) == "verify_uneven_gather.py:9"
    assert "Crash diagnosis:" in run.out
    (v,) = [f for f in d["verify"] if f["kind"] == "collective_mismatch"]
    assert v["seqs"] == [2] and v["line"] == 9 and v["operation"] == "all_gather"
    assert "Verify:" not in run.out  # the diagnosis names it: one finding per cause


def test_sampler_without_set_epoch_is_named_and_the_job_goes_on(tmp_path):
    run = watch(tmp_path, torchrun("verify_sampler_epoch.py", 2), hang_after=300, extra=("--verify",))
    assert leftovers(run.dumps) == [], run.out
    assert run.rc == 0, run.out  # the job went on and finished
    assert run.diag is not None
    (f,) = run.diag["verify"]
    assert f["kind"] == "sampler_epoch" and f["ranks"] == [0, 1]
    assert f["file"].endswith("verify_sampler_epoch.py") and f["line"] == 14
    assert set(f["epochs"]) == {0} and f["passes"] == [2, 3]
    assert [x["code"] for x in f["lint"]] == ["DDP101"]
    assert "DDP101 at verify_sampler_epoch.py:13, confirmed at run time" in run.out  # at the epoch loop


def test_sampler_with_set_epoch_gives_no_finding(tmp_path):
    script = tmp_path / "ok.py"
    src = (torchrun("verify_sampler_epoch.py", 2)[-1])
    text = open(src).read().replace("    for epoch in range(3):\n", "    for epoch in range(3):\n        sampler.set_epoch(epoch)\n")
    script.write_text(text)
    job = torchrun("verify_sampler_epoch.py", 2)[:-1] + [str(script)]
    run = watch(tmp_path, job, hang_after=300, extra=("--verify",))
    assert run.rc == 0, run.out
    assert "Verify:" not in run.out
    assert (run.diag or {}).get("verify", []) == []


def test_healthy_ddp_job_runs_and_exits_with_its_own_code(tmp_path):
    job = torchrun("verify_ddp_healthy.py", 2)
    plain = subprocess.run(job, capture_output=True, text=True, timeout=120, env=job_env())
    run = watch(tmp_path, job, hang_after=300, extra=("--verify",))
    assert leftovers(run.dumps) == [], run.out
    assert plain.returncode == 1, plain.stderr[-2000:]  # torchrun's own code when its ranks exit 3
    assert run.rc == plain.returncode, run.out
    assert "SIGSEGV" not in run.out and "Verify:" not in run.out
    assert "exited with code 3" in run.out
    # the job's log is not longer for being watched: our one closing line at most
    ours = [x for x in run.out.splitlines() if x.startswith("ddpdoctor watch:")]
    assert len(ours) == 1, run.out
    watched = [x for x in _steady(run.out) if not x.startswith("ddpdoctor watch:")]
    unwatched = _steady(plain.stdout + plain.stderr)
    assert len(watched) <= len(unwatched), run.out
    assert set(watched) <= set(unwatched), sorted(set(watched) - set(unwatched))


_LAUNCHER_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d")  # torchrun's own log lines (glog prefix)


def _steady(log: str) -> list[str]:
    """A torchrun log without what changes from one run to the next: torchrun's own log lines (which
    ranks it saw fail first, which it then stopped with SIGTERM), the per-rank failure report (the
    same), and digits (times, pids). What is left is what the job's processes printed."""
    out, report = [], False
    for line in log.splitlines():
        if line.startswith("Failures:"):
            report = True
        if not report and not _LAUNCHER_LOG.match(line):
            out.append("".join("#" if c.isdigit() else c for c in line))
        if report and line.startswith("===="):
            report = False
    return out


def test_isend_never_waited_is_named_with_peer_and_line(tmp_path):
    run = watch(tmp_path, torchrun("verify_p2p_unwaited.py", 2), hang_after=300, extra=("--verify",))
    assert leftovers(run.dumps) == [], run.out
    assert run.rc == 0, run.out
    (f,) = run.diag["verify"]
    assert f["kind"] == "p2p_unwaited" and f["ranks"] == [0] and f["operation"] == "isend"
    assert f["file"].endswith("verify_p2p_unwaited.py") and f["line"] == 11 and f["seqs"] == [1]
    assert f["calls"] == ["rank 0: isend to rank 1 of float32[4], p2p request #1"]
    assert [x["code"] for x in f["lint"]] == ["DDP202"]


def test_cycle_of_irecv_waits_is_named_as_a_cycle(tmp_path):
    run = watch(tmp_path, torchrun("verify_irecv_cycle.py", 2), hang_after=120, extra=("--verify",))
    assert leftovers(run.dumps) == [], run.out
    assert run.rc == 1, run.out
    d = run.diag
    assert d["kind"] == "p2p_cycle" and d["operation"] == "irecv" and sorted(d["culprit_ranks"]) == [0, 1]
    assert "cycle 0→1→0" in d["verdict"]
    assert d["watch"]["certain"]["kind"] == "p2p_cycle"  # called certain, long before --hang-after
    assert run.seconds < 100
    assert d["seq"] == 1  # the first p2p request of each rank
    for r in (0, 1):
        assert location(run, r) == "verify_irecv_cycle.py:12"


def test_forward_of_ddp_model_on_rank_0_only_is_named(tmp_path):
    run = watch(tmp_path, torchrun("verify_forward_rank0.py", 2), hang_after=300, extra=("--verify",))
    assert leftovers(run.dumps) == [], run.out
    assert run.rc == 0, run.out
    (f,) = run.diag["verify"]
    assert f["kind"] == "forward_some_ranks" and f["ranks"] == [0] and f["other_ranks"] == [1]
    assert f["file"].endswith("verify_forward_rank0.py") and f["line"] == 14
    assert f["steps"] == [3]  # rank 0's third forward of the DDP model
    assert "DDP308" in [x["code"] for x in f["lint"]]


def test_different_collectives_are_named_with_each_rank_line(tmp_path):
    run = watch(tmp_path, torchrun("verify_op_mismatch.py", 3), hang_after=300, extra=("--verify",))
    assert leftovers(run.dumps) == [], run.out
    assert run.rc == 1, run.out
    d = run.diag
    assert (d["kind"], d["seq"], d["operation"]) == ("mismatch_op", 3, "all_reduce/broadcast"), run.out
    assert d["culprit_ranks"] == [0]  # ranks 1 and 2 agree: rank 0 is the odd one out
    assert "rank 0 calls broadcast float32[16] from rank 0 at verify_op_mismatch.py:8" in d["verdict"]
    assert "ranks 1, 2 call all_reduce float32[16] at verify_op_mismatch.py:10" in d["verdict"]
