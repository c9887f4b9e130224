"""`ddpdoctor check` on one node: pre-flight, the torchrun subprocess, live progress, the verdict.

The launch itself is torch.distributed.run (elastic agent, c10d rendezvous). This module wraps it so a
run always ends: it checks the endpoint before launching (unreachable, port taken), watches the
rendezvous state while waiting (to say which nodes arrived), enforces an overall deadline, and turns a
launch that produced no report into a message naming the layer that failed (exit 2).
"""

from __future__ import annotations

import argparse
import base64
import errno
import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.console import Console

from ddpdoctor.core.report import Report
from ddpdoctor.events import EventTail
from ddpdoctor.registry import RegistryError, discover, select
from ddpdoctor.report.io import ReportError, load_report, save_report
from ddpdoctor.runtime.launch_plan import LaunchError, LaunchPlan, plan_launch
from ddpdoctor.runtime.progress import ProgressView

GRACE_S = 4.0


def _error(msg: str) -> None:
    """Plain text on stderr: no wrapping, no rich markup (messages contain brackets and paths)."""
    print(msg, file=sys.stderr, flush=True)



class PreflightError(Exception):
    pass


# -- pre-flight ---------------------------------------------------------------------------------------
def local_addresses() -> set[str]:
    import psutil

    out = {"127.0.0.1", "::1", "localhost", socket.gethostname()}
    for addrs in psutil.net_if_addrs().values():
        out.update(a.address.split("%")[0] for a in addrs)
    return out


def endpoint_is_local(host: str) -> bool:
    try:
        resolved = {ai[4][0] for ai in socket.getaddrinfo(host, None)}
    except socket.gaierror:
        return False
    return bool(resolved & local_addresses()) or host in local_addresses()


def port_holder(port: int) -> str:
    try:
        import psutil

        for c in psutil.net_connections(kind="tcp"):
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
                p = psutil.Process(c.pid)
                return f" by pid {c.pid} ({' '.join(p.cmdline()[:4])})"
    except Exception:
        pass
    return ""


def wait_until_resolved(plan: LaunchPlan) -> None:
    """A rendezvous host name that does not resolve is named as such, not as "unreachable". Retried
    until --rdzv-timeout: in Kubernetes a pod's DNS record may appear after the other pods start."""
    deadline = time.monotonic() + plan.rdzv_timeout_s
    while True:
        try:
            socket.getaddrinfo(plan.endpoint_host, plan.endpoint_port, type=socket.SOCK_STREAM)
            return
        except socket.gaierror as e:
            if time.monotonic() >= deadline:
                origin = plan.endpoint_origin
                what = origin if origin.startswith("the ") else f"from {origin}"
                raise PreflightError(
                    f"{socket.gethostname()} cannot resolve {plan.endpoint_host}, {what} ({e.strerror or e}, "
                    f"for {plan.rdzv_timeout_s:g} s); make the node names resolvable on every node (DNS or "
                    "/etc/hosts), or give --rdzv-endpoint ADDRESS:PORT"
                ) from None
        time.sleep(0.5)


def preflight(plan: LaunchPlan) -> None:
    wait_until_resolved(plan)
    hosting = plan.is_host if plan.is_host is not None else endpoint_is_local(plan.endpoint_host)
    if hosting and plan.is_host is not False:
        fam = socket.AF_INET6 if ":" in plan.endpoint_host else socket.AF_INET
        with socket.socket(fam, socket.SOCK_STREAM) as s:
            try:
                s.bind((plan.endpoint_host, plan.endpoint_port))
            except OSError as e:
                if e.errno == errno.EADDRINUSE and plan.is_host:
                    raise PreflightError(
                        f"rendezvous port taken: {plan.endpoint} is already in use{port_holder(plan.endpoint_port)}; "
                        "pick a free port in --rdzv-endpoint"
                    ) from None
                if e.errno == errno.EADDRNOTAVAIL:
                    raise PreflightError(
                        f"rendezvous endpoint {plan.endpoint}: {plan.endpoint_host} is not an address of this "
                        "node, but --node-rank 0 must host the rendezvous"
                    ) from None
        return
    # A joining node: the endpoint must become reachable within the rendezvous timeout.
    deadline = time.monotonic() + plan.rdzv_timeout_s
    last = "no attempt"
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((plan.endpoint_host, plan.endpoint_port), timeout=max(0.2, min(2.0, left))):
                return
        except OSError as e:
            last = e.strerror or str(e) or type(e).__name__
        if time.monotonic() >= deadline:
            raise PreflightError(
                f"rendezvous endpoint {plan.endpoint} unreachable after {plan.rdzv_timeout_s:g} s ({last}); "
                "is node 0 running `ddpdoctor check` with the same --rdzv-endpoint, and is the port open?"
            )
        time.sleep(0.5)


