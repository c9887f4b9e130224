"""`ddpdoctor import`: verdicts against the profile, wrong data, slow GPUs named, exit codes, the saved
report read again by `report show` and `recommend`, and no torch."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_cli
from test_imports import _heavy, _modules_after

from ddpdoctor.cli import main
from ddpdoctor.report.io import load_report

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "tool-output"
NCCL = FIX / "nccl-tests"
SUPERBENCH = sorted(str(p) for p in NCCL.glob("superbench-*.log"))


def imp(capsys, *args: str) -> tuple[int, str, str]:
    """Exit code, stdout with rich's 80-column wrapping undone, stderr."""
    rc = main(["import", *args])
    out = capsys.readouterr()
    return rc, " ".join(out.out.split()), out.err


def test_superbench_a100_logs_detect_dgx_a100_and_pass(capsys, tmp_path):
    out_json = tmp_path / "r.json"
    rc, out, _ = imp(capsys, *SUPERBENCH, "--json", str(out_json))
    assert rc == 0
    assert "profile dgx-a100" in out and "(detected)" in out
    rep = load_report(out_json)
    bw = rep.check("BW001")
    assert sorted(bw.data["ops"]) == [
        "all_gather",
        "all_reduce",
        "all_to_all",
        "broadcast",
        "reduce",
        "reduce_scatter",
    ]
    assert bw.data["profile"]["pct_of_expected"] == pytest.approx(102.3, abs=0.1)
    assert bw.summary.startswith(
        "all_reduce busbw 235 GB/s at 8 GiB: 102% of the 230 GB/s expected on dgx-a100"
    )
    assert bw.data["busbw"]["all_reduce"]["points"][-1] == [8 * 2**30, 235.26]
    assert rep.run.profile["name"] == "dgx-a100" and rep.run.nodes == ["localhost"]


def test_the_wrong_profile_gives_the_percentage_users_ask_for(capsys):
    rc, out, _ = imp(capsys, str(NCCL / "superbench-nccl_allreduce.log"), "--profile", "dgx-h100")
    assert rc == 0  # a warning, not a failure
    assert "all_reduce busbw 235 GB/s at 8 GiB is 64% of the 370 GB/s expected" in out


def test_slow_node_warns_and_two_nodes_use_the_inter_node_figure(capsys, tmp_path):
    rc, out, _ = imp(capsys, str(NCCL / "synth-nccl-tests-h100-1node-slow.log"))
    assert rc == 0 and "68% of the 370 GB/s expected on one node of dgx-h100" in out
    out_json = tmp_path / "two.json"
    rc, _, _ = imp(capsys, str(NCCL / "synth-nccl-tests-2.17-h100-2node.log"), "--json", str(out_json))
    bw = load_report(out_json).check("BW001")
    assert rc == 0 and bw.data["profile"]["link_class"] == "all_reduce_busbw_inter_node"
    assert bw.data["expected_busbw_GBps"] == 360 and bw.data["nnodes"] == 2 and bw.data["world_size"] == 16
    assert sorted(bw.data["ops"]) == ["all_gather", "all_reduce"]
    ranks = load_report(out_json).ranks
    assert [(r["rank"], r["hostname"], r["node_rank"], r["local_rank"]) for r in ranks[7:9]] == [
        (7, "gpu-node-a", 0, 7),
        (8, "gpu-node-b", 1, 0),
    ]


def test_wrong_data_fails_naming_the_host_and_line(capsys, tmp_path):
    out_json = tmp_path / "r.json"
    rc, text, _ = imp(capsys, str(NCCL / "synth-nccl-tests-h100-wrong-data.log"), "--json", str(out_json))
    assert rc == 1 and "FAILED: BW001" in text
    assert "all_reduce returned wrong data on dgx-h100-03" in text and "64 MiB, 128 MiB" in text
    assert "Out of bounds values : 1536 FAILED" in text
    (f,) = load_report(out_json).check("BW001").findings
    assert f.severity.value == "error" and f.message.endswith("wrong-data.log:39)")
    assert f.where["nodes"] == ["dgx-h100-03"] and f.evidence["wrong_sizes_B"] == [2**26, 2**27]


def test_slow_gpu_and_slow_pair_are_named(capsys, tmp_path):
    out_json = tmp_path / "p2p.json"
    rc, out, _ = imp(
        capsys,
        str(FIX / "cuda-samples/synth-p2pBandwidthLatencyTest-h100-slow-gpu6.txt"),
        "--json",
        str(out_json),
    )
    assert rc == 1 and "GPU6 (bus ba) is slow on all its links" in out
    p2p = load_report(out_json).check("P2P001")
    assert p2p.data["matrix"]["labels"][6] == "GPU6" and p2p.data["matrix"]["values"][6][6] is None
    assert (
        [6, 0] in p2p.data["outliers"]
        and [0, 6] in p2p.data["outliers"]
        and [0, 1] not in p2p.data["outliers"]
    )
    assert "P2P=Disabled Latency" in p2p.data["matrices"]
    rc, out, _ = imp(
        capsys, str(FIX / "nvbandwidth/synth-nvbandwidth-v0.7-h100.txt"), "--json", str(out_json)
    )
    text = out
    assert (
        rc == 1
        and "GPU2 → GPU5 96.4 GB/s" in text
        and "GPU3 (bus 00000000:5d:00): host_to_device_memcpy_ce 13.6 GB/s" in text
    )
    rep = load_report(out_json)
    assert (
        rep.check("P2P001").data["matrix"]["values"][2][5] == 96.4
    )  # "GPU(row) <- GPU(column)": row = sender
    assert rep.run.profile["name"] == "dgx-h100"


