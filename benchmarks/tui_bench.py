"""How quickly `ddpdoctor tui` paints and answers keys, in a real pseudo-terminal (80×24).

    python benchmarks/tui_bench.py [--runs 5]

1. Time to first paint: from spawning `python -m ddpdoctor tui REPORT.json` to the verdict line on
   screen (Python start-up and imports included). Target ≤ 1 s.
2. Responsiveness during a live run: the fake check streams events every few ms while we switch
   views; each figure is key sent → the new view's words on screen.

Prints figures; asserts nothing (timings belong here, not in the unit tests).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pexpect

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "tui" / "data"
ANSI = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>78]|\x1b\][^\x07]*\x07")


def spawn(args: list[str]) -> pexpect.spawn:
    env = dict(os.environ, TERM="xterm-256color", PYTHONUNBUFFERED="1")
    return pexpect.spawn(
        sys.executable,
        ["-m", "ddpdoctor", "tui", *args],
        env=env,
        cwd=str(ROOT),
        dimensions=(24, 80),
        encoding="utf-8",
        codec_errors="replace",
    )


def wait_text(child: pexpect.spawn, needle: str, timeout: float) -> float:
    """Seconds until ``needle`` is drawn (escape codes stripped), reading only new output."""
    t0, raw = time.perf_counter(), ""
    while needle not in ANSI.sub("", raw):
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"{needle!r} not drawn within {timeout}s")
        try:
            raw += child.read_nonblocking(65536, timeout=0.01)
        except pexpect.TIMEOUT:
            pass
    return time.perf_counter() - t0


def drain(child: pexpect.spawn) -> None:
    try:
        while True:
            child.read_nonblocking(65536, timeout=0.05)
    except pexpect.TIMEOUT:
        pass


def close(child: pexpect.spawn) -> None:
    child.send("q")
    try:
        child.expect(pexpect.EOF, timeout=10)
    except pexpect.TIMEOUT:
        child.terminate(force=True)


def first_paint(runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        child = spawn([str(DATA / "report_2x2_gloo.json")])
        wait_text(child, "verdict: FAILED", timeout=30)
        out.append(time.perf_counter() - t0)
        close(child)
    return out


def live_latency(presses: int) -> tuple[list[float], int]:
    # ~5 checks × 400 progress events × 5 ms: the check streams for ~10 s while we press keys
    work = tempfile.mkdtemp(prefix="ddpdoctor-bench-")
    cmd = f"{sys.executable} {DATA / 'fake_check.py'} --delay 0.005 --progress 400"
    child = spawn(["--check-cmd", cmd, "--workdir", work])
    wait_text(child, "… running", timeout=30)
    targets = [("2", "P2P bandwidth heatmap"), ("6", "Location"), ("5", "Recommendation"), ("1", "Summary")]
    out = []
    for k in range(presses):
        key, needle = targets[k % len(targets)]
        drain(child)
        t0 = time.perf_counter()
        child.send(key)
        wait_text(child, needle, timeout=10)
        out.append(time.perf_counter() - t0)
    lines = len((Path(work) / "events.jsonl").read_text().splitlines())
    close(child)
    return out, lines


def describe(name: str, xs: list[float], target: float | None = None) -> None:
    ms = sorted(x * 1000 for x in xs)
    verdict = ""
    if target is not None:
        med_ok = statistics.median(ms) <= target * 1000
        verdict = f"  (target ≤ {target * 1000:.0f} ms: median {'met' if med_ok else 'NOT met'}"
        verdict += f", {sum(m <= target * 1000 for m in ms)}/{len(ms)} runs within)"
    print(
        f"{name}: median {statistics.median(ms):.0f} ms, min {ms[0]:.0f} ms, max {ms[-1]:.0f} ms, n={len(ms)}{verdict}"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--presses", type=int, default=12)
    args = p.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    describe("time to first paint (spawn → verdict drawn, saved report)", first_paint(args.runs), 1.0)
    lat, events = live_latency(args.presses)
    describe(f"key → view drawn while the check streams ({events} events so far)", lat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
