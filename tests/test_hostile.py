"""Issue 24's hostile table: bad inputs, bad flags, bad output paths and signals for every command.

Each case runs the real CLI in a subprocess under a timeout, with a private TMPDIR, a private working
folder and a marker in its environment, and asserts: the documented exit code, no traceback, a message
naming the path or flag, nothing of ours left running, no temp folder left, and no file touched
outside the named output. The `check` cases that need a real torchrun (signals, a report kept when
its output fails) are few and grouped at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
from helpers import REPO

SAMPLE = REPO / "tests" / "tui" / "data" / "report_2x2_gloo.json"
TIMEOUT_S = float(os.environ.get("DDPD_HOSTILE_TIMEOUT_S", "60"))  # a hang is a failure


def _ours(token: str) -> list[psutil.Process]:
    """Processes still running with our marker in their environment."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("DDPD_HOSTILE") == token:
                found.append(p)
        except psutil.Error:
            pass
    return found


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Bed:
    """A private working folder and TMPDIR; runs the CLI there and checks what it left."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.work = root / "work"
        self.tmp = root / "tmp"
        self.inputs = root / "in"
        for d in (self.work, self.tmp, self.inputs):
            d.mkdir()
        self.token = uuid.uuid4().hex

    def env(self) -> dict[str, str]:
        return {**os.environ, "TMPDIR": str(self.tmp), "DDPD_HOSTILE": self.token, "COLUMNS": "100"}

    def snapshot(self) -> dict[str, tuple]:
        out = {}
        for base in (self.work, self.inputs):
            for p in base.rglob("*"):
                st = os.lstat(p)
                out[str(p)] = (st.st_mode, st.st_size, st.st_mtime_ns)
        return out

    def popen(self, *argv: str) -> subprocess.Popen:
        # Ctrl-C as a user sends it: a test run started in the background (`cmd &` in a script)
        # inherits SIGINT ignored, and Python keeps an ignored SIGINT ignored
        return subprocess.Popen([sys.executable, "-m", "ddpdoctor", *argv], cwd=self.work, env=self.env(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, preexec_fn=_sigint_default)

    def run(self, *argv: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
        p = self.popen(*argv)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            pytest.fail(f"ddpdoctor {' '.join(argv)} did not end within {timeout} s (a hang)\n{err[-2000:]}")
        return subprocess.CompletedProcess(argv, p.returncode, out, err)

    def left_behind(self, kept: list[str] = ()) -> list[str]:
        """Temp files or folders left in TMPDIR (other than files the message says it kept)."""
        return sorted(str(p) for p in self.tmp.iterdir() if str(p) not in kept)

    def still_running(self) -> list[str]:
        deadline = time.monotonic() + 10
        while (procs := _ours(self.token)) and time.monotonic() < deadline:
            time.sleep(0.2)
        return [" ".join(p.cmdline()[:6]) for p in procs if p.is_running()]


@pytest.fixture
def bed(tmp_path):
    b = Bed(tmp_path)
    yield b
    for p in _ours(b.token):  # never leave anything behind, even when a case fails
        try:
            p.kill()
        except psutil.Error:
            pass


def _inputs(bed: Bed) -> dict[str, str]:
    """Hostile input files, by name."""
    d = bed.inputs
    fifo = d / "fifo.json"
    os.mkfifo(fifo)
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "bigint.json").write_text('{"schema_version": ' + "9" * 5000 + "}")
    (d / "folder").mkdir()
    for name, make in (("hang_fifo", os.mkfifo), ("hang_deep", None), ("hang_bigint", None)):
        (d / name).mkdir()
        f = d / name / "rank-0.json"  # a name `hang` reads as evidence
        if make:
            make(f)
        else:
            f.write_text((d / f"{name[5:]}.json").read_text())
    (d / "empty").mkdir()
    (d / "lintfifo").mkdir()
    os.mkfifo(d / "lintfifo" / "x.py")
    (d / "lintfifo" / "ok.py").write_text("import torch.distributed as dist\n")
    (d / "checkfifo").mkdir()
    os.mkfifo(d / "checkfifo" / "c.py")
    (d / "random").mkdir()
    (d / "random" / "r.py").write_bytes(bytes(range(256)) * 16)
    (d / "utf16").mkdir()
    (d / "utf16" / "u.py").write_bytes("import torch.distributed as dist\ndist.barrier()\n".encode("utf-16"))
    (d / "bigint.yaml").write_text("name: x\npriority: " + "9" * 5000 + "\n")
    report = json.loads(SAMPLE.read_text())
    report["checks"][0]["title"] = "a [/red] b"
    report["checks"][0]["summary"] = "[enforce fail] x"
    (d / "markup.json").write_text(json.dumps(report))
    report = json.loads(SAMPLE.read_text())
    report["run"]["world_size"] = 10**9
    (d / "huge_world.json").write_text(json.dumps(report))
    (d / "target.txt").write_text("someone's file\n")
    # A device of our own to write to: a test that fails must not replace the machine's /dev/full
    # (the code before issue 24 did exactly that). Root makes a char device like /dev/full; others a FIFO.
    try:
        os.mknod(d / "device", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except PermissionError:
        os.mkfifo(d / "device")
    os.symlink(d / "target.txt", d / "link.json")
    return {p.name: str(p) for p in d.iterdir()} | {
        f"{p.name}/rank-0.json": str(p / "rank-0.json") for p in d.glob("hang_*")} | {"missing_dir": str(d / "no" / "such" / "x.json")}


def _fill(text: str, files: dict[str, str]) -> str:
    return re.sub(r"\{([^{}]+)\}", lambda m: files[m.group(1)], text)


# (case id, argv with {name} placeholders for _inputs, exit code, words the message must hold)
TABLE = [
    # input files: not regular, too deep, too long a number
    ("report-fifo", ["report", "show", "{fifo.json}"], 2, ["fifo.json", "FIFO"]),
    ("report-devzero", ["report", "show", "/dev/zero"], 2, ["/dev/zero", "character device"]),
    ("report-folder", ["report", "json", "{folder}"], 2, ["folder", "a folder"]),
    ("report-deep", ["report", "show", "{deep.json}"], 2, ["deep.json", "nested too deeply"]),
    ("report-bigint", ["report", "show", "{bigint.json}"], 2, ["bigint.json", "4,300"]),
    ("recommend-fifo", ["recommend", "{fifo.json}"], 2, ["fifo.json", "FIFO"]),
    ("recommend-bigint", ["recommend", "{bigint.json}"], 2, ["bigint.json", "4,300"]),
    ("recommend-spec-fifo", ["recommend", str(SAMPLE), "--model-spec", "{fifo.json}"], 2, ["--model-spec", "FIFO"]),
    ("import-fifo", ["import", "{fifo.json}"], 2, ["fifo.json", "FIFO"]),
    ("import-devzero", ["import", "/dev/zero"], 2, ["/dev/zero", "character device"]),
    ("profiles-fifo", ["profiles", "validate", "{fifo.json}"], 2, ["fifo.json", "FIFO"]),
    ("profiles-bigint", ["profiles", "validate", "{bigint.yaml}"], 2, ["bigint.yaml"]),
    ("hang-fifo", ["hang", "{hang_fifo/rank-0.json}"], 2, ["rank-0.json", "FIFO"]),
    ("hang-deep", ["hang", "{hang_deep/rank-0.json}"], 2, ["rank-0.json", "nested too deeply"]),
    ("hang-bigint", ["hang", "{hang_bigint/rank-0.json}"], 2, ["rank-0.json", "4,300"]),
    ("hang-deep-folder", ["hang", "{hang_deep}"], 2, ["rank-0.json", "nested too deeply"]),
    ("tui-fifo", ["tui", "{fifo.json}"], 2, ["fifo.json", "FIFO"]),
    ("tui-deep", ["tui", "{deep.json}"], 2, ["deep.json", "nested too deeply"]),
    ("tui-bigint", ["tui", "{bigint.json}"], 2, ["bigint.json", "4,300"]),
    ("topo-fifo", ["topo", "--from", "{fifo.json}"], 2, ["fifo.json", "FIFO"]),
    ("topo-smi-fifo", ["topo", "--nvidia-smi-topo", "{fifo.json}"], 2, ["fifo.json", "FIFO"]),
    # lint: never "All checks passed!" on what it did not read; a FIFO never blocks
    ("lint-empty", ["lint", "--no-cache", "{empty}"], 2, ["empty", "no Python files"]),
    ("lint-fifo-folder", ["lint", "--no-cache", "{lintfifo}"], 1, ["x.py", "FIFO"]),
    ("lint-fifo-file", ["lint", "--no-cache", "{fifo.json}"], 2, ["fifo.json", "FIFO"]),
    ("lint-random", ["lint", "--no-cache", "{random}"], 1, ["r.py", "NUL bytes"]),
    ("lint-utf16", ["lint", "--no-cache", "{utf16}"], 1, ["u.py", "UTF-16"]),
    # output paths: checked before any work, never a device, a link, a folder or a new folder
    ("recommend-json-device", ["recommend", str(SAMPLE), "--json", "{device}"], 2, ["--json {device}", "not a regular file"]),
    ("recommend-json-procfd", ["recommend", str(SAMPLE), "--json", "/proc/self/fd/1"], 2, ["/proc/self/fd/1", "link"]),
    ("recommend-json-symlink", ["recommend", str(SAMPLE), "--json", "{link.json}"], 2, ["link.json", "symbolic link"]),
    ("recommend-json-nodir", ["recommend", str(SAMPLE), "--json", "{missing_dir}"], 2, ["--json", "does not exist"]),
    ("recommend-json-folder", ["recommend", str(SAMPLE), "--json", "{folder}"], 2, ["--json", "is a folder"]),
    ("import-json-device", ["import", str(SAMPLE), "--json", "{device}"], 2, ["--json {device}"]),
    ("hang-json-folder", ["hang", "{folder}", "--json", "{folder}"], 2, ["--json", "is a folder"]),
    ("watch-json-nodir", ["watch", "--json", "{missing_dir}", "--", "true"], 2, ["--json", "does not exist"]),
    ("check-json-folder", ["check", "--json", "{folder}"], 2, ["--json", "is a folder"]),
    ("check-junit-device", ["check", "--junit", "{device}"], 2, ["--junit {device}", "not a regular file"]),
    ("check-badnodes-procfd", ["check", "--bad-nodes", "/proc/self/fd/1"], 2, ["--bad-nodes", "link"]),
    ("check-events-nodir", ["check", "--events", "{missing_dir}"], 2, ["--events", "does not exist"]),
    ("check-writeconfig-symlink", ["check", "--write-config", "{link.json}"], 2, ["--write-config", "symbolic link"]),
    ("check-same-output", ["check", "--json", "{target.txt}", "--junit", "{target.txt}"], 2, ["--junit", "same file"]),
    # flags: the same validation in every command that takes them, the TUI before its app starts
    ("tui-nodes-0", ["tui", "--nodes", "0"], 2, ["--nodes", "at least 1"]),
    ("tui-nodes-neg", ["tui", "--nodes", "-1"], 2, ["--nodes"]),
    ("tui-nodes-range", ["tui", "--nodes", "1:2"], 2, ["--nodes", "whole number"]),
    ("tui-nproc-0", ["tui", "--nproc-per-node", "0"], 2, ["--nproc-per-node", "at least 1"]),
    ("tui-timeout-nan", ["tui", "--run-timeout", "nan"], 2, ["--run-timeout", "positive"]),
    ("tui-readme-example", ["tui", "--nodes", "2", "--select", "P2P", "--", "--max-size", "64M"], 2,
     ["--nodes 2", "--rdzv-endpoint"]),
    ("tui-passthrough-bad", ["tui", "--", "--max-size", "64Q"], 2, ["--max-size", "64Q"]),
    ("tui-passthrough-output", ["tui", "--", "--json", "{device}"], 2, ["--json {device}"]),
    ("check-nodes-0", ["check", "--nodes", "0"], 2, ["--nodes", "at least 1"]),
    ("check-rdzv-timeout-nan", ["check", "--rdzv-timeout", "nan"], 2, ["--rdzv-timeout"]),
    ("check-script-fifo", ["check", "--script", "{fifo.json}"], 2, ["--script", "not a regular file"]),
    ("check-checks-path-fifo", ["check", "--checks-path", "{checkfifo}"], 2, ["c.py", "FIFO"]),
    ("check-local-addr", ["check", "--local-addr", "999.1.1.1", "--select", "ENV001"], 2, ["--local-addr 999.1.1.1"]),
    ("watch-hang-after-nan", ["watch", "--hang-after", "nan", "--", "true"], 2, ["--hang-after"]),
]


@pytest.mark.parametrize("case, argv, code, words", TABLE, ids=[c[0] for c in TABLE])
def test_hostile_input(bed, case, argv, code, words):
    files = _inputs(bed)
    argv = [_fill(a, files) for a in argv]
    before = bed.snapshot()
    got = bed.run(*argv)
    text = got.stdout + got.stderr
    assert got.returncode == code, f"{case}: exit {got.returncode}, want {code}\n{text[-3000:]}"
    assert "Traceback" not in text, text[-3000:]
    for w in words:
        assert _fill(w, files) in got.stderr + got.stdout, f"{case}: {w!r} not said\n{text[-2000:]}"
    assert bed.still_running() == []
    assert bed.left_behind() == []
    after = bed.snapshot()
    assert after == before, f"{case}: files changed: {set(after.items()) ^ set(before.items())}"
    assert not stat.S_ISREG(os.lstat(files["device"]).st_mode)  # never replaced by a regular file
    assert Path(files["target.txt"]).read_text() == "someone's file\n"
    assert not Path(files["missing_dir"]).parent.exists()  # no folder created


def test_markup_in_data_is_shown_as_written(bed):
    files = _inputs(bed)
    got = bed.run("report", "show", files["markup.json"])
    assert "Traceback" not in got.stderr and got.returncode in (0, 1), got.stderr
    assert "a [/red] b" in got.stdout and "[enforce fail] x" in got.stdout
    # not a terminal: plain text, ASCII boxes, no escape codes
    assert "\x1b[" not in got.stdout and not any(c in got.stdout for c in "─━│┃╭")


def test_a_huge_world_size_is_bounded_in_the_tui_state():
    from ddpdoctor.report.io import load_report
    from ddpdoctor.run_state import MAX_RANK_SLOTS
    from ddpdoctor.tui.livestate import state_from_report

    report = load_report(SAMPLE)
    report.run.world_size = 10**9
    state = state_from_report(report)
    assert len(state.ranks) <= MAX_RANK_SLOTS


# -- real `ddpdoctor check` runs: a few -----------------------------------------------------------------
def _descendants_started(proc: subprocess.Popen, want: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if len(psutil.Process(proc.pid).children(recursive=True)) >= want:
                return True
        except psutil.Error:
            return False
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["TERM", "HUP", "INT"])
def test_a_signal_ends_check_and_everything_it_started(bed, sig):
    proc = bed.popen("check", "--select", "ENV001,BW001", "--nproc-per-node", "2", "--json",
                     str(bed.work / "r.json"))
    try:
        # torchrun and its two ranks (and their children) exist: the interesting moment
        assert _descendants_started(proc, 3, 120), "torchrun never started its ranks"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, err[-3000:]
    assert "interrupted" in err and "Traceback" not in out + err, err[-3000:]
    assert bed.still_running() == []
    assert bed.left_behind() == []  # no ddpdoctor-* and no torchelastic_* folder


def test_check_keeps_the_report_when_its_output_fails(bed):
    """The --json path is fine when the run starts and a folder when it ends: the report is printed,
    kept in a temp file that the message names, and the exit code is 2."""
    target = bed.work / "report.json"
    proc = bed.popen("check", "--select", "ENV001", "--json", str(target), "--junit", str(bed.work / "j.xml"))
    try:
        # the outputs are checked before torchrun starts: once it runs, the check passed (a fixed
        # sleep did not wait for that under load: the interpreter's start-up alone took 2-5 s)
        assert _descendants_started(proc, 1, 120), "check never started torchrun"
        target.mkdir()  # the output path turns into a folder during the run
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, out[-2000:] + err[-3000:]
    assert "Traceback" not in out + err
    assert "ENV001" in out  # the report was printed
    line = next(ln for ln in err.splitlines() if ln.startswith("ddpdoctor check: --json"))
    assert str(target) in line and "kept in " in line
    kept = line.split("kept in ", 1)[1].strip()
    assert json.loads(Path(kept).read_text())["checks"][0]["code"] == "ENV001"
    assert (bed.work / "j.xml").is_file()  # the other outputs are still written
    assert bed.still_running() == []
    assert bed.left_behind(kept=[kept]) == []  # torchrun's torchelastic_* folder too


def test_a_taken_rendezvous_port_is_named(bed):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        got = bed.run("check", "--select", "ENV001", "--rdzv-endpoint", f"127.0.0.1:{port}", timeout=120)
    assert got.returncode == 2 and "rendezvous port taken" in got.stderr and str(port) in got.stderr, got.stderr
    assert "Traceback" not in got.stderr
    assert bed.still_running() == [] and bed.left_behind() == []


@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux `script` for a terminal")
def test_sigterm_ends_the_tui_and_its_live_run(bed):
    """The app on a terminal (util-linux `script` gives it one), a live run going: SIGTERM ends the
    check it started, removes its temp folder, and exits 143."""
    fake = REPO / "tests" / "tui" / "data" / "fake_check.py"
    inner = f"{sys.executable} -m ddpdoctor tui --check-cmd '{sys.executable} {fake} --hang'"
    outer = subprocess.Popen(["script", "-qec", inner, "/dev/null"], cwd=bed.work, env=bed.env(),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        tui = check = None
        while time.monotonic() < deadline and check is None:
            for p in _ours(bed.token):
                cmd = " ".join(p.cmdline())
                if "ddpdoctor tui" in cmd and "script" not in cmd:
                    tui = p
                if "fake_check.py --hang --events" in cmd:
                    check = p
            time.sleep(0.3)
        assert tui is not None and check is not None, "the TUI never started its live run"
        tui.send_signal(signal.SIGTERM)
        out, _ = outer.communicate(timeout=60)
    finally:
        if outer.poll() is None:
            outer.kill()
    assert b"interrupted (SIGTERM)" in out and b"Traceback" not in out
    assert outer.returncode == 143
    assert bed.still_running() == []
    assert bed.left_behind() == []