def test_no_gpu_model_no_verdict_but_a_way_out(capsys, tmp_path):
    rc, out, _ = imp(capsys, str(FIX / "perftest/synth-ib_read_bw-report_gbits.log"))
    assert rc == 0 and "bandwidth not judged: the files name no GPU model" in out
    out_json = tmp_path / "r.json"
    rc, out, _ = imp(
        capsys,
        str(FIX / "perftest/synth-ib_read_bw-report_gbits.log"),
        "--profile",
        "dgx-h100",
        "--json",
        str(out_json),
    )
    rdma = load_report(out_json).check("RDMA001")
    assert rc == 0 and rdma.data["pct_of_expected"] == {"ib_read_bw mlx5_0": 101.2}
    assert "101% of the 48 GB/s per NIC expected on dgx-h100" in rdma.summary


def test_profile_none_judges_nothing(capsys, tmp_path):
    out_json = tmp_path / "r.json"
    rc, _, _ = imp(
        capsys,
        str(NCCL / "synth-nccl-tests-h100-1node-slow.log"),
        "--profile",
        "none",
        "--json",
        str(out_json),
    )
    rep = load_report(out_json)
    assert rc == 0 and rep.run.profile == {"name": None, "how": "off"}
    assert "expected_busbw_GBps" not in rep.check("BW001").data and not rep.check("BW001").findings


@pytest.mark.parametrize(
    "args, needle",
    [
        (["/no/such/file.log"], "/no/such/file.log: cannot read benchmark log"),
        ([str(FIX / "other/superbench-gpu_copy_bw_performance.log")], "no measurements found"),
        ([str(NCCL / "superbench-nccl_allreduce.log"), "--profile", "no-such-box"], "--profile"),
    ],
)
def test_bad_input_exits_2_with_a_message(capsys, args, needle):
    rc, _, err = imp(capsys, *args)
    assert rc == 2 and needle in err and "Traceback" not in err


def test_cut_log_exit_2_names_file_and_line_in_a_real_process(tmp_path):
    cut = tmp_path / "all_reduce_perf.log"
    cut.write_text(
        "".join((NCCL / "superbench-nccl_allreduce.log").read_text().splitlines(keepends=True)[:40])[:-30]
    )
    p = run_cli("import", str(cut), timeout=60)
    assert p.returncode == 2 and f"{cut}:40:" in p.stderr and "Traceback" not in p.stderr


def test_saved_report_reopens_with_report_show_and_recommend(capsys, tmp_path):
    out_json = tmp_path / "r.json"
    imp(capsys, *SUPERBENCH, "--json", str(out_json))
    assert main(["report", "show", str(out_json)]) == 0
    shown = capsys.readouterr().out
    assert "import of 6 file(s) (nccl-tests); profile dgx-a100" in shown and "BW001" in shown
    again = tmp_path / "rec.json"
    assert (
        main(
            [
                "recommend",
                str(out_json),
                "--model-params",
                "124M",
                "--backward-ms",
                "40",
                "--json",
                str(again),
            ]
        )
        == 0
    )
    capsys.readouterr()
    rec = next(r for r in load_report(again).recommendations if r.id == "bucket_cap_mb")
    assert "all_reduce times BW001 measured on 8 ranks (nccl)" in " ".join(rec.rationale.split())
    # 124M fp32 gradients in 20 buckets of 25 MiB: about 20 × 0.3 ms on the log's curve (16 MiB: 226 µs,
    # 32 MiB: 374 µs); a curve from anywhere else (gloo: ~2 GB/s) would say hundreds of ms
    assert 4 < rec.evidence["all_reduce_alone_ms"] < 8


def test_import_does_not_import_torch_or_textual():
    p2p = str(FIX / "cuda-samples/synth-p2pBandwidthLatencyTest-h100-slow-gpu6.txt")
    mods = _modules_after(
        "import contextlib, io\nfrom ddpdoctor.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main(['import', {SUPERBENCH[0]!r}, {p2p!r}])"
    )
    assert "ddpdoctor.model.imported.report" in mods  # it did run
    assert not _heavy(mods)


def test_a_repeated_collective_is_a_second_measurement_not_one_curve():
    from ddpdoctor.baselines import list_profiles
    from ddpdoctor.model.imported.report import build_report
    from ddpdoctor.readers.tool_output import parse_text

    log = (NCCL / "superbench-nccl_allreduce.log").read_text()
    rep = build_report([parse_text(log + log, "all_reduce_perf.log")], list_profiles())
    bws = [c for c in rep.checks if c.code == "BW001"]
    assert len(bws) == 2 and all(list(c.data["ops"]) == ["all_reduce"] for c in bws)
    assert all(c.data["profile"]["name"] == "dgx-a100" for c in bws)  # each judged on its own
