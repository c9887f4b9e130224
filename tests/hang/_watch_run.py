"""Running `ddpdoctor watch` around torchrun on a test script, and what tests assert afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

SCRIPTS = Path(__file__).resolve().parent / "scripts"


@dataclass
class Run:
    rc: int
    out: str
    diag: dict | None
    dumps: Path
    seconds: float

    def rank(self, r: int) -> dict:
        return next(x for x in self.diag["ranks"] if x["rank"] == r)


def torchrun(script: str, nproc: int, launcher: str = "torchrun") -> list[str]:
    head = [sys.executable, "-m", "torch.distributed.run"] if launcher == "module" else ["torchrun"]
    return [*head, "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0",
            str(SCRIPTS / script)]  # fmt: skip


def watch_argv(hang_after: float, dumps: Path, diag: Path, job: list[str], extra: tuple = ()) -> list[str]:
    return [sys.executable, "-m", "ddpdoctor", "watch", "--hang-after", str(hang_after),
            "--dumps", str(dumps), "--json", str(diag), *extra, "--", *job]  # fmt: skip


def job_env(env: dict | None = None) -> dict:
    """The environment for a watched job: `torchrun` is the one beside this interpreter (an unactivated
    venv's `python -m pytest` has no torchrun on PATH), then the test's own variables."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, **(env or {})}


def watch(tmp: Path, job: list[str], hang_after: float = 3, env: dict | None = None, timeout: float = 120,
          extra: tuple = ()) -> Run:  # fmt: skip
    dumps, js = tmp / "dumps", tmp / "diag.json"
    t0 = time.monotonic()
    p = subprocess.run(watch_argv(hang_after, dumps, js, job, extra), capture_output=True, text=True,
                       timeout=timeout, env=job_env(env))  # fmt: skip
    diag = json.loads(js.read_text()) if js.exists() else None
    return Run(p.returncode, p.stdout + p.stderr, diag, dumps, time.monotonic() - t0)


def leftovers(dumps: Path) -> list[str]:
    """Processes still alive that `watch` started for this run (any depth, even reparented)."""
    mine = [
        f"{c.pid} {' '.join(c.cmdline()[:4])}"
        for c in psutil.Process().children(recursive=True)
        if c.is_running() and c.status() != psutil.STATUS_ZOMBIE
    ]
    target = str(dumps.resolve())
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get("DDPDOCTOR_WATCH_DUMPS") == target:
                mine.append(f"{p.pid} {' '.join(p.cmdline()[:4])}")
        except psutil.Error:
            pass
    return mine


def location(run: Run, r: int) -> str:
    """rank r's location as path:line relative to the scripts folder."""
    loc = run.rank(r)["location"]
    path, line = loc.rsplit(":", 1)
    return f"{Path(path).name}:{line}"


def watch_nodes(bed, tmp: Path, script: str, hang_after: float = 3, env: dict | None = None,
                timeout: float = 150, extra: tuple = ()) -> list[Run]:  # fmt: skip
    """`ddpdoctor watch -- torchrun ...` on every node of a NetBed at once, one rank per node, node 0
    hosting the rendezvous; node i's evidence in tmp/dumps{i}, its diagnosis in tmp/diag{i}.json."""
    ep = f"{bed.addr(0)}:29400"
    procs, t0 = [], time.monotonic()
    for i in range(bed.nodes):
        job = ["torchrun", "--nnodes", str(bed.nodes), "--nproc-per-node", "1", "--rdzv-backend", "c10d",
               "--rdzv-endpoint", ep, "--rdzv-conf", f"is_host={'true' if i == 0 else 'false'}",
               "--local-addr", bed.addr(i), "--max-restarts", "0", str(SCRIPTS / script)]  # fmt: skip
        argv = watch_argv(hang_after, tmp / f"dumps{i}", tmp / f"diag{i}.json", job, extra)
        procs.append(bed.popen(i, argv, env=job_env(env), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True))  # fmt: skip
    runs = []
    try:
        for i, p in enumerate(procs):
            out = p.communicate(timeout=max(1.0, t0 + timeout - time.monotonic()))[0]
            js = tmp / f"diag{i}.json"
            diag = json.loads(js.read_text()) if js.exists() else None
            runs.append(Run(p.returncode, out, diag, tmp / f"dumps{i}", time.monotonic() - t0))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return runs
