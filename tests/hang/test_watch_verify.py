"""`ddpdoctor watch --verify` end to end on gloo: a collective that differs across ranks, named by
TORCH_DISTRIBUTED_DEBUG=DETAIL before it runs, and a shuffling DistributedSampler iterated again with
the same epoch (the job goes on), each with path:line, when, and the lint rule it confirms."""

from __future__ import annotations

import pytest

from ._watch_run import leftovers, location, torchrun, watch

pytestmark = pytest.mark.slow


def test_uneven_all_gather_is_named_with_shapes_and_sequence_number(tmp_path):
    run = watch(tmp_path, torchrun("verify_uneven_gather.py", 2), hang_after=300, extra=("--verify",))
    assert leftovers(run.dumps) == [], run.out
    assert run.rc == 1, run.out
    d = run.diag
    assert d["kind"] == "mismatch_size" and d["operation"] == "all_gather" and d["seq"] == 1
    assert "[100]" in d["verdict"] and "[101]" in d["verdict"]
    assert sorted(d["culprit_ranks"]) == [0, 1]  # two ranks, two shapes: no majority to blame
    for r in (0, 1):
        assert location(run, r) == "verify_uneven_gather.py:9"
    assert "Crash diagnosis:" in run.out


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
    assert "DDP101 at verify_sampler_epoch.py:10, confirmed at run time" in run.out


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
