"""`ddpdoctor check` on one node: the torchrun subprocess, live progress, the report (the command
prints it and writes the files).

The launch itself is torch.distributed.run (elastic agent, c10d rendezvous). This module wraps it so a
run always ends: pre-flight (runtime/preflight.py) names an impossible rendezvous before launching,
the rendezvous watcher (runtime/rdzv_watch.py) says which nodes arrived, an overall deadline holds,
and a launch that produced no report becomes a message naming the layer that failed
(runtime/launch_log.py, exit 2). Every exit path — the end, an exception, SIGINT, SIGTERM, SIGHUP —
ends torchrun and its ranks (boundary/processes.py) and removes the run's temp folder, torchrun's own
torchelastic_* folders included (TMPDIR points into it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from ddpdoctor.boundary.processes import end_process, signals_raise
from ddpdoctor.core.check_run import CheckRun
from ddpdoctor.core.events import Rendezvous, RunEnd
from ddpdoctor.core.report import Report
from ddpdoctor.events import EventTail
from ddpdoctor.registry import CheckSpec, RegistryError, discover, select
from ddpdoctor.report.io import ReportError, load_report
from ddpdoctor.runtime.launch_log import diagnose_failure
from ddpdoctor.runtime.launch_plan import LaunchError, LaunchPlan, plan_launch
from ddpdoctor.runtime.preflight import PreflightError, check_local_addr, preflight, source_address_towards
from ddpdoctor.runtime.progress import ProgressView
from ddpdoctor.runtime.rdzv_watch import RendezvousWatcher
from ddpdoctor.runtime.worker_config import WorkerConfig

GRACE_S = 4.0
WATCH_MIN_TIMEOUT_S = 20.0


# -- the run --------------------------------------------------------------------------------------------
def visible_gpus() -> int:
    """GPUs this process may use, from NVML and CUDA_VISIBLE_DEVICES, without importing torch."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and cvd.strip() in ("", "-1", "none", "NoDevFiles"):
        return 0
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            n = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return 0
    if cvd is not None:
        return min(n, len([x for x in cvd.split(",") if x.strip()]))
    return n


class RunError(Exception):
    """A run that cannot start or cannot go on (a bad selection, an impossible launch); the message says
    what to change."""


@dataclass(frozen=True)
class Prepared:
    """A run ready to launch: the checks selected, the backend chosen, the torchrun plan made."""

    run: CheckRun
    specs: list[CheckSpec]
    backend: str
    plan: LaunchPlan

    @property
    def codes(self) -> list[str]:
        return [s.code for s in self.specs]


@dataclass
class CheckOutcome:
    """What a run produced, for the command to print and write."""

    report: Report | None  # None: the launch failed (``failure`` says why)
    prints_report: bool  # this task prints the report and writes the files (under srun: task 0 only)
    nproc_per_node: int
    failure: str | None = None
    log_tail: str = ""  # the end of torchrun's log, for --verbose
    warnings: list[str] = field(default_factory=list)  # said on stderr before the report


