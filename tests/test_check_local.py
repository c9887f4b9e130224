"""`ddpdoctor check` for real: torchrun, gloo ranks on this machine."""

import json
import time
import xml.etree.ElementTree as ET

import pytest
from helpers import check, load, run_cli, with_fault, without_numpy


def test_default_check_passes_and_writes_reports(tmp_path):
    rj, ju, ev = tmp_path / "r.json", tmp_path / "j.xml", tmp_path / "ev.jsonl"
    p = run_cli("check", "--json", str(rj), "--junit", str(ju), "--events", str(ev), "-q",
                env=without_numpy(tmp_path / "no-numpy"))
    assert p.returncode == 0, p.stdout + p.stderr
    # Without numpy (the CPU torch wheel has none) torch warns on import; not our users' concern.
    assert "NumPy" not in p.stdout + p.stderr
    # On a machine without a GPU the topology checks skip for one reason, said once.
    assert p.stdout.count("NVML could not start") <= 1
    rep = load(rj)
    assert rep["schema_version"] == 1
    assert rep["run"]["world_size"] == 2 and rep["run"]["backend"] == "gloo" and rep["run"]["complete"]
    for code in ("ENV001", "RDZ001", "COL001"):
        assert check(rep, code)["status"] == "passed"
    assert check(rep, "COL001")["data"]["ops"]["all_reduce"]["ok_ranks"] == [0, 1]
    rdz = check(rep, "RDZ001")["data"]
    assert [m["rank"] for m in rdz["rank_map"]] == [0, 1] and rdz["nodes"][0]["ranks"] == [0, 1]
    suite = ET.parse(ju).getroot()
    assert suite.get("failures") == "0" and len(suite.findall("testcase")) == len(rep["checks"])
    kinds = [line for line in ev.read_text().splitlines()]
    assert any('"run_start"' in k for k in kinds) and any('"run_end"' in k for k in kinds)
    # the run_end event names the report where it lasts (--json), not the run's scratch copy
    ends = [json.loads(k) for k in kinds if '"run_end"' in k]
    assert ends and all(e["report"] == str(rj) for e in ends) and rj.exists()
    assert "OK: nothing failed" in p.stdout
    shown = run_cli("report", "show", str(rj))
    assert shown.returncode == 0 and "COL001" in shown.stdout


def test_a_run_leaves_no_scratch_folder_behind(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    p = run_cli("check", "--select", "ENV001", "--nproc-per-node", "1", "-q", env={"TMPDIR": str(scratch)})
    assert p.returncode == 0, p.stdout + p.stderr
    assert [x.name for x in scratch.iterdir() if x.name.startswith("ddpdoctor-")] == []


def test_list_and_bad_arguments():
    p = run_cli("check", "--list")
    assert p.returncode == 0 and "COL001" in p.stdout
    p = run_cli("check", "--select", "NOPE001")
    assert p.returncode == 2 and "unknown check code" in p.stderr
    p = run_cli("check", "--nodes", "2")
    assert p.returncode == 2 and "--rdzv-endpoint" in p.stderr
    p = run_cli("check", "--option", "novalue")
    assert p.returncode == 2 and "KEY=VALUE" in p.stderr


def test_list_descriptions_say_something_new():
    """`check --list`: each description adds to the code and the title instead of repeating them."""
    from ddpdoctor.registry import discover

    for spec in discover():
        blurb = spec.blurb
        assert not blurb.startswith(spec.code) and spec.code not in blurb.split(" ")[:2], (spec.code, blurb)
        assert not blurb.lower().startswith(spec.title.lower()), (spec.code, blurb)
    p = run_cli("check", "--list", env={"COLUMNS": "100"})
    assert p.returncode == 0 and "GDR001 —" not in p.stdout and "NVL001 — the NVLink matrix" not in p.stdout


@pytest.mark.parametrize("argv, words", [
    (["--nproc-per-node", "0"], "argument --nproc-per-node: must be at least 1, got 0"),
    (["--nproc-per-node", "-2"], "argument --nproc-per-node: must be at least 1, got -2"),
    (["--nproc-per-node", "two"], "argument --nproc-per-node: expected a whole number, got 'two'"),
    (["--nodes", "0"], "argument --nodes: must be at least 1"),
    (["--node-rank", "-1"], "argument --node-rank: must be 0 or more"),
    (["--rdzv-timeout", "0"], "argument --rdzv-timeout: must be a positive number of seconds"),
    (["--rdzv-timeout", "nan"], "argument --rdzv-timeout: must be a positive number of seconds"),
    (["--budget-scale", "-1"], "argument --budget-scale: must be a positive number"),
])
def test_bad_counts_are_clear_errors(argv, words):
    p = run_cli("check", *argv, timeout=60)
    assert p.returncode == 2 and words in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_report_show_refuses_bad_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    p = run_cli("report", "show", str(bad))
    assert p.returncode == 2 and "not valid JSON" in p.stderr
    p = run_cli("report", "show", str(tmp_path / "missing.json"))
    assert p.returncode == 2 and "cannot read" in p.stderr


def test_a_hanging_rank_is_ended_by_the_watchdog(tmp_path):
    rj = tmp_path / "r.json"
    t0 = time.monotonic()
    p = run_cli("check", "--json", str(rj), "-q", "--budget-scale", "0.25", timeout=90,
                env=with_fault("hang@COL001:rank=1"))
    elapsed = time.monotonic() - t0
    assert p.returncode == 1, p.stdout + p.stderr
    rep = load(rj)
    col = check(rep, "COL001")
    assert col["status"] == "timed_out"
    msg = col["findings"][0]["message"]
    assert "timed out after 5 s in all_reduce" in msg and "ranks 1 never arrived" in msg
    assert col["findings"][0]["where"]["never_arrived"] == [1]
    # the stuck rank's stack is evidence
    assert "fault injection" in col["findings"][0]["evidence"]["per_rank"]["1"]["op"]
    assert check(rep, "ENV001")["status"] == "passed"  # measured before the hang: kept
    assert rep["run"]["complete"] is False
    assert elapsed < 60


def test_a_crashing_rank_still_gives_a_partial_report(tmp_path):
    rj = tmp_path / "r.json"
    p = run_cli("check", "--json", str(rj), "-q", timeout=90, env=with_fault("exit@COL001:rank=1:code=3"))
    assert p.returncode == 1, p.stdout + p.stderr
    rep = load(rj)
    assert rep["run"]["complete"] is False
    assert "rank 1 (local rank 1)" in rep["run"]["aborted_reason"] and "exit code 3" in rep["run"]["aborted_reason"]
    assert check(rep, "COL001")["status"] == "failed"
    assert check(rep, "ENV001")["status"] == "passed"


def test_script_findings_join_the_report(tmp_path):
    from helpers import REPO

    rj = tmp_path / "r.json"
    script = REPO / "tests" / "lint" / "corpus" / "bad_realistic.py"
    p = run_cli("check", "--select", "COL", "--script", str(script), "--json", str(rj), "-q")
    assert p.returncode == 1, p.stdout + p.stderr
    rep = load(rj)
    assert check(rep, "COL001")["status"] == "passed"
    assert rep["lint"] and all(f["location"]["path"].endswith("bad_realistic.py") for f in rep["lint"])
    assert any(f["code"].startswith("DDP") for f in rep["lint"])
    p = run_cli("check", "--script", str(tmp_path / "nope.py"))
    assert p.returncode == 2 and "no such file" in p.stderr
