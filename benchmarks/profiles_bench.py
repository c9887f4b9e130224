"""What profiles add to the end of a run: loading and validating every shipped profile, and detecting
plus judging on reports of growing size (what rank 0 does once when it writes the report).

    python benchmarks/profiles_bench.py            # 20 runs each
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402


def _timed(fn, runs: int) -> str:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    ms = [s * 1e3 for s in samples]
    return f"median {statistics.median(ms):.2f} ms, min {min(ms):.2f}, max {max(ms):.2f} over {runs} run(s)"


def big_report(nodes: int):
    """A report as `topo --from` builds it from one H100 snapshot per node, plus BW001 and P2P001."""
    from ddpdoctor.core.report import CheckResult, Report
    from ddpdoctor.core.run_info import RunInfo
    from ddpdoctor.model.topology.node import NodeTopology
    from ddpdoctor.runtime.topo_offline import diagnose

    snap = json.loads((REPO / "tests/topo/data/hgx-h100-a.json").read_text())
    topo = []
    for i in range(nodes):
        n = NodeTopology.from_dict(snap)
        n.hostname = f"node{i}"
        topo.append(n)
    ranks = [
        {"rank": i * 8 + j, "node_rank": i, "local_rank": j, "hostname": f"node{i}"}
        for i in range(nodes)
        for j in range(8)
    ]
    n = len(ranks)
    labels = [f"r{r['rank']}@{r['hostname']}" for r in ranks]
    values = [[None if a == b else (370.0 if a // 8 == b // 8 else 45.0) for b in range(n)] for a in range(n)]
    sizes = [2**k for k in range(10, 31, 2)]
    bw = {"busbw": {"all_reduce": {"points": [[s, 340.0] for s in sizes]}}, "world_size": n, "nnodes": nodes}
    checks = diagnose(topo) + [
        CheckResult("BW001", "sweep", data=bw),
        CheckResult("P2P001", "p2p", data={"matrix": {"labels": labels, "values": values}}),
    ]
    return Report(
        run=RunInfo(backend="nccl", world_size=n, nodes=[t.hostname for t in topo]),
        ranks=ranks,
        checks=checks,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args()
    from ddpdoctor.baselines import apply_profile, list_profiles, resolve_profile

    print(f"machine: {machine()}")
    print(f"load + validate all {len(list_profiles())} shipped profiles: {_timed(list_profiles, args.runs)}")
    for nodes in (1, 16, 64):
        rep = big_report(nodes)

        def detect_and_judge(rep=rep):
            profile, how, det = resolve_profile(rep)
            assert profile is not None and profile.name == "dgx-h100", profile
            apply_profile(rep, profile, how, det)

        print(
            f"{nodes:3d} node(s) x 8 ranks: resolve_profile + apply_profile: "
            f"{_timed(detect_and_judge, args.runs)}"
        )


if __name__ == "__main__":
    main()
