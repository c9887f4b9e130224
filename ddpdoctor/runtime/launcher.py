"""`ddpdoctor check` on one node: the torchrun subprocess, live progress, the verdict, the outputs.

The launch itself is torch.distributed.run (elastic agent, c10d rendezvous). This module wraps it so a
run always ends: pre-flight (runtime/preflight.py) names an impossible rendezvous before launching,
the rendezvous watcher (runtime/rdzv_watch.py) says which nodes arrived, an overall deadline holds,
and a launch that produced no report becomes a message naming the layer that failed
(runtime/launch_log.py, exit 2). Every exit path — the end, an exception, SIGINT, SIGTERM, SIGHUP —
ends torchrun and its ranks (boundary/processes.py) and removes the run's temp folder, torchrun's own
torchelastic_* folders included (TMPDIR points into it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from ddpdoctor.boundary.outputs import OutputError, write_output
from ddpdoctor.boundary.processes import end_process, signals_raise
from ddpdoctor.core.report import Report
from ddpdoctor.events import EventTail
from ddpdoctor.registry import RegistryError, discover, select
from ddpdoctor.report.console import make_console
from ddpdoctor.report.io import ReportError, load_report
from ddpdoctor.runtime.launch_log import diagnose_failure
from ddpdoctor.runtime.launch_plan import LaunchError, LaunchPlan, plan_launch
from ddpdoctor.runtime.preflight import PreflightError, check_local_addr, preflight, source_address_towards
from ddpdoctor.runtime.progress import ProgressView
from ddpdoctor.runtime.rdzv_watch import RendezvousWatcher

GRACE_S = 4.0
WATCH_MIN_TIMEOUT_S = 20.0


def _error(msg: str) -> None:
    """Plain text on stderr: no wrapping, no rich markup (messages contain brackets and paths)."""
    print(msg, file=sys.stderr, flush=True)



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


def build_config(args: argparse.Namespace, plan: LaunchPlan | None, codes: list[str], backend: str,
                 events: str | None, report: str | None, inputs: dict[str, Any]) -> dict[str, Any]:
    """The worker's config (ddpdoctor.runtime.worker_config.WorkerConfig) as the JSON it reads."""
    from ddpdoctor.runtime.worker_config import WorkerConfig

    return WorkerConfig(
        checks=codes,
        check_paths=[str(Path(p).resolve()) for p in args.checks_path],
        budget_scale=args.budget_scale,
        **inputs,
        events=events,
        report=report,
        report_final=str(Path(args.json).absolute()) if args.json else None,
        backend=backend,
        rdzv_timeout_s=args.rdzv_timeout,
        launch_t0=time.time(),
        endpoint=plan.endpoint if plan else None,
        rdzv_id=plan.rdzv_id if plan else None,
    ).to_dict()


def run_check(args: argparse.Namespace, inputs: dict[str, Any]) -> int:
    """One node's run. ``args`` holds the parsed command line as plain values; ``inputs`` the checks'
    options, the profile and the recommendation options, already validated by the command, as are
    the output paths (boundary/outputs.check_output)."""
    out = make_console()
    try:
        specs = discover(args.checks_path, kind="cluster")
        if args.select is None:
            specs = [s for s in specs if args.suite in s.suites]
        specs = select(specs, args.select, args.skip)
    except RegistryError as e:
        _error(f"ddpdoctor check: {e}")
        return 2
    if not specs:
        _error("ddpdoctor check: no checks selected; see `ddpdoctor check --list` for the codes")
        return 2
    if args.script and not (Path(args.script).is_file() or Path(args.script).is_dir()):
        what = "not a regular file or a folder" if os.path.lexists(args.script) else "no such file or folder"
        _error(f"ddpdoctor check: --script {args.script}: {what}; give the training script or its folder")
        return 2
    gpus = visible_gpus() if args.backend in ("auto", "nccl") else 0
    backend = args.backend if args.backend != "auto" else ("nccl" if gpus else "gloo")
    if backend == "nccl" and gpus == 0:
        _error("ddpdoctor check: --backend nccl but no NVIDIA GPU is visible (NVML found none)")
        return 2
    try:
        plan = plan_launch(nodes=args.nodes, nproc_per_node=args.nproc_per_node, node_rank=args.node_rank,
                           rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id,
                           rdzv_timeout_s=args.rdzv_timeout, env=os.environ,
                           default_nproc_per_node=gpus if backend == "nccl" else 2)
        outputs = output_paths(args, plan)
        if args.local_addr:
            check_local_addr(args.local_addr)
    except (LaunchError, PreflightError) as e:
        _error(f"ddpdoctor check: {e}")
        return 2
    codes = [s.code for s in specs]

    if args.write_config:
        return write_config(args, plan, codes, backend, inputs, out)

    tmp = Path(tempfile.mkdtemp(prefix="ddpdoctor-"))
    keep = [False]  # set when the failure message points into tmp (torchrun's log)
    try:
        with signals_raise():  # SIGTERM, SIGHUP: the same clean end as Ctrl-C
            return _launch(args, plan, specs, backend, inputs, outputs, out, tmp, keep)
    finally:
        if not keep[0]:
            shutil.rmtree(tmp, ignore_errors=True)