def prepare(run: CheckRun) -> Prepared:
    """Select the checks, choose the backend and plan the launch; RunError when the run cannot start."""
    try:
        specs = discover(list(run.checks_path), kind="cluster")
        if run.select is None:
            specs = [s for s in specs if run.suite in s.suites]
        specs = select(specs, _list(run.select), _list(run.skip))
    except RegistryError as e:
        raise RunError(str(e)) from None
    if not specs:
        raise RunError("no checks selected; see `ddpdoctor check --list` for the codes")
    if run.script and not (Path(run.script).is_file() or Path(run.script).is_dir()):
        what = "not a regular file or a folder" if os.path.lexists(run.script) else "no such file or folder"
        raise RunError(f"--script {run.script}: {what}; give the training script or its folder")
    gpus = visible_gpus() if run.backend in ("auto", "nccl") else 0
    backend = run.backend if run.backend != "auto" else ("nccl" if gpus else "gloo")
    if backend == "nccl" and gpus == 0:
        raise RunError("--backend nccl but no NVIDIA GPU is visible (NVML found none)")
    try:
        plan = plan_launch(nodes=run.nodes, nproc_per_node=run.nproc_per_node, node_rank=run.node_rank,
                           rdzv_endpoint=run.rdzv_endpoint, rdzv_id=run.rdzv_id,
                           rdzv_timeout_s=run.rdzv_timeout_s, env=os.environ,
                           default_nproc_per_node=gpus if backend == "nccl" else 2)
        if run.local_addr:
            check_local_addr(run.local_addr)
    except (LaunchError, PreflightError) as e:
        raise RunError(str(e)) from None
    if backend == "nccl" and plan.nproc_per_node > gpus:
        # NCCL refuses two ranks on one GPU ("Duplicate GPU detected", seen on a one-GPU H200): say so
        # before launching rather than fail every check with the same NCCL error.
        raise RunError(
            f"{plan.nproc_per_node} ranks per node but this node has {gpus} visible GPU(s), and NCCL "
            f"refuses two ranks on one GPU; use --nproc-per-node {gpus} or fewer, or --backend gloo"
        )
    return Prepared(run, specs, backend, plan)


def _list(codes: tuple[str, ...] | None) -> list[str] | None:
    return list(codes) if codes is not None else None


def worker_config(prep: Prepared, events: str | None, report: str | None) -> WorkerConfig:
    """The worker's config (ddpdoctor.runtime.worker_config.WorkerConfig)."""
    run = prep.run
    return WorkerConfig(
        checks=prep.codes,
        check_paths=[str(Path(p).resolve()) for p in run.checks_path],
        budget_scale=run.budget_scale,
        options=dict(run.options),
        profile=run.profile,
        recommend=dict(run.recommend),
        events=events,
        report=report,
        report_final=str(Path(run.json).absolute()) if run.json else None,
        backend=prep.backend,
        rdzv_timeout_s=run.rdzv_timeout_s,
        launch_t0=time.time(),
        endpoint=prep.plan.endpoint,
        rdzv_id=prep.plan.rdzv_id,
    )


def own_torchrun_config(prep: Prepared) -> tuple[WorkerConfig, str]:
    """--write-config: the worker config for the user's own torchrun, and where its report goes (--json,
    else beside the config: the workers print nothing, and they write the lasting copy)."""
    cfg_path = Path(prep.run.write_config or "ddpdoctor.json")
    report = prep.run.json or str(cfg_path.with_name(cfg_path.stem + ".report.json"))
    cfg = worker_config(prep, prep.run.events, str(Path(report).absolute()))
    return dataclasses.replace(cfg, launch_t0=None, report_final=cfg.report), report


def run_check(run: CheckRun, out: Console) -> CheckOutcome:
    """One node's run: launch torchrun, follow it with live progress on ``out``, and return the report
    (with the lint of --script); RunError when it cannot start. Every option was validated by the
    command, as were the output paths (boundary/outputs.check_output), which the command writes."""
    prep = prepare(run)
    tmp = Path(tempfile.mkdtemp(prefix="ddpdoctor-"))
    keep = [False]  # set when the failure message points into tmp (torchrun's log)
    try:
        with signals_raise():  # SIGTERM, SIGHUP: the same clean end as Ctrl-C
            return _launch(prep, out, tmp, keep)
    finally:
        if not keep[0]:
            shutil.rmtree(tmp, ignore_errors=True)