def source_address_towards(host: str) -> str | None:
    """The local address the kernel picks to reach host (a UDP connect sends nothing)."""
    try:
        info = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
        with socket.socket(info[0], socket.SOCK_DGRAM) as s:
            s.connect(info[4])
            return s.getsockname()[0]
    except OSError:
        return None


# -- watching the rendezvous ----------------------------------------------------------------------------
class RendezvousWatcher(threading.Thread):
    """Reads the c10d rendezvous state from the store while we wait, to say who arrived."""

    def __init__(self, plan: LaunchPlan) -> None:
        super().__init__(name="ddpdoctor-rdzv-watch", daemon=True)
        self.plan = plan
        self.stop = threading.Event()
        self.participants: list[str] = []

    def run(self) -> None:
        store = None
        key = "torch.rendezvous." + self.plan.rdzv_id
        # Start reading only if the rendezvous is slow: the store client imports torch, a second or more
        # of CPU that a quick rendezvous (the usual case) does not need, spent while the agents and
        # workers start. Half the timeout still sees who waits long before anyone gives up.
        if self.stop.wait(min(30.0, self.plan.rdzv_timeout_s / 2)):
            return
        while not self.stop.wait(0.3):
            try:
                if store is None:
                    # A plain connect first: a TCPStore client built before the server listens spends
                    # seconds in its own retries, and the rendezvous may be over by then.
                    with socket.create_connection((self.plan.endpoint_host, self.plan.endpoint_port), timeout=0.5):
                        pass
                    import torch.distributed as dist

                    store = dist.TCPStore(self.plan.endpoint_host, self.plan.endpoint_port, is_master=False,
                                          timeout=timedelta(seconds=2), wait_for_workers=False)
                if not store.check([key]):
                    continue
                state = pickle.loads(base64.b64decode(store.get(key)))
                # Union over reads: an agent that gives up removes itself from the state before exiting.
                seen = {f"{n.addr}" for n in getattr(state, "participants", {})}
                seen |= {f"{n.addr}" for n in getattr(state, "wait_list", set())}
                self.participants = sorted(set(self.participants) | seen)
            except Exception as e:
                if os.environ.get("DDPDOCTOR_DEBUG"):
                    print(f"{time.time():.1f} rendezvous watcher: {type(e).__name__}: {e}", file=sys.stderr)
                store = None


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
        backend=backend,
        rdzv_timeout_s=args.rdzv_timeout,
        launch_t0=time.time(),
        endpoint=plan.endpoint if plan else None,
        rdzv_id=plan.rdzv_id if plan else None,
    ).to_dict()


