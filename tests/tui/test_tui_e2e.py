"""The real app in a pseudo-terminal (80×24): what a user sees, escape codes and all.

The first test drives live mode with the fake check; the second runs the real `ddpdoctor check` on
gloo (point-to-point matrix only) and finds the heatmap.
"""

from __future__ import annotations

import os
import re
import sys
import time

import pytest

from .helpers import FAKE_CHECK

pexpect = pytest.importorskip("pexpect", reason="pexpect (dev extra) drives the pseudo-terminal")

ANSI = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>78]|\x1b\][^\x07]*\x07")


class Terminal:
    """The app in a pty; ``wait_for`` searches everything it has drawn, escape codes stripped."""

    def __init__(self, args: list[str], cwd: str | None = None) -> None:
        env = dict(os.environ, TERM="xterm-256color", COLUMNS="80", LINES="24", PYTHONUNBUFFERED="1")
        env.pop("TEXTUAL", None)
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "ddpdoctor", "tui", *args],
            env=env,
            cwd=cwd,
            dimensions=(24, 80),
            encoding="utf-8",
            codec_errors="replace",
            timeout=5,
        )
        self.raw = ""

    @property
    def text(self) -> str:
        return ANSI.sub("", self.raw)

    def wait_for(self, needle: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while needle not in self.text:
            if time.monotonic() > end:
                raise AssertionError(
                    f"{needle!r} not on screen after {timeout}s; last output:\n{self.text[-2000:]}"
                )
            try:
                self.raw += self.child.read_nonblocking(65536, timeout=0.2)
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                raise AssertionError(f"app exited before {needle!r}:\n{self.text[-2000:]}") from None

    def mark(self) -> None:
        """Forget what was drawn so far: later waits see only new output."""
        self.raw = ""

    def quit(self, timeout: float = 15) -> int:
        self.child.send("q")
        self.child.expect(pexpect.EOF, timeout=timeout)
        self.child.close()
        return self.child.exitstatus

    def kill(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


@pytest.mark.timeout(90)
def test_live_app_in_a_pty_with_the_fake_check(tmp_path):
    term = Terminal(
        ["--check-cmd", f"{sys.executable} {FAKE_CHECK} --delay 0.05", "--workdir", str(tmp_path)]
    )
    try:
        term.wait_for("verdict: FAILED", timeout=60)  # the run streamed, ended and its report loaded
        term.mark()
        term.child.send("2")
        term.wait_for("P2P bandwidth heatmap", timeout=10)
        term.wait_for("0.03!", timeout=10)  # the outlier cell, marked
        assert term.quit() == 1  # the sample run has a failed check
    finally:
        term.kill()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_real_check_on_gloo_shows_the_heatmap(tmp_path):
    term = Terminal(
        ["--nproc-per-node", "2", "--backend", "gloo", "--select", "P2P", "--workdir", str(tmp_path)]
    )
    try:
        term.wait_for("verdict:", timeout=240)
        term.mark()
        term.child.send("2")
        term.wait_for("row = sender, column = receiver", timeout=20)  # only drawn with a matrix
        term.quit()
    finally:
        term.kill()
