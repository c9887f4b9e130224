"""NCCL RAS's JSON report (``ncclras -f json``) as hang evidence, on fixtures written from NCCL's
documentation (tests/fixtures/hang/SOURCES.md): untested on hardware."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.model.hang.analysis import diagnose
from ddpdoctor.model.hang.evidence import EvidenceError
from ddpdoctor.model.hang.ras import RasError, ras_findings, ras_from_dict
from ddpdoctor.readers.hang_files import read_evidence

RAS = Path(__file__).resolve().parents[1] / "fixtures" / "hang" / "ncclras"


def _report(name):
    path = RAS / name / "ncclras.json"
    return ras_from_dict(json.loads(path.read_text()), str(path))


def test_mismatch_names_the_rank_behind_by_how_many_and_its_host():
    rep = _report("mismatch")
    assert rep.nccl_version == "2.28.7" and rep.world_size == 4
    [f] = ras_findings(rep)
    assert f.kind == "mismatch" and f.operation == "AllReduce" and f.global_ranks
    assert f.culprits == [3] and f.waiting == [0, 1, 2]
    assert "rank 3 on 10.0.0.2 (pid 4103, GPU 1) is 1 collective(s) behind" in f.details[0]


def test_incomplete_names_the_silent_rank_and_dead_the_dead_one():
    [f] = ras_findings(_report("incomplete"))
    assert (f.kind, f.culprits, f.waiting) == ("incomplete", [1], [0, 2, 3])
    assert "rank 1 on 10.0.0.1" in f.summary and "unresponsive" in f.summary
    [f] = ras_findings(_report("dead"))
    assert (f.kind, f.culprits) == ("dead", [2])
    assert "rank 2 on 10.0.0.2" in f.summary


def test_healthy_report_has_no_finding():
    assert ras_findings(_report("healthy")) == []


def test_dead_comes_before_mismatch_and_subcommunicator_ranks_are_not_global():
    doc = json.loads((RAS / "mismatch" / "ncclras.json").read_text())
    dead = json.loads((RAS / "dead" / "ncclras.json").read_text())["communicators"][0]
    for r in dead["ranks"] + dead["missing_ranks"]:
        r["pid"] += 5000  # processes the world communicator does not know: not mappable
    sub = {**dead, "hash": "0xsub", "size": 2}
    doc["communicators"].append(sub)
    found = ras_findings(ras_from_dict(doc, "x.json"))
    assert [f.kind for f in found] == ["mismatch", "dead"]  # the one naming the job's ranks first
    assert found[1].global_ranks is False and "communicator" in found[1].summary
    diag = diagnose(read_evidence_from(doc))
    assert diag.kind == "mismatch_count" and diag.culprit_ranks == [3]
    # the same dead process known to the world communicator by host and pid: named by its job rank
    for r in sub["missing_ranks"]:
        r["pid"], r["host"] = 4101, "10.0.0.1"
    found = ras_findings(ras_from_dict(doc, "x.json"))
    assert (found[0].kind, found[0].culprits, found[0].global_ranks) == ("dead", [1], True)


def read_evidence_from(doc, tmp=None):
    import tempfile

    d = Path(tempfile.mkdtemp())
    (d / "ncclras.json").write_text(json.dumps(doc))
    try:
        return read_evidence([d])
    finally:
        shutil.rmtree(d)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d.pop("communicators"), "not an NCCL RAS JSON report"),
        (lambda d: d["communicators"][0]["ranks"][0].update(pid="x"), "communicators[0].ranks[0].pid"),
        (lambda d: d["communicators"][0]["ranks"][1]["collective_counts"].update(AllReduce=None), "AllReduce"),
        (lambda d: d["communicators"][0].update(missing_ranks={}), "missing_ranks: expected a list"),
    ],
)
def test_malformed_field_is_named(change, words):
    doc = json.loads((RAS / "mismatch" / "ncclras.json").read_text())
    change(doc)
    with pytest.raises(RasError, match="x.json") as e:
        ras_from_dict(doc, "x.json")
    assert words in str(e.value)


def test_reader_turns_a_bad_report_into_evidence_error(tmp_path):
    (tmp_path / "ncclras.json").write_text('{"nccl_version": "2.28.7", "communicators": [1]}')
    with pytest.raises(EvidenceError, match="communicators\\[0\\]"):
        read_evidence([tmp_path])


def _run(*args):
    out = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "hang", "--no-lint", *map(str, args)],
        check=False, capture_output=True, text=True, timeout=120,
        env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert "Traceback" not in out.stderr, out.stderr
    return out


def test_hang_command_names_the_culprit_from_a_ras_report(tmp_path):
    out = _run(RAS / "mismatch", "--json", tmp_path / "d.json")
    assert out.returncode == 1, out.stderr
    assert "rank 3 launched fewer collectives" in out.stdout
    assert "rank 3 on 10.0.0.2" in out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) <= 80
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["culprit_ranks"] == [3] and doc["waiting_ranks"] == [0, 1, 2]
    out = _run(RAS / "dead")
    assert out.returncode == 1 and "rank 2 on 10.0.0.2" in out.stdout
    assert _run(RAS / "healthy").returncode == 0


def test_hang_command_truncated_report_is_a_one_line_error():
    out = _run(RAS / "truncated")
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "ncclras.json" in lines[0] and "truncated" in lines[0]


def test_ras_report_beside_ranks_own_evidence(tmp_path):
    """Beside watch's rank files, RAS hosts fill in and RAS findings follow ours."""
    from tests.hang.evidence_helpers import fixture

    ev_dir = fixture("python_stuck", tmp_path)
    doc = json.loads((RAS / "incomplete" / "ncclras.json").read_text())
    for c in doc["communicators"]:
        c["size"] = 3
        c["ranks"] = [r for r in c["ranks"] if r["rank"] < 3]
    (Path(ev_dir) / "ncclras.json").write_text(json.dumps(doc))
    diag = diagnose(read_evidence([Path(ev_dir)]))
    assert diag.culprit_ranks == [2]  # our own evidence names rank 2 in Python: it stays the verdict
    assert any(f.group.startswith("NCCL communicator") and f.culprit_ranks == [1] for f in diag.findings)