def write_config(args: argparse.Namespace, plan: LaunchPlan, codes: list[str], backend: str,
                 inputs: dict[str, Any], out: Console) -> int:
    """--write-config FILE: the worker config for the user's own torchrun, and how to run it and read
    the verdict. The report goes to --json, else beside the config (the workers print nothing)."""
    cfg_path = Path(args.write_config)
    report = args.json or str(cfg_path.with_name(cfg_path.stem + ".report.json"))
    cfg = build_config(args, plan, codes, backend, args.events, str(Path(report).absolute()), inputs)
    cfg["launch_t0"] = None
    cfg["report_final"] = cfg["report"]  # the user's own torchrun: the workers write the lasting copy
    try:
        write_output(cfg_path, json.dumps(cfg, indent=1) + "\n", "--write-config")
    except OutputError as e:
        _error(f"ddpdoctor check: {e}")
        return 2
    out.print(f"wrote {args.write_config}; run on every node:\n  torchrun --nnodes N --nproc-per-node "
              f"{plan.nproc_per_node} --rdzv-backend c10d --rdzv-endpoint HOST:PORT -m ddpdoctor.runtime.worker "
              f"--config {args.write_config}\nthen the verdict (exit code 0, 1 or 2 as `ddpdoctor check`):\n"
              f"  ddpdoctor report show {report}", markup=False, highlight=False, soft_wrap=True)
    return 0


def _launch(args: argparse.Namespace, plan: LaunchPlan, specs: list, backend: str, inputs: dict[str, Any],
            outputs: dict[str, str | None], out: Console, tmp: Path, keep: list[bool]) -> int:
    """Start torchrun for this node with the config in ``tmp``, follow its events, print the report,
    write the outputs."""
    codes = [s.code for s in specs]
    events_path = args.events if args.events and args.events != "-" else str(tmp / "events.jsonl")
    report_path = str(tmp / "report.json")  # the user's --json is written from it at the end
    cfg = build_config(args, plan, codes, backend, events_path, report_path, inputs)
    cfg_path = tmp / "config.json"
    cfg_path.write_text(json.dumps(cfg, indent=1))

    try:
        preflight(plan)
        plan.local_addr = args.local_addr or source_address_towards(plan.endpoint_host)
    except PreflightError as e:
        _error(f"ddpdoctor check: {e}")
        return 2

    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    # torchrun's own temp folders (torchelastic_*) and the ranks' go into ours, which is removed
    env["TMPDIR"] = str(tmp)
    log_path = tmp / "torchrun.log"
    argv = plan.torchrun_argv(["--config", str(cfg_path)])
    # Under srun only task 0 shows progress and the report; the others end with one line.
    progress = ProgressView(out, quiet=args.quiet or not plan.prints_report,
                            echo_events_to_stdout=args.events == "-")
    progress.launching(plan, backend, codes, [s.title for s in specs])
    # libtorch's C++ warnings (a store client whose server went away) would clutter our own messages.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    watcher = RendezvousWatcher(plan)
    # The node hosting the rendezvous says who arrived; the others need not. Not for a short timeout:
    # the watcher's own import of torch (seconds of CPU) would compete with torchrun's and outlast it.
    if plan.is_host is not False and plan.rdzv_timeout_s >= WATCH_MIN_TIMEOUT_S:
        watcher.start()
    budget_total = sum(s.budget_s * args.budget_scale + GRACE_S * 3 for s in specs)
    deadline = time.monotonic() + args.rdzv_timeout + budget_total + 30
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
                    if ev.get("event") == "run_end":
                        run_ended_at = time.monotonic()
                    if ev.get("event") == "rendezvous":
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
                time.sleep(0.1)
    finally:
        watcher.stop.set()
        if proc is not None:
            end_process(proc, GRACE_S)
        # A thread left inside libtorch at exit aborts the interpreter; under load its import of torch
        # alone can take several seconds.
        if watcher.is_alive():
            watcher.join(timeout=15)

    report: Report | None = None
    if Path(report_path).exists():
        try:
            report = load_report(report_path)
        except ReportError as e:
            _error(f"ddpdoctor check: {e}")
    if report is None and run_ended_at is None:
        from ddpdoctor.runtime.partial import partial_report, root_cause

        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        report = partial_report(progress.state, root_cause(log), codes, [s.title for s in specs])
        if report is not None:
            from ddpdoctor.runtime.finalize import attach_bad_nodes

            attach_bad_nodes(report)
    if report is None:
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        message, keep[0] = diagnose_failure(plan, log, str(log_path), proc.returncode, timed_out,
                                            watcher.participants if watcher.looked else None,
                                            progress.rendezvoused)
        _error(f"ddpdoctor check: {message}")
        if args.verbose:
            _error(log[-4000:])
        return 2

    if args.script:
        attach_lint(report, args.script)
    code = report.exit_code()
    if not plan.prints_report:
        out.print(follower_line(report, args, socket.gethostname()), soft_wrap=True, highlight=False, markup=False)
    else:
        from ddpdoctor.report.render_text import print_report

        print_report(report, out, verbose=args.verbose)
    code = write_outputs(report, outputs, code)
    from ddpdoctor.runtime.fleet_finish import finish

    return finish(args, report, out, code, writes=plan.prints_report, nproc=plan.nproc_per_node)


