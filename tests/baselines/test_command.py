"""`ddpdoctor profiles list | show | validate`: output and exit codes (0 valid, 2 invalid/unreadable)."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import REPO, run_cli

from .conftest import VALID, line_of


def test_list_shows_every_shipped_profile():
    r = run_cli("profiles", "list", env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    for name in ("dgx-h100", "aws-p5-48xlarge", "cpu-gloo", "pcie-gen5-8gpu"):
        assert name in r.stdout
    assert run_cli("profiles").returncode == 0  # list is the default


def test_list_and_show_json():
    r = run_cli("profiles", "list", "--json")
    names = [p["name"] for p in json.loads(r.stdout)]
    assert "azure-nd-h100-v5" in names and r.returncode == 0
    r = run_cli("profiles", "show", "dgx-a100", "--json")
    doc = json.loads(r.stdout)
    assert doc["expected_GBps"]["all_reduce_busbw_intra_node"] == 230 and doc["origin"].endswith(
        "dgx-a100.yaml"
    )


def test_show_by_name_and_by_path(tmp_path):
    r = run_cli("profiles", "show", "cpu-gloo", env={"COLUMNS": "200"})
    assert r.returncode == 0 and "benchmarks/gloo_baseline.py" in r.stdout and "p2p_inter_node" in r.stdout
    f = tmp_path / "mine.yaml"
    f.write_text(VALID)
    r = run_cli("profiles", "show", str(f))
    assert r.returncode == 0 and "test-box" in r.stdout


def test_show_unknown_is_exit_2():
    r = run_cli("profiles", "show", "no-such-box")
    assert r.returncode == 2 and "unknown profile" in r.stderr and "dgx-h100" in r.stderr


def test_validate_exit_codes(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(VALID)
    r = run_cli("profiles", "validate", str(good), str(REPO / "profiles"))
    assert r.returncode == 0, r.stderr
    assert "good.yaml: ok (test-box)" in r.stdout and "dgx-h100.yaml: ok" in r.stdout
    bad = tmp_path / "bad.yaml"
    text = VALID.replace("p2p_intra_node: 100", "p2p_intra_node: -1")
    bad.write_text(text)
    r = run_cli("profiles", "validate", str(good), str(bad))
    assert r.returncode == 2
    assert f"{bad}:{line_of(text, 'p2p_intra_node')}: expected_GBps.p2p_intra_node is -1" in r.stderr
    assert "good.yaml: ok" in r.stdout  # the good one is still reported as such
    assert run_cli("profiles", "validate", str(tmp_path / "missing.yaml")).returncode == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_cli("profiles", "validate", str(empty)).returncode == 2


def test_validate_rejects_two_files_with_one_name(tmp_path):
    for n in ("a", "b"):
        (tmp_path / f"{n}.yaml").write_text(VALID)
    r = run_cli("profiles", "validate", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"))
    assert r.returncode == 2 and "b.yaml" in r.stderr and "already used by" in r.stderr


def test_profiles_command_and_baselines_never_import_torch_or_textual():
    code = (
        "import contextlib, io, sys\nfrom ddpdoctor.cli import main\nimport ddpdoctor.baselines as b\n"
        "b.detect_profile({'schema_version': 1, 'run': {'backend': 'gloo'}})\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    main(['profiles', 'list'])\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'textual'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
