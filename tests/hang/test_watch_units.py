"""`ddpdoctor watch` without torchrun: the pure hang test, the job's environment, the command line,
exit codes passed through, the sitecustomize chain, an interrupt ending the whole tree."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil

from ddpdoctor.model.hang.pending import (
    ProgressTracker,
    StackWaitTracker,
    c10d_wait,
    oldest_pending,
    poll_interval,
)
from ddpdoctor.runtime.rank_agent import should_activate
from ddpdoctor.runtime.watch_session import SITE_DIR, job_environment

S = 1_000_000_000


def _entry(seq, t, retired=False, state="scheduled", p2p=False, name="gloo:all_reduce"):
    return {
        "collective_seq_id": 0 if p2p else seq,
        "p2p_seq_id": seq if p2p else 0,
        "is_p2p": p2p,
        "profiling_name": name,
        "time_created_ns": t,
        "retired": retired,
        "state": state,
    }


def test_oldest_unretired_entry_is_the_wait():
    entries = [_entry(1, 10 * S, retired=True), _entry(2, 20 * S), _entry(3, 30 * S, name="gloo:barrier")]
    p = oldest_pending(entries)
    assert (p.operation, p.seq, p.is_p2p, p.since_ns) == ("gloo:all_reduce", 2, False, 20 * S)
    assert p.waiting_s(25 * S) == 5.0


def test_nothing_pending_when_all_retired_or_completed():
    assert oldest_pending([_entry(1, S, retired=True), _entry(2, 2 * S, state="completed")]) is None
    assert oldest_pending([]) is None


def test_p2p_entry_uses_its_own_sequence_number():
    p = oldest_pending([_entry(7, S, p2p=True, name="nccl:send 0->1")])
    assert (p.seq, p.is_p2p) == (7, True)


def test_progress_tracker_measures_a_stall_and_resets_on_progress():
    t = ProgressTracker()
    busy = {"0": {"last_enqueued_collective": "5", "last_completed_collective": "4"}}
    assert t.stalled_s(busy, 0) == 0
    assert t.stalled_s(busy, 4 * S) == 4.0
    moved = {"0": {"last_enqueued_collective": "6", "last_completed_collective": "5"}}
    assert t.stalled_s(moved, 5 * S) == 0  # completed one more: a new wait starts
    idle = {"0": {"last_enqueued_collective": "6", "last_completed_collective": "6"}}
    assert t.stalled_s(idle, 9 * S) == 0  # nothing enqueued: computing, not waiting


def test_stack_wait_names_the_outermost_c10d_call_and_times_an_unmoving_frame():
    stack = [
        ("/w/train.py", "main"),
        ("/t/torch/distributed/c10d_logger.py", "wrapper"),
        ("/t/torch/distributed/distributed_c10d.py", "send"),
        ("/t/torch/distributed/distributed_c10d.py", "wait"),
    ]
    assert c10d_wait(stack) == "send"
    assert c10d_wait([("/w/train.py", "main")]) is None
    tr = StackWaitTracker()
    assert tr.update(("f", 7), "send", 1 * S).since_ns == 1 * S
    assert tr.update(("f", 7), "send", 9 * S).waiting_s(9 * S) == 8.0
    assert tr.update(("f", 8), "send", 10 * S).waiting_s(10 * S) == 0  # it moved: a new call
    assert tr.update(None, None, 11 * S) is None


def test_poll_interval_bounds():
    assert poll_interval(300) == 0.5 and poll_interval(3) == 0.3 and poll_interval(0.1) == 0.25


def test_agent_only_in_ranks():
    base = {"DDPDOCTOR_WATCH_RUN": "/r", "DDPDOCTOR_WATCH_DUMPS": "/d"}
    assert should_activate({**base, "RANK": "0"}, ["train.py"])
    assert should_activate({**base, "SLURM_PROCID": "3"}, ["train.py"])
    assert not should_activate(base, ["torchrun"])  # the launcher itself
    assert not should_activate({"RANK": "0"}, ["train.py"])  # not under watch
    spawn = ["-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)"]
    assert not should_activate({**base, "RANK": "0"}, spawn)  # a DataLoader worker


def test_job_environment_adds_ours_and_keeps_the_users(tmp_path):
    env = job_environment(
        {"PYTHONPATH": "/mine", "TORCH_FR_BUFFER_SIZE": "50"}, tmp_path / "run", tmp_path / "dumps", 7
    )
    assert env["PYTHONPATH"] == f"{SITE_DIR}{os.pathsep}/mine"
    assert env["TORCH_FR_BUFFER_SIZE"] == "50"  # the user's value wins
    assert env["DDPDOCTOR_WATCH_HANG_AFTER"] == "7.0"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env["TORCH_FR_DUMP_TEMP_FILE"].startswith(str((tmp_path / "dumps").resolve()))
    assert job_environment({}, tmp_path, tmp_path, 1)["TORCH_FR_BUFFER_SIZE"] == "2000"


def _watch(*args, env=None, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "watch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_bad_command_lines_exit_2_with_a_message(tmp_path):
    p = _watch()
    assert p.returncode == 2 and "no command to run" in p.stderr
    p = _watch("--hang-after", "0", "--", "true")
    assert p.returncode == 2 and "--hang-after" in p.stderr
    p = _watch("--", "no-such-launcher-xyz")
    assert p.returncode == 2 and "command not found: no-such-launcher-xyz" in p.stderr
    (tmp_path / "rank-0.json").write_text("{}")
    p = _watch("--dumps", str(tmp_path), "--", "true")
    assert p.returncode == 2 and "already holds evidence" in p.stderr
    assert "Traceback" not in p.stderr


def test_job_exit_code_passes_through_and_nothing_is_left_on_disk(tmp_path):
    p = _watch(
        "--dumps", str(tmp_path / "d"), "--", sys.executable, "-c", "print('out'); raise SystemExit(7)"
    )
    assert p.returncode == 7 and p.stdout.startswith("out")
    p = _watch("--dumps", str(tmp_path / "d"), "--", sys.executable, "-c", "pass")
    assert p.returncode == 0 and not (tmp_path / "d").exists()


def test_the_users_sitecustomize_still_runs(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(
        "import os\nif 'DDPDOCTOR_WATCH_RUN' in os.environ:\n    print('user sitecustomize ran in the job')\n"
    )
    p = _watch(
        "--", sys.executable, "-c", "import sys; print('job', sys.argv)", env={"PYTHONPATH": str(tmp_path)}
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["user sitecustomize ran in the job", "job ['-c']"]


def test_help_does_not_import_torch():
    code = (
        "import contextlib, io, sys, json\nfrom ddpdoctor.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main(['watch', '--help'])\n"
        "    except SystemExit:\n        pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'textual'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_interrupt_ends_the_whole_tree(tmp_path):
    # the job starts a grandchild that ignores SIGTERM: it must still be gone afterwards
    job = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)'])\n"
        "print('ready', flush=True); time.sleep(120)\n"
    )
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "watch",
            "--dumps",
            str(tmp_path / "d"),
            "--",
            sys.executable,
            "-c",
            job,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().strip() == "ready"
        tree = psutil.Process(p.pid).children(recursive=True)
        assert len(tree) == 2
        p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert rc == 130
    time.sleep(0.2)
    assert [c for c in tree if c.is_running() and c.status() != psutil.STATUS_ZOMBIE] == []


# a rank dying of an error (a peer's death: "Connection closed by peer") gets SIGTERM from torchrun
# while it still reports that error; {block} decides which of its threads sees the signal
_DYING_RANK = (
    "import signal, sys, time\n"
    "try:\n"
    "    raise RuntimeError('Connection closed by peer [127.0.0.1]:1234')\n"
    "except RuntimeError:\n"
    "    {block}\n"
    "    print('handling', flush=True)\n"
    "    time.sleep(60)\n"
)


def _sigterm_while_handling(tmp_path, block: str) -> dict:
    dumps = tmp_path / "dumps"
    run = tmp_path / "run"
    run.mkdir()
    env = {**job_environment(os.environ, run, dumps, 300), "RANK": "0", "WORLD_SIZE": "1"}
    p = subprocess.Popen([sys.executable, "-c", _DYING_RANK.format(block=block)], env=env,
                         stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert p.stdout.readline().strip() == "handling"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == -signal.SIGTERM  # it still dies of SIGTERM, as without watch
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return json.loads((dumps / "rank-0.json").read_text())


def test_sigterm_seen_by_the_helper_thread_keeps_the_error_the_rank_was_handling(tmp_path):
    # the main thread does not take SIGTERM (as when it is blocked in a C++ call): our thread does
    ev = _sigterm_while_handling(tmp_path, "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])")
    assert ev["reason"] == "exit"
    assert ev["exception"] is not None and "closed by peer" in ev["exception"]["message"]


def test_sigterm_seen_by_the_main_thread_keeps_the_error_it_was_handling(tmp_path):
    # both threads see it (the main thread's handler and our thread's wake-up fd): either one that
    # writes the evidence keeps the error
    ev = _sigterm_while_handling(tmp_path, "pass")
    assert ev["reason"] == "exit"
    assert ev["exception"] is not None and "closed by peer" in ev["exception"]["message"]