def write_outputs(report: Report, outputs: dict[str, str | None], code: int) -> int:
    """The report files the user asked for, after the report is printed; a write that fails keeps
    the content in a temp file, says where, and makes the exit code 2 (ddpdoctor could not do all it
    was asked), never a traceback and never a lost report."""
    from ddpdoctor.report.render_junit import to_junit

    makers = {
        "json": lambda: json.dumps(report.to_dict(), indent=1, default=str) + "\n",
        "junit": lambda: to_junit(report),
        "bad_nodes": lambda: bad_nodes_text(report),
    }
    failed = False
    for key, path in outputs.items():
        if not path:
            continue
        flag = f"--{key.replace('_', '-')}"
        try:
            write_output(path, makers[key](), flag)
        except OutputError as e:
            _error(f"ddpdoctor check: {e}")
            failed = True
            continue
        if key == "json":
            print(f"report: {path}", flush=True)
    return 2 if failed else code


def output_paths(args: argparse.Namespace, plan: LaunchPlan) -> dict[str, str | None]:
    """The files this task writes: all of them where it prints the report, none on the other Slurm
    tasks (they would race task 0 for the same paths on a shared file system). The paths themselves
    were checked by the command before anything started."""
    wanted = {"json": args.json, "junit": args.junit, "bad_nodes": getattr(args, "bad_nodes", None)}
    if not plan.prints_report:
        return dict.fromkeys(wanted)
    return wanted


def bad_nodes_text(report: Report) -> str:
    """The --bad-nodes file: one Slurm hostlist expression and a newline, or nothing at all."""
    from ddpdoctor.model.nodes.bad_nodes import bad_nodes_entry

    hostlist = (report.run.get("bad_nodes") or bad_nodes_entry(report))["hostlist"]
    return f"{hostlist}\n" if hostlist else ""


def follower_line(report: Report, args: argparse.Namespace, host: str) -> str:
    """What a Slurm task other than SLURM_PROCID=0 prints: the verdict and where the report is."""
    from ddpdoctor.report.render_text import ReportView

    verdict = " ".join(ReportView(report).verdict().plain.splitlines()[0].split())
    first = (report.run.get("nodes") or ["node 0"])[0]
    files = "".join(f", --{k} {v}" for k, v in (("json", args.json), ("junit", args.junit)) if v)
    return f"{host}: {verdict}; report: task 0 (SLURM_PROCID=0) on {first}{files}"


def attach_lint(report: Report, script: str) -> None:
    from ddpdoctor.lint import LintInputError, lint_paths

    try:
        report.lint = list(lint_paths([script]))
    except LintInputError as e:  # changed during the run: the measurements stand, the lint is said missing
        report.run.setdefault("warnings", []).append(f"--script: not linted: {e}")