NCCL_FR = Path(__file__).resolve().parents[1] / "fixtures" / "hang" / "nccl_fr_json"


def test_nccl_flight_recorder_json_dumps_name_the_rank_that_never_called():
    """torch's JSON dumps as ProcessGroupNCCL writes them: nccl:all_reduce, states started/completed,
    duration_ms, nccl_comm_state, the NCCL version in comm_lib_version."""
    ev = read_evidence([NCCL_FR])
    assert {r.flight_recorder.comm_lib_version for r in ev.ranks.values()} == {"2.21.5"}
    diag = diagnose(ev)
    assert (diag.kind, diag.operation, diag.seq, diag.culprit_ranks) == ("missing", "all_reduce", 3, [2])
    assert diag.waiting_ranks == [0, 1]


def test_ras_report_beside_nccl_dumps_names_the_hosts(tmp_path):
    shutil.copytree(NCCL_FR, tmp_path / "dumps")
    doc = json.loads((RAS / "mismatch" / "ncclras.json").read_text())
    c = doc["communicators"][0]
    c["size"], c["ranks"] = 3, c["ranks"][:3]
    c["ranks"][2]["collective_counts"]["AllReduce"] -= 1
    (tmp_path / "dumps" / "ncclras.json").write_text(json.dumps(doc))
    out = _run(tmp_path / "dumps")
    assert out.returncode == 1, out.stderr
    assert "rank 2 never called all_reduce #3" in out.stdout
    assert "rank 2 on 10.0.0.2" in out.stdout  # the host comes from RAS: torch's dumps have none


@pytest.mark.parametrize(
    "name,is_ras",
    [("ncclras.json", True), ("ncclras-node1.json", True), ("ras.json", True), ("RAS_2.json", True),
     ("rasterize.json", False), ("rank-1.json", False), ("ncclras.json.bak", False)],
)
def test_only_files_named_as_ras_reports_are_read_as_one(name, is_ras):
    from ddpdoctor.readers.hang_files import RAS_FILE

    assert bool(RAS_FILE.match(name)) is is_ras
