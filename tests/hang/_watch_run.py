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
            str(SCRIPTS / script)]


def watch(tmp: Path, job: list[str], hang_after: float = 3, env: dict | None = None, timeout: float = 120,
          extra: tuple = ()) -> Run:
    dumps, js = tmp / "dumps", tmp / "diag.json"
    argv = [sys.executable, "-m", "ddpdoctor", "watch", "--hang-after", str(hang_after), "--dumps", str(dumps),
            "--json", str(js), *extra, "--", *job]
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    diag = json.loads(js.read_text()) if js.exists() else None
    return Run(p.returncode, p.stdout + p.stderr, diag, dumps, time.monotonic() - t0)


def leftovers(dumps: Path) -> list[str]:
    """Processes still alive that `watch` started for this run (any depth, even reparented)."""
    mine = [f"{c.pid} {' '.join(c.cmdline()[:4])}" for c in psutil.Process().children(recursive=True)
            if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
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
