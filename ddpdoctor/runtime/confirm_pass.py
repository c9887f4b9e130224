"""``check --drain`` under srun: re-measure each suspect with a node that passed (a nested step of the
same allocation, ``srun --overlap``), then drain the ones condemned (model/fleet/confirm.py decides)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ddpdoctor.core.check_run import CheckRun
from ddpdoctor.core.report import Report
from ddpdoctor.model.fleet.confirm import Confirmation, decide, partners, suspect_codes
from ddpdoctor.model.nodes.bad_nodes import blamed_nodes
from ddpdoctor.report.io import ReportError, load_report
from ddpdoctor.runtime.launch_plan import DEFAULT_PORT
from ddpdoctor.runtime.slurm_drain import drain_node

# What the nested step keeps of this step's environment: the job and the config. The step's own
# SLURM_NTASKS, SLURM_NNODES, ... would override srun's -N2.
_KEEP = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CONF")


def _passthrough(run: CheckRun, nproc: int) -> list[str]:
    out = ["--nproc-per-node", str(nproc), "--backend", run.backend, "--budget-scale", str(run.budget_scale),
           "--rdzv-timeout", str(run.rdzv_timeout_s), *run.check_flags]
    for path in run.checks_path:
        out += ["--checks-path", str(Path(path).resolve())]
    return out


def remeasure(run: CheckRun, nproc: int, order: list[str], node: str, partner: str, codes: list[str],
              port: int, timeout_s: float) -> Report | None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k in _KEEP}
    first = min((node, partner), key=order.index)  # Slurm numbers a step's nodes in the job's order
    tmp = Path(tempfile.mkdtemp(prefix="ddpdoctor-confirm-"))
    argv = ["srun", "--overlap", "-N2", "--ntasks-per-node=1", f"--nodelist={node},{partner}", sys.executable,
            "-m", "ddpdoctor", "check", "--select", ",".join(codes), "--rdzv-endpoint", f"{first}:{port}",
            "--json", str(tmp / "report.json"), "--quiet", *_passthrough(run, nproc)]
    try:
        subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
        return load_report(tmp / "report.json") if (tmp / "report.json").exists() else None
    except (subprocess.TimeoutExpired, ReportError, OSError):
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def confirm_and_drain(report: Report, run: CheckRun, nproc: int, say) -> list[Confirmation]:
    suspects = blamed_nodes(report)
    if not suspects:
        return []
    good = partners(report)
    if not good:
        say(f"--drain: no node passed to measure {', '.join(suspects)} against; nothing drained")
        return []
    order = list(report.run.nodes)
    if run.confirm_delay_s:
        say(f"--drain: measuring {', '.join(suspects)} again in {run.confirm_delay_s:g} s")
        time.sleep(run.confirm_delay_s)
    out = []
    for i, node in enumerate(suspects):
        partner = good[i % len(good)]
        codes = suspect_codes(report, node) or ["P2P001"]
        second = remeasure(run, nproc, order + [n for n in (node, partner) if n not in order], node, partner,
                           codes, DEFAULT_PORT + 1 + i, timeout_s=run.rdzv_timeout_s + 240 * run.budget_scale)
        c = decide(report, second, node, partner, codes)
        say(f"--drain: {c.said}")
        if c.condemned and c.reason is not None:
            done = drain_node(node, c.reason.text())
            say(f"--drain: drained {node}: {c.reason.text()}" if done.ok else
                f"--drain: could not drain {node}: {done.message}")
        out.append(c)
    return out