def _launch(prep: Prepared, out: Console, tmp: Path, keep: list[bool]) -> CheckOutcome:
    """Start torchrun for this node with the config in ``tmp``, follow its events, return the report."""
    run, plan, specs, backend, codes = prep.run, prep.plan, prep.specs, prep.backend, prep.codes
    events_path = run.events if run.events and run.events != "-" else str(tmp / "events.jsonl")
    report_path = str(tmp / "report.json")  # the user's --json is written from it at the end
    cfg = worker_config(prep, events_path, report_path)
    cfg_path = tmp / "config.json"
    cfg_path.write_text(json.dumps(cfg.to_dict(), indent=1))

    try:
        preflight(plan)
        plan.local_addr = run.local_addr or source_address_towards(plan.endpoint_host)
    except PreflightError as e:
        raise RunError(str(e)) from None

    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    # torchrun's own temp folders (torchelastic_*) and the ranks' go into ours, which is removed
    env["TMPDIR"] = str(tmp)
    log_path = tmp / "torchrun.log"
    argv = plan.torchrun_argv(["--config", str(cfg_path)])
    # Under srun only task 0 shows progress and the report; the others end with one line.
    progress = ProgressView(out, quiet=run.quiet or not plan.prints_report,
                            echo_events_to_stdout=run.events == "-")
    progress.launching(plan, backend, codes, [s.title for s in specs])
    # libtorch's C++ warnings (a store client whose server went away) would clutter our own messages.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    watcher = RendezvousWatcher(plan)
    # The node hosting the rendezvous says who arrived; the others need not. Not for a short timeout:
    # the watcher's own import of torch (seconds of CPU) would compete with torchrun's and outlast it.
    if plan.is_host is not False and plan.rdzv_timeout_s >= WATCH_MIN_TIMEOUT_S:
        watcher.start()
    budget_total = sum(s.budget_s * run.budget_scale + GRACE_S * 3 for s in specs)
    deadline = time.monotonic() + run.rdzv_timeout_s + budget_total + 30
    proc = None
    run_ended_at = None
    timed_out = False
    try:
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        tail = EventTail(events_path)
        with progress:
            while True:
                for ev in tail.read():
                    progress.handle(ev)
                    if isinstance(ev, RunEnd):
                        run_ended_at = time.monotonic()
                    if isinstance(ev, Rendezvous):
                        watcher.stop.set()
                rc = proc.poll()
                if rc is not None:
                    for ev in tail.read():
                        progress.handle(ev)
                    break
                now = time.monotonic()
                if run_ended_at is not None and now - run_ended_at > (3 if plan.nnodes == 1 else 15):
                    break  # the report is written; torchrun's exit barrier may wait for lost nodes
                if now > deadline:
                    timed_out = True
                    break
                try:  # a wait, not a sleep: torchrun's exit is seen at once, not up to 0.1 s later
                    proc.wait(0.1)
                except subprocess.TimeoutExpired:
                    pass
    finally:
        watcher.stop.set()
        if proc is not None:
            end_process(proc, GRACE_S)
        # A thread left inside libtorch at exit aborts the interpreter; under load its import of torch
        # alone can take several seconds.
        if watcher.is_alive():
            watcher.join(timeout=15)

    outcome = CheckOutcome(None, plan.prints_report, plan.nproc_per_node)
    report: Report | None = None
    if Path(report_path).exists():
        try:
            report = load_report(report_path)
        except ReportError as e:
            outcome.warnings.append(f"ddpdoctor check: {e}")
    if report is None and run_ended_at is None:
        from ddpdoctor.runtime.partial import partial_report, root_cause

        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        report = partial_report(progress.state, root_cause(log), codes, [s.title for s in specs])
        if report is not None:
            from ddpdoctor.runtime.finalize import attach_bad_nodes

            attach_bad_nodes(report)
    if report is None:
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        outcome.failure, keep[0] = diagnose_failure(plan, log, str(log_path), proc.returncode, timed_out,
                                                    watcher.participants if watcher.looked else None,
                                                    progress.rendezvoused)
        outcome.log_tail = log[-4000:]
        return outcome
    if run.script:
        attach_lint(report, run.script)
    outcome.report = report
    return outcome


def attach_lint(report: Report, script: str) -> None:
    from ddpdoctor.lint import LintInputError, lint_paths

    try:
        report.lint = list(lint_paths([script]))
    except LintInputError as e:  # changed during the run: the measurements stand, the lint is said missing
        report.run.add_warning(f"--script: not linted: {e}")