def run_check(args: argparse.Namespace, inputs: dict[str, Any]) -> int:
    """One node's run. ``args`` holds the parsed command line as plain values; ``inputs`` the checks'
    options, the profile and the recommendation options, already validated by the command."""
    out = Console()
    try:
        specs = discover(args.checks_path, kind="cluster")
        if args.select is None:
            specs = [s for s in specs if args.suite in s.suites]
        specs = select(specs, args.select, args.skip)
    except RegistryError as e:
        _error(f"ddpdoctor check: {e}")
        return 2
    if not specs:
        _error("ddpdoctor check: no checks selected")
        return 2
    if args.script and not Path(args.script).exists():
        _error(f"ddpdoctor check: --script {args.script}: no such file or folder")
        return 2
    if args.budget_scale <= 0:
        _error("ddpdoctor check: --budget-scale must be positive")
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
    except LaunchError as e:
        _error(f"ddpdoctor check: {e}")
        return 2
    nproc = plan.nproc_per_node
    codes = [s.code for s in specs]

    if args.write_config:
        cfg = build_config(args, plan, codes, backend, args.events, args.json, inputs)
        cfg["launch_t0"] = None
        Path(args.write_config).write_text(json.dumps(cfg, indent=1))
        out.print(f"wrote {args.write_config}; run on every node:\n  torchrun --nnodes N --nproc-per-node "
                  f"{nproc} --rdzv-backend c10d --rdzv-endpoint HOST:PORT -m ddpdoctor.runtime.worker "
                  f"--config {args.write_config}")
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="ddpdoctor-"))
    rc = 2
    try:
        rc = _launch(args, plan, specs, backend, inputs, outputs, out, tmp)
        return rc
    finally:
        # The run's scratch folder (config, events, torchrun's log) goes, unless the failure message
        # points into it (a launch that produced no report names its torchrun log).
        if rc != 2 or not (tmp / "torchrun.log").exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _launch(args: argparse.Namespace, plan: LaunchPlan, specs: list, backend: str, inputs: dict[str, Any],
            outputs: dict[str, str | None], out: Console, tmp: Path) -> int:
    """Start torchrun for this node with the config in ``tmp``, follow its events, print the report."""
    codes = [s.code for s in specs]
    events_path = args.events if args.events and args.events != "-" else str(tmp / "events.jsonl")
    report_path = outputs["json"] or str(tmp / "report.json")
    for p in (report_path, outputs["bad_nodes"]):
        try:
            if p:
                Path(p).unlink()
        except FileNotFoundError:
            pass
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
    log_path = tmp / "torchrun.log"
    argv = plan.torchrun_argv(["--config", str(cfg_path)])
    # Under srun only task 0 shows progress and the report; the others end with one line.
    progress = ProgressView(out, quiet=args.quiet or not plan.prints_report,
                            echo_events_to_stdout=args.events == "-")
    progress.launching(plan, backend, codes, [s.title for s in specs])
    # libtorch's C++ warnings (a store client whose server went away) would clutter our own messages.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    watcher = RendezvousWatcher(plan)
    if plan.is_host is not False:  # the node hosting the rendezvous says who arrived; the others need not
        watcher.start()
    budget_total = sum(s.budget_s * args.budget_scale + GRACE_S * 3 for s in specs)
    deadline = time.monotonic() + args.rdzv_timeout + budget_total + 30
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    tail = EventTail(events_path)
    run_ended_at = None
    timed_out = False
    try:
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
        _terminate(proc)
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
            if outputs["json"]:
                save_report(report, report_path)
    if report is None:
        _error(f"ddpdoctor check: {diagnose_failure(plan, log_path, proc.returncode, timed_out, watcher, progress)}")
        if args.verbose:
            _error(log_path.read_text(errors="replace")[-4000:])
        return 2

    if args.script:
        attach_lint(report, args.script)
        if outputs["json"]:
            save_report(report, report_path)
    if not plan.prints_report:
        out.print(follower_line(report, args, socket.gethostname()), soft_wrap=True, highlight=False)
        return report.exit_code()
    from ddpdoctor.report.render_text import print_report

    print_report(report, out, verbose=args.verbose)
    if args.json:
        out.print(f"[dim]report: {args.json}[/dim]")
    if args.junit:
        from ddpdoctor.report.render_junit import to_junit

        Path(args.junit).write_text(to_junit(report), encoding="utf-8")
    if outputs["bad_nodes"]:
        Path(outputs["bad_nodes"]).write_text(bad_nodes_text(report), encoding="utf-8")
    return report.exit_code()


def output_paths(args: argparse.Namespace, plan: LaunchPlan) -> dict[str, str | None]:
    """The files this task writes: all of them where it prints the report, none on the other Slurm
    tasks (they would race task 0 for the same paths on a shared file system). A folder that does not
    exist is an error before anything is launched."""
    wanted = {"json": args.json, "junit": args.junit, "bad_nodes": getattr(args, "bad_nodes", None)}
    for key, path in wanted.items():
        if path and not Path(path).resolve().parent.is_dir():
            raise LaunchError(f"--{key.replace('_', '-')} {path}: folder {Path(path).parent} does not exist")
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
    from ddpdoctor.lint import lint_paths

    report.lint = list(lint_paths([script]))


def _terminate(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def diagnose_failure(plan: LaunchPlan, log_path: Path, rc: int | None, timed_out: bool,
                     watcher: RendezvousWatcher, progress: ProgressView) -> str:
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    arrived = f"; arrived: {', '.join(watcher.participants)}" if watcher.participants else ""
    if "RendezvousTimeoutError" in log or (timed_out and not progress.rendezvoused):
        return (f"rendezvous timed out after {plan.rdzv_timeout_s:g} s at {plan.endpoint} waiting for "
                f"{plan.nnodes} node(s){arrived or '; no node arrived'}")
    if "Address already in use" in log or "EADDRINUSE" in log:
        return f"rendezvous port taken: {plan.endpoint} is in use"
    if "RendezvousConnectionError" in log or "RendezvousClosedError" in log:
        return f"rendezvous endpoint {plan.endpoint} unreachable or closed (torchrun: {last_error_line(log)})"
    if timed_out:
        return f"no report before the overall deadline; the run was stopped (torchrun log: {log_path})"
    return f"the launch failed (torchrun exit code {rc}): {last_error_line(log)} (log: {log_path})"


def last_error_line(log: str) -> str:
    for line in reversed(log.splitlines()):
        s = line.strip()
        if s and ("Error" in s or "error" in s) and not s.startswith("File "):
            return s[-300:]
    lines = [ln for ln in log.splitlines() if ln.strip()]
    return lines[-1][-300:] if lines else "no output"
