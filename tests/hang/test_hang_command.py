"""`ddpdoctor hang DIR...`: exit codes, the printed verdict at 80 columns, --json, and a clear error
(exit 2, naming the file, no traceback) for every kind of bad input."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest

from tests.hang.evidence_helpers import entry, fixture, rank_doc, write_ranks


def _run(*args, cwd=None):
    out = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "hang", *map(str, args)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"},
    )
    assert "Traceback" not in out.stderr, out.stderr
    return out


def test_prints_verdict_and_writes_json(tmp_path):
    ev = fixture("barrier_rank0", tmp_path)
    out = _run(ev, "--json", tmp_path / "hang.json")
    assert out.returncode == 1, out.stderr
    assert "Hang diagnosis: ranks called different collectives at #4" in out.stdout
    assert "barrier_rank0.py:9 in save_checkpoint" in out.stdout
    assert "this is DDP301" in out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) <= 80
    doc = json.loads((tmp_path / "hang.json").read_text())
    assert doc["format"] == "ddpdoctor-hang-diagnosis" and doc["culprit_ranks"] == [0] and doc["seq"] == 4


def test_no_hang_exits_0(tmp_path):
    ev = write_ranks(tmp_path / "ev", [rank_doc(r, 2, [entry(1)]) for r in range(2)])
    out = _run(ev)
    assert out.returncode == 0 and "no hang found" in out.stdout


def test_no_lint_flag(tmp_path):
    out = _run(fixture("barrier_rank0", tmp_path), "--no-lint")
    assert out.returncode == 1 and "DDP301" not in out.stdout


def _bad(tmp_path, name, content):
    ev = tmp_path / "ev"
    ev.mkdir(exist_ok=True)
    for r in range(2):
        (ev / f"rank-{r}.json").write_text(json.dumps(rank_doc(r, 2, [entry(1)])))
    p = ev / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return ev, p


@pytest.mark.parametrize(
    "name,content,words",
    [
        ("rank-1.json", '{"format": "ddpdoctor-hang-evidence", "version": 1, "rank": 1', "not valid JSON"),
        ("rank-1.json", "", "empty file"),
        (
            "rank-1.json",
            json.dumps({"format": "something-else", "version": 1}),
            "expected 'ddpdoctor-hang-evidence'",
        ),
        ("rank-1.json", json.dumps({**rank_doc(1, 2), "version": 7}), "version 1"),
        ("rank-1.json", json.dumps(rank_doc(0, 2)), "holds rank 0, but its name says rank 1"),
        ("rank-1.json", json.dumps(rank_doc(1, 4)), "world size"),
        (
            "rank-1.json",
            json.dumps({**rank_doc(1, 2), "threads": [{"frames": [{"file": "a.py"}]}]}),
            "threads[0].frames[0].line",
        ),
        (
            "rank-1.json",
            json.dumps(rank_doc(1, 2, [{**entry(1), "collective_seq_id": "x"}])),
            "entries[0].collective_seq_id",
        ),
        ("rank-1.json", b"\xff\xfe garbage", "neither JSON nor"),
        (
            "watch.json",
            json.dumps({"format": "ddpdoctor-hang-watch", "version": 1, "outcome": "exploded"}),
            "outcome",
        ),
    ],
)
def test_bad_input_is_a_clear_error_naming_the_file(tmp_path, name, content, words):
    ev, p = _bad(tmp_path, name, content)
    out = _run(ev)
    assert out.returncode == 2, out.stdout
    assert str(p) in out.stderr and words in out.stderr, out.stderr


def test_torch_dumps_with_two_prefixes_are_mixed_input(tmp_path):
    d = tmp_path / "fr"
    d.mkdir()
    (d / "nccl_trace_rank_0").write_text(json.dumps({"entries": []}))
    (d / "trace_1").write_text(json.dumps({"entries": []}))
    out = _run(d)
    assert out.returncode == 2 and "prefix differs" in out.stderr


def test_other_files_beside_ddpdoctor_evidence_are_skipped(tmp_path):
    ev, _ = _bad(tmp_path, "job-output.1234", "not evidence")
    (ev / "rank-0.json.77.tmp").write_text("{half")
    out = _run(ev)
    assert out.returncode == 0, out.stderr


def test_same_rank_in_two_folders_is_mixed_input(tmp_path):
    a = write_ranks(tmp_path / "a", [rank_doc(r, 2, [entry(1)]) for r in range(2)])
    b = write_ranks(tmp_path / "b", [rank_doc(1, 2, [entry(1)])])
    out = _run(a, b)
    assert out.returncode == 2 and "rank 1 already read from" in out.stderr and "mixed" in out.stderr


def test_missing_folder_and_empty_folder(tmp_path):
    out = _run(tmp_path / "nope")
    assert out.returncode == 2 and "no such file or folder" in out.stderr
    (tmp_path / "empty").mkdir()
    out = _run(tmp_path / "empty")
    assert out.returncode == 2 and "no evidence here" in out.stderr and str(tmp_path / "empty") in out.stderr


def test_pickle_refused_by_default_and_read_with_flag(tmp_path):
    d = tmp_path / "fr"
    d.mkdir()
    for r in range(2):
        fr = {
            "version": "2.10",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
            "entries": [entry(1)] + ([entry(2, retired=False)] if r == 0 else []),
        }
        (d / f"nccl_trace_rank_{r}").write_bytes(pickle.dumps(fr, protocol=2))
    out = _run(d)
    assert out.returncode == 2 and "--allow-pickle" in out.stderr and "nccl_trace_rank_" in out.stderr
    out = _run(d, "--allow-pickle")
    assert out.returncode == 1 and "rank 1 never called all_reduce #2" in out.stdout


def test_json_path_unwritable(tmp_path):
    out = _run(fixture("python_stuck", tmp_path), "--json", tmp_path / "no" / "such" / "x.json")
    assert out.returncode == 2 and "--json" in out.stderr
