"""How fast `ddpdoctor import` reads a large nccl-tests log: a ~10 MB log of many all_reduce and
all_gather runs (16 ranks on 2 hosts, 1 KiB-8 GiB, NCCL INFO lines between rows as real logs have
them), written in the format of tests/fixtures/tool-output/synthesize.py.

    python benchmarks/import_bench.py            # 5 runs each, ~10 MB
    python benchmarks/import_bench.py --mb 50 --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "tool-output"))
from _common import describe, machine, time_command  # noqa: E402
from synthesize import nccl_block, sizes  # noqa: E402


def big_log(path: Path, mb: float, chatter: int = 16) -> int:
    """Runs one after another until the log reaches ``mb`` MB; returns how many runs. ``chatter``:
    NCCL INFO lines before each table's rows, as NCCL_DEBUG=INFO logs have them."""
    hosts = ["gpu-node-a", "gpu-node-b"]
    run = 0
    with path.open("w") as f:
        while f.tell() < mb * 1e6:
            op = ("all_reduce", "all_gather")[run % 2]
            lines = nccl_block(op, hosts, 8, 300.0 + run % 50, sizes(1024))
            lines[30:30] = [
                f"gpu-node-a:{4100 + k % 8}:{4200 + k} [{k % 8}] NCCL INFO Channel {k % 32:02d}/0 : "
                f"{k % 16}[{k % 8}] -> {(k + 1) % 16}[{(k + 1) % 8}] [send] via NET/IB/{k % 8}/GDRDMA"
                for k in range(chatter)
            ]
            f.write("\n".join(lines) + "\n")
            run += 1
    return run


def cpu_check() -> str:
    t0 = time.perf_counter()
    s = 0
    for i in range(3_000_000):
        s += i
    return f"a 3M-step Python loop took {time.perf_counter() - t0:.2f} s (about 0.15 s on an idle core)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=10.0, help="log size in MB (default 10)")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    from ddpdoctor.baselines import list_profiles
    from ddpdoctor.model.imported.report import build_report
    from ddpdoctor.readers.tool_output import parse_file

    print(f"machine: {machine()} (shared; figures are noisy)")
    print(f"CPU now: {cpu_check()}")
    with tempfile.TemporaryDirectory() as tmp:
        chatty = Path(tmp) / "nccl_debug_info.log"
        n = big_log(chatty, args.mb, chatter=3000)
        t = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            parse_file(chatty)
            t.append(time.perf_counter() - t0)
        mb = chatty.stat().st_size / 1e6
        print(
            f"{mb:.1f} MB NCCL_DEBUG=INFO log, {n} runs: parse_file {describe(t)} ({mb / statistics.median(t):.0f} MB/s)"
        )
        log = Path(tmp) / "all_reduce_perf.log"
        n = big_log(log, args.mb)
        size = log.stat().st_size
        print(f"{size / 1e6:.1f} MB log of {n} nccl-tests runs, {sum(1 for _ in log.open()):,} lines:")
        parse, build = [], []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            parsed = parse_file(log)
            t1 = time.perf_counter()
            build_report([parsed], list_profiles())
            t2 = time.perf_counter()
            parse.append(t1 - t0)
            build.append(t2 - t1)
        print(f"parse_file:   {describe(parse)} ({size / 1e6 / statistics.median(parse):.0f} MB/s)")
        print(f"build_report: {describe(build)} (grouping, curves, α-β fits, profile detection and verdicts)")
        cli = time_command(
            [sys.executable, "-m", "ddpdoctor", "import", str(log), "--json", str(Path(tmp) / "r.json")],
            args.runs,
        )
        print(
            f"ddpdoctor import --json (new process; prints {n // 2} BW001 results, writes the JSON): {describe(cli)}"
        )


if __name__ == "__main__":
    main()
