"""`ddpdoctor health`'s measurements on this node alone: the topology and environment probes
``ddpdoctor topo`` uses, then a one-node collective sanity run (COL001 through ``ddpdoctor check`` on
this node's GPUs, or 2 CPU ranks on gloo) that never meets another node: its rendezvous is a free port
on 127.0.0.1 and the job's Slurm / Kubernetes variables are withheld from it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ddpdoctor.checks.nccl001_env import _name_list_findings
from ddpdoctor.core.report import CheckResult, Finding, Severity, Status
from ddpdoctor.model.fleet.health import env_result, gloo_ifname_findings
from ddpdoctor.report.io import ReportError, load_report
from ddpdoctor.runtime.launch_plan import free_port
from ddpdoctor.runtime.topo_offline import diagnose

COLLECTIVE_CODE = "COL001"
# Variables that would make the one-node run join the job's rendezvous instead of its own.
_WITHHELD_PREFIXES = ("SLURM_", "PET_")
_WITHHELD = {"MASTER_ADDR", "MASTER_PORT", "JOB_COMPLETION_INDEX", "WORLD_SIZE", "RANK", "LOCAL_RANK"}


@dataclass
class NodeHealth:
    node: str
    checks: list[CheckResult] = field(default_factory=list)
    versions: dict = field(default_factory=dict)
    topology: dict = field(default_factory=dict)
    duration_s: float = 0.0


def probe_node(node_name: str, root: str = "/", env: dict | None = None) -> tuple[list[CheckResult], dict]:
    """The topology checks (GPU, NVLink, PCIe, NUMA, IB, GPUDirect, NCCL variables) and the socket
    interface variables, judged on this node; with the node's topology snapshot."""
    from ddpdoctor.probes.collect import collect_node

    env = dict(os.environ if env is None else env)
    node = collect_node(root=root, env=env, hostname=node_name)
    checks = diagnose([node])
    ifaces = {i.name: i.up for i in node.interfaces}
    findings = gloo_ifname_findings(env.get("GLOO_SOCKET_IFNAME"), ifaces, node_name)
    nccl = next((c for c in checks if c.code == "NCCL001"), None)
    if nccl is not None and nccl.status is Status.SKIPPED and ifaces:
        # NCCL001 judges NCCL_SOCKET_IFNAME only where NCCL can run; a node without GPUs still
        # should not carry a name it lacks (the same job's environment reaches its GPU nodes).
        findings += _name_list_findings(node, "NCCL_SOCKET_IFNAME", ifaces, "interface", "ENV001")
    return [env_result(findings), *checks], node.to_dict()


def collective_run(timeout_s: float, env: dict | None = None) -> tuple[CheckResult, dict]:
    """COL001 on this node alone, through ``ddpdoctor check`` in a subprocess; its result and the
    versions it saw. A run that does not finish or produces no report is a COL001 failure."""
    env = {k: v for k, v in (os.environ if env is None else env).items()
           if not k.startswith(_WITHHELD_PREFIXES) and k not in _WITHHELD}
    tmp = Path(tempfile.mkdtemp(prefix="ddpdoctor-health-"))
    report_path = tmp / "report.json"
    argv = [sys.executable, "-m", "ddpdoctor", "check", "--nodes", "1", "--node-rank", "0",
            "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-timeout", str(max(5, int(timeout_s / 3))),
            "--select", COLLECTIVE_CODE, "--json", str(report_path), "--quiet"]
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False,
                           start_new_session=True)
        out = (p.stderr or "") + (p.stdout or "")
        try:
            rep = load_report(report_path) if report_path.exists() else None
        except ReportError:
            rep = None
        col = rep.check(COLLECTIVE_CODE) if rep else None
        if col is not None:
            return col, dict(rep.versions)
        last = next((ln.strip() for ln in reversed(out.splitlines()) if ln.strip()), f"exit {p.returncode}")
        return _failed(f"the one-node collective run produced no result: {last[-200:]}",
                       Status.ERROR, time.monotonic() - t0), {}
    except subprocess.TimeoutExpired:
        return _failed(f"the one-node collective run did not finish in {timeout_s:g} s", Status.TIMED_OUT,
                       time.monotonic() - t0), {}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _failed(message: str, status: Status, duration: float) -> CheckResult:
    f = Finding(COLLECTIVE_CODE, Severity.ERROR, message)
    return CheckResult(code=COLLECTIVE_CODE, title="Collective correctness", status=status, summary=message,
                       duration_s=duration, findings=[f])


def check_node(node_name: str, collective: bool = True, timeout_s: float = 40.0, root: str = "/") -> NodeHealth:
    t0 = time.monotonic()
    checks, topology = probe_node(node_name, root=root)
    health = NodeHealth(node=node_name, checks=checks, topology=topology)
    if collective and any(c.status.failing for c in checks):
        # The node is already known bad; a collective run would only fail on the same cause, slowly.
        health.checks.append(CheckResult(code=COLLECTIVE_CODE, title="Collective correctness",
                                         status=Status.SKIPPED, summary="skipped: an earlier check failed"))
    elif collective:
        col, versions = collective_run(max(5.0, timeout_s - (time.monotonic() - t0)))
        health.checks.append(col)
        health.versions = versions
    health.duration_s = time.monotonic() - t0
    return health
