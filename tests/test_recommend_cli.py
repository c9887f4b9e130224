"""`ddpdoctor recommend REPORT.json` and the recommendation options of `ddpdoctor check`."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import REPO, load, run_cli

SAMPLE = REPO / "tests" / "tui" / "data" / "report_2x2_gloo.json"


def test_recommend_on_a_saved_report(tmp_path):
    out = tmp_path / "again.json"
    p = run_cli("recommend", str(SAMPLE), "--layout", "dp=2,tp=2", "--json", str(out))
    assert p.returncode == 0, p.stderr
    for title in ("bucket_cap_mb", "NCCL_ALGO", "DDP ring order", "HSDP mesh", "Proposed layout"):
        assert title in p.stdout
    assert "profile: cpu-gloo (detected)" in p.stdout
    rep = load(out)
    ids = [r["id"] for r in rep["recommendations"]]
    assert "nccl_algo" in ids and "layout_check" in ids and "bucket_cap_mb" in ids
    assert rep["run"]["profile"]["name"] == "cpu-gloo"
    # the measurements are unchanged: the same checks, the same matrix
    assert [c["code"] for c in rep["checks"]] == [c["code"] for c in load(SAMPLE)["checks"]]


def test_recommend_bad_inputs_exit_2(tmp_path):
    p = run_cli("recommend", str(tmp_path / "missing.json"))
    assert p.returncode == 2 and "cannot read" in p.stderr
    p = run_cli("recommend", str(SAMPLE), "--profile", "no-such-box")
    assert p.returncode == 2 and "--profile" in p.stderr and "cpu-gloo" in p.stderr  # lists the known ones
    p = run_cli("recommend", str(SAMPLE), "--layout", "tp=two")
    assert p.returncode == 2 and "--layout" in p.stderr and "tp=two" in p.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: 1\nname: x\n")
    p = run_cli("recommend", str(SAMPLE), "--profile", str(bad))
    assert p.returncode == 2 and f"{bad}:" in p.stderr


def test_check_rejects_bad_recommendation_options_before_launching():
    for args, needle in ((["--profile", "nope"], "--profile"), (["--layout", "tp=0"], "--layout")):
        p = run_cli("check", *args, timeout=60)
        assert p.returncode == 2 and needle in p.stderr, p.stderr
        assert "rendezvous" not in p.stderr


def test_recommend_command_does_not_import_torch():
    code = (
        "import contextlib, io, sys, json\nfrom ddpdoctor.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main(['recommend', {str(SAMPLE)!r}])\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'textual'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_recommend_with_a_model_simulates_the_buckets(tmp_path):
    out = tmp_path / "r.json"
    p = run_cli(
        "recommend",
        str(SAMPLE),
        "--model-params",
        "124M",
        "--model-dtype",
        "bf16",
        "--backward-ms",
        "200",
        "--json",
        str(out),
    )
    assert p.returncode == 0, p.stderr
    (rec,) = [r for r in load(out)["recommendations"] if r["id"] == "bucket_cap_mb"]
    assert (
        rec["data"]["unit_x"] == "MiB" and rec["data"]["unit_y"] == "ms" and len(rec["data"]["points"]) >= 7
    )
    assert rec["evidence"]["backward_ms"] == 200.0
    assert "bucket_cap_mb" in (rec["snippet"] or "")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"tensors": "not a list"}))
    for args, needle in (
        (["--model-params", "12x"], "12x"),
        (["--model-params", "1M", "--model-dtype", "fp8"], "fp8"),
        (["--model-spec", str(spec)], "model"),
        (["--model-spec", str(tmp_path / "no.json")], "cannot read"),
        (["--model-params", "1M", "--model-spec", str(spec)], "one of them"),
    ):
        p = run_cli("recommend", str(SAMPLE), *args)
        assert p.returncode == 2 and needle in p.stderr, (args, p.stderr)


def test_profile_none_turns_judging_off(tmp_path):
    judged, off = tmp_path / "judged.json", tmp_path / "off.json"
    assert run_cli("recommend", str(SAMPLE), "--profile", "cpu-gloo", "--json", str(judged)).returncode == 0
    assert run_cli("recommend", str(judged), "--profile", "none", "--json", str(off)).returncode == 0
    before, after = load(judged), load(off)
    assert after["run"]["profile"] == {"name": None, "how": "off"}
    bw = next(c for c in after["checks"] if c["code"] == "BW001")
    assert "expected_busbw_GBps" not in bw["data"]
    assert not any("profile" in f["evidence"] for c in after["checks"] for f in c["findings"])
    assert "expected_busbw_GBps" in next(c for c in before["checks"] if c["code"] == "BW001")["data"]
