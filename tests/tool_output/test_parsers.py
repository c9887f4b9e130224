"""The tool-output parsers on real logs (tests/fixtures/tool-output, see SOURCES.md), on variants
written in the real formats, and on cut, mixed and garbage input."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ddpdoctor.readers.tool_output import ToolOutputError, parse_file, parse_text

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "tool-output"
NCCL = FIX / "nccl-tests"


def text(rel: str) -> str:
    return (FIX / rel).read_text()


# -- nccl-tests ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, op",
    [
        ("allreduce", "all_reduce"),
        ("allgather", "all_gather"),
        ("alltoall", "all_to_all"),
        ("broadcast", "broadcast"),
        ("reduce", "reduce"),
        ("reducescatter", "reduce_scatter"),
    ],
)
def test_superbench_logs_every_collective(name, op):
    p = parse_file(NCCL / f"superbench-nccl_{name}.log")
    (run,) = p.nccl
    assert run.op == op and run.nranks == 8 and run.hosts == ["localhost"]
    assert run.devices[0].name == "A100-SXM4-40GB" and run.wrong_column == "error"
    assert run.out_of_bounds == 0
    assert run.rows[-1].size_B == 8 * 2**30
    assert len(run.rows) == 34  # the duplicated size-0 row is kept as printed; NCCL INFO skipped


def test_allreduce_figures_are_read_from_the_right_columns():
    (run,) = parse_file(NCCL / "superbench-nccl_allreduce.log").nccl
    last = run.rows[-1]
    assert last.out_of_place.time_us == 63896 and last.out_of_place.algbw_GBps == 134.44
    assert last.out_of_place.busbw_GBps == 235.26 and last.in_place.busbw_GBps == 235.03
    assert last.out_of_place.wrong is None  # N/A
    assert run.avg_busbw_GBps == pytest.approx(68.4048)


def test_alltoall_blank_redop_cells_do_not_shift_columns():
    (run,) = parse_file(NCCL / "superbench-nccl_alltoall.log").nccl
    big = run.rows[-1]
    assert big.out_of_place.time_us == 33508.0  # not the count, not a blank redop
    assert big.out_of_place.busbw_GBps == pytest.approx(big.out_of_place.algbw_GBps * 7 / 8, rel=1e-3)


def test_new_format_two_collectives_two_hosts():
    p = parse_file(NCCL / "synth-nccl-tests-2.17-h100-2node.log")
    assert [r.op for r in p.nccl] == ["all_reduce", "all_gather"]
    ar = p.nccl[0]
    assert ar.nranks == 16 and ar.hosts == ["gpu-node-a", "gpu-node-b"]
    assert ar.devices[8].host == "gpu-node-b" and ar.devices[8].index == 0 and ar.devices[8].rank == 8
    assert ar.devices[0].name == "NVIDIA H100 80GB HBM3" and ar.devices[0].bus_id == "0000:18:00"
    assert ar.wrong_column == "#wrong" and ar.version.startswith("2.17.6")
    assert ar.rows[-1].out_of_place.busbw_GBps == pytest.approx(362, abs=1)
    assert all(r.out_of_place.wrong == 0 for r in ar.rows)


def test_wrong_elements_and_out_of_bounds_are_read():
    (run,) = parse_file(NCCL / "synth-nccl-tests-h100-wrong-data.log").nccl
    wrong = {r.size_B: r.out_of_place.wrong for r in run.rows if r.out_of_place.wrong}
    assert wrong == {2**26: 512, 2**27: 1024}
    assert run.out_of_bounds == 1536 and run.out_of_bounds_line


def test_json_output():
    (run,) = parse_file(NCCL / "synth-nccl-tests-all_reduce.json").nccl
    assert run.op == "all_reduce" and run.nranks == 8 and run.hosts == ["dgx-h100-11"]
    assert run.rows[0].size_B == 2**20 and run.rows[-1].out_of_place.busbw_GBps == pytest.approx(470, abs=1)
    assert run.out_of_bounds == 0


def test_in_place_only_rows_and_timestamps():
    header = (
        "# nThread 1 nGpus 2 minBytes 8 maxBytes 16 step: 2(factor)\n"
        "#  Rank  0 Group  0 Pid  1 on h device  0 [0000:18:00] NVIDIA H100 80GB HBM3\n"
        "#  Rank  1 Group  0 Pid  1 on h device  1 [0000:2a:00] NVIDIA H100 80GB HBM3\n"
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw"
        "   busbw  #wrong  timestamp\n"
    )
    body = (
        "           8             2     float     sum      -1                                    12.00    0.00"
        "    0.00       0  2026-01-02 03:04:05\n"
        "          16             4     float     sum      -1    11.00    0.00    0.00       0    12.00    0.00"
        "    0.00       0  2026-01-02 03:04:06\n"
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0\n"
    )
    (run,) = parse_text(header + body, "all_reduce_perf.log").nccl
    assert run.rows[0].out_of_place is None and run.rows[0].in_place.time_us == 12.0
    assert run.rows[1].out_of_place.time_us == 11.0


def test_gpu_count_from_the_busbw_ratio_when_device_lines_are_missing():
    log = "\n".join(
        line for line in text("nccl-tests/superbench-nccl_reducescatter.log").splitlines() if "Rank" not in line
    )
    (run,) = parse_text(log, "reduce_scatter_perf.log").nccl
    assert run.devices == [] and run.nranks == 8  # busbw/algbw = 7/8


def test_collective_from_the_busbw_ratio_when_nothing_names_it():
    log = text("nccl-tests/superbench-nccl_allreduce.log")
    (run,) = parse_text(log, "results.txt").nccl  # a name that says nothing
    assert run.op == "all_reduce"
    with pytest.raises(ToolOutputError, match=r"results.txt:\d+: cannot tell which collective"):
        parse_text(text("nccl-tests/superbench-nccl_allgather.log"), "results.txt")


# -- nvbandwidth, p2pBandwidthLatencyTest, perftest ---------------------------------------------------------
def test_nvbandwidth_readme_matrix():
    (m,) = parse_file(FIX / "nvbandwidth/nvbandwidth-readme-d2d-write-ce.8gpu.txt").matrices
    assert m.name == "device_to_device_memcpy_write_ce" and m.square_gpu and m.unit == "GB/s"
    assert m.values[6][0] == 274.89 and m.values[0][0] == 0.0
    assert m.direction == "<-"  # as the README prints it


def test_nvbandwidth_sum_lines_waived_and_devices():
    p = parse_file(FIX / "nvbandwidth/superbench-nvbandwidth_results.log")
    assert p.versions["nvbandwidth"] == "v0.6" and p.versions["driver"] == "550.54.15"
    assert [d.name for d in p.devices] == ["NVIDIA GH200 480GB"]
    h2d = p.matrices[0]
    assert (h2d.name, h2d.row_kind, h2d.col_kind, h2d.total) == (
        "host_to_device_memcpy_ce",
        "CPU",
        "GPU",
        1985.60,
    )
    assert len(h2d.values) == 2 and h2d.values[1] == [323.36, 299.33, 312.11]
    lat = next(m for m in p.matrices if m.name == "host_device_latency_sm")
    assert lat.unit == "ns" and lat.values == [[772.58]]


def test_nvbandwidth_na_cells_and_json():
    p = parse_file(FIX / "nvbandwidth/synth-nvbandwidth-v0.7-h100.txt")
    d2d = next(m for m in p.matrices if m.square_gpu)
    assert d2d.values[0][0] is None and d2d.values[5][2] == 96.4 and d2d.total is not None
    assert len(p.devices) == 8
    (j,) = parse_file(FIX / "nvbandwidth/synth-nvbandwidth-v0.7-h100.json").matrices
    assert j.values[0][0] is None and j.values[0][1] == 381.0 and j.direction == "->"


def test_p2p_sample_matrices():
    p = parse_file(FIX / "cuda-samples/synth-p2pBandwidthLatencyTest-h100-slow-gpu6.txt")
    names = [m.name for m in p.matrices]
    assert "Unidirectional P2P=Enabled (P2P Writes)" in names
    assert any(n.endswith("(CPU-initiated)") for n in names)
    uni = p.matrices[names.index("Unidirectional P2P=Enabled (P2P Writes)")]
    assert uni.values[0][0] is None and uni.values[6][0] == 94.7 and uni.values[0][1] == 389.9
    assert len(p.devices) == 8 and p.devices[6].name == "NVIDIA H100 80GB HBM3"


def test_perftest_units_and_interleaved_server_client():
    (one,) = parse_file(FIX / "perftest/superbench-ib_loopback_8M_size.log").rdma
    assert (one.test, one.device, one.link_type) == ("ib_write_bw", "ib0", "IB")
    assert len(one.rows) == 1  # server and client print the same row: counted once
    assert one.rows[0].avg_GBps == pytest.approx(24056.72 * 2**20 / 1e9)  # MB/sec is MiB/s
    (many,) = parse_file(FIX / "perftest/superbench-ib_loopback_all_sizes.log").rdma
    assert [r.size_B for r in many.rows] == [2**k for k in range(1, 24)]
    (gb,) = parse_file(FIX / "perftest/synth-ib_read_bw-report_gbits.log").rdma
    assert gb.test == "ib_read_bw" and gb.rows[0].avg_GBps == pytest.approx(388.73 / 8)


def test_a_log_mixing_tools_yields_all_of_them():
    mixed = (
        text("nccl-tests/superbench-nccl_allreduce.log")
        + "\n"
        + text("nvbandwidth/nvbandwidth-readme-h2d-ce.8gpu.txt")
        + "\n"
        + text("perftest/superbench-ib_loopback_8M_size.log")
    )
    p = parse_text(mixed, "all_reduce_perf_and_more.log")
    assert p.tools == ["nccl-tests", "nvbandwidth", "perftest"]
    assert len(p.nccl) == 1 and len(p.matrices) == 1 and len(p.rdma) == 1


# -- bad input: the file and the line, never a traceback ----------------------------------------------------
def _cut(rel: str, at_line: int, partial: int = 0) -> str:
    lines = text(rel).splitlines(keepends=True)
    out = "".join(lines[: at_line - 1])
    return out + lines[at_line - 1][:partial] if partial else out


@pytest.mark.parametrize(
    "rel, at, partial, pattern",
    [
        ("nccl-tests/superbench-nccl_allreduce.log", 40, 60, r"x.log:40: a row of \d+ fields"),
        (
            "nccl-tests/superbench-nccl_allreduce.log",
            40,
            0,
            r"x.log:39: the nccl-tests table ends here without",
        ),
        (
            "nvbandwidth/nvbandwidth-readme-d2d-write-ce.8gpu.txt",
            8,
            40,
            r"x.log:8: a matrix row of 4 cells under 8 columns: the table is cut short",
        ),
        (
            "nvbandwidth/nvbandwidth-readme-d2d-write-ce.8gpu.txt",
            3,
            0,
            r"x.log:2: device_to_device_memcpy_write_ce: the log ends before its matrix",
        ),
        ("perftest/superbench-ib_loopback_all_sizes.log", 44, 3, r"x.log:44: a perftest row cut short"),
    ],
)
def test_truncated_input_names_the_line(tmp_path, rel, at, partial, pattern):
    f = tmp_path / "x.log"
    f.write_text(_cut(rel, at, partial))
    with pytest.raises(ToolOutputError, match=pattern):
        parse_file(f)


@pytest.mark.parametrize(
    "content, pattern",
    [
        ("", "the file is empty"),
        ("hello\nworld\n", "no measurements found"),
        ('{"a": 1}', "JSON, but not from a tool"),
        ('{"results": [', "not valid"),
        ('{"results": [{"size": 8, "out_of_place": {"alg_bw": "x"}}], "config": {}}', r"results\[0\]"),
        (
            '{"nvbandwidth": {"testcases": [{"name": "t", "bandwidth_matrix": [["1.0", "??"]]}]}}',
            "neither a number",
        ),
    ],
)
def test_garbage_is_refused_with_the_file_name(tmp_path, content, pattern):
    f = tmp_path / "bad.txt"
    f.write_text(content)
    with pytest.raises(ToolOutputError, match=pattern) as e:
        parse_file(f)
    assert str(e.value).startswith(str(f))


def test_binary_folder_and_missing_files(tmp_path):
    b = tmp_path / "b.bin"
    b.write_bytes(b"\x00\x01\x02" * 10)
    for path, msg in ((b, "binary"), (tmp_path, "is a folder"), (tmp_path / "no", "cannot read")):
        with pytest.raises(ToolOutputError, match=msg):
            parse_file(path)


def test_a_known_unsupported_format_is_refused():
    with pytest.raises(ToolOutputError, match="no measurements found"):
        parse_file(FIX / "other/superbench-gpu_copy_bw_performance.log")


@pytest.mark.parametrize("bad", ["13x.44", "nan", "inf"])
def test_nccl_garbled_figure_names_its_line(bad):
    log = text("nccl-tests/superbench-nccl_allreduce.log").replace("63896  134.44", f"63896  {bad}")
    with pytest.raises(ToolOutputError, match=rf"y.log:50: algbw is '{bad}', not a number"):
        parse_text(log, "y.log")


def test_the_parser_package_ships_in_the_wheel():
    """setuptools lists packages by hand here: a package left out would be missing from the wheel."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib

    root = Path(__file__).resolve().parents[2]
    listed = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert "ddpdoctor.readers.tool_output" in listed


def _all_fixtures() -> list[Path]:
    return sorted(p for p in FIX.rglob("*") if p.is_file() and p.suffix in (".log", ".txt", ".json"))


@pytest.mark.parametrize("path", _all_fixtures(), ids=lambda p: p.name)
def test_every_cut_of_every_fixture_parses_or_names_its_problem(path):
    """A log cut anywhere (at a line end or in the middle of a line) is imported or refused with
    FILE[:LINE]: …, and whatever parses also builds a report: never another exception."""
    from ddpdoctor.baselines import list_profiles
    from ddpdoctor.model.imported.report import build_report

    profiles = list_profiles()
    lines = path.read_text().splitlines(keepends=True)
    cuts = {sum(len(x) for x in lines[:k]) + d for k in range(len(lines)) for d in (0, len(lines[k]) // 2)}
    full = path.read_text()
    for at in sorted(cuts)[:: max(1, len(cuts) // 150)]:
        try:
            parsed = parse_text(full[:at], "cut.log")
        except ToolOutputError as e:
            assert str(e).startswith("cut.log"), str(e)
            continue
        build_report([parsed], profiles)
