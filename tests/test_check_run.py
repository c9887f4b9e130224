"""The runtime's entry point takes a typed CheckRun, not a command line: the command builds it from its
flags (validated there), and the runtime prepares a launch from it alone."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from ddpdoctor.commands import check
from ddpdoctor.core.check_run import CheckRun
from ddpdoctor.runtime.launcher import RunError, own_torchrun_config, prepare


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    check.add_arguments(p)
    return p.parse_args(list(argv))


def test_the_command_builds_a_validated_frozen_run():
    run = check.check_run(_args("--select", "env,col001", "--max-size", "4M", "--p2p-mode", "sequential",
                                "--rdzv-timeout", "30", "--option", "p2p_plan=full", "--k8s-labels", "x.json"))
    assert run.select == ("ENV", "COL001") and run.rdzv_timeout_s == 30.0 and run.k8s_labels == ("x.json",)
    assert run.options == {"p2p_plan": "full", "max_size": 4 << 20, "p2p_mode": "sequential"}
    # a --drain confirmation run repeats the measuring flags as given
    assert run.check_flags == ("--max-size", "4M", "--p2p-mode", "sequential", "--option", "p2p_plan=full")
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.json = "elsewhere.json"  # type: ignore[misc]


def test_a_run_is_prepared_from_the_typed_options_alone(monkeypatch):
    for k in ("SLURM_JOB_ID", "SLURM_NNODES", "SLURM_PROCID"):
        monkeypatch.delenv(k, raising=False)
    prep = prepare(CheckRun(backend="gloo", select=("ENV001", "COL"), nproc_per_node=3, json="out.json"))
    assert prep.codes == ["ENV001", "COL001"] and prep.backend == "gloo" and prep.plan.nproc_per_node == 3
    cfg, report = own_torchrun_config(prep)
    assert cfg.checks == ["ENV001", "COL001"] and report == "out.json"
    assert cfg.launch_t0 is None and cfg.report_final == cfg.report and cfg.report.endswith("out.json")


@pytest.mark.parametrize("run, words", [
    (CheckRun(backend="gloo", select=("NOPE9",)), "unknown check code 'NOPE9'"),
    (CheckRun(backend="gloo", select=("ENV001",), skip=("ENV",)), "no checks selected"),
    (CheckRun(backend="gloo", select=("ENV001",), script="/nonexistent/train.py"), "--script /nonexistent/train.py"),
])
def test_a_run_that_cannot_start_says_why(run, words):
    with pytest.raises(RunError, match=words.replace("(", r"\(")):
        prepare(run)


@pytest.mark.parametrize("backend", ["auto", "nccl"])
def test_more_ranks_than_gpus_on_nccl_is_refused_before_launch(monkeypatch, backend):
    # On a one-GPU H200 (tests/fixtures/device-h200/check-2ranks-1gpu.txt) `--nproc-per-node 2` reached
    # NCCL, which refused it ("Duplicate GPU detected") once per check; now it never starts.
    import ddpdoctor.runtime.launcher as launcher

    for k in ("SLURM_JOB_ID", "SLURM_NNODES", "SLURM_PROCID"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(launcher, "visible_gpus", lambda: 1)
    with pytest.raises(RunError, match=r"2 ranks per node but this node has 1 visible GPU.*--nproc-per-node 1"):
        prepare(CheckRun(backend=backend, select=("COL001",), nproc_per_node=2))
    assert prepare(CheckRun(backend=backend, select=("COL001",), nproc_per_node=1)).plan.nproc_per_node == 1
    assert prepare(CheckRun(backend="gloo", select=("COL001",), nproc_per_node=2)).backend == "gloo"
