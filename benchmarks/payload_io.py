"""What reading and writing a typed P2P001 payload costs at scale: a full matrix of RANKS ranks (bandwidth
and latency, one ``pairs`` object per directed pair, as P2P001 writes for a full plan). Every reader of a
report (recommendations, profile judging, TUI, diff) calls ``P2PPayload.from_json`` once; rank 0 calls
``to_json`` once when it writes the report. Prints the median of REPEAT runs of each, and json.loads of
the same payload for scale.

    python benchmarks/payload_io.py [--ranks 64,512,2048] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

from ddpdoctor.model.bandwidth.payloads import P2PPayload


def payload(n: int) -> dict:
    rng = random.Random(n)
    labels = [f"r{i}@node{i // 8}" for i in range(n)]
    bw = [[None if i == j else round(rng.uniform(1, 400), 6) for j in range(n)] for i in range(n)]
    lat = [[None if i == j else round(rng.uniform(2, 20), 3) for j in range(n)] for i in range(n)]
    pairs = [{"from": i, "to": j, "GBps": bw[i][j], "latency_us": lat[i][j]} for i in range(n) for j in range(n) if i != j]
    return {
        "matrix": {"unit": "GB/s", "labels": labels, "values": bw},
        "latency": {"unit": "us", "labels": labels, "values": lat},
        "size_B": 1 << 28, "mode": "pairs", "plan": "full", "rounds": n - 1, "target_s": 0.1, "pairs": pairs,
        "remeasured_alone": [], "unconfirmed": [], "pairs_measured": n * (n - 1), "pairs_possible": n * (n - 1),
        "ranks": [{"rank": i, "node_rank": i // 8, "local_rank": i % 8, "hostname": f"node{i // 8}"} for i in range(n)],
        "classes": {"intra_node": {"median_GBps": 300.0, "reference_GBps": 350.0, "pairs": 7 * n}},
        "outliers": [], "asymmetric": [], "localization": {"slow_nodes": [], "slow_ranks": [], "bad_links": []},
    }  # fmt: skip


def timed(fn, repeat: int) -> float:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="64,512,2048")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(machine())
    print(f"{'ranks':>6} {'pairs':>9} {'json.loads':>11} {'from_json':>10} {'to_json':>9}  (median of {args.repeat})")
    for n in (int(x) for x in args.ranks.split(",")):
        d = payload(n)
        text = json.dumps(d)
        p = P2PPayload.from_json(d)
        assert p.to_json() == d, "to_json must give back the payload it read"
        t_load = timed(lambda: json.loads(text), args.repeat)
        t_from = timed(lambda: P2PPayload.from_json(d), args.repeat)
        t_to = timed(p.to_json, args.repeat)
        print(f"{n:>6} {n * (n - 1):>9} {t_load:>10.3f}s {t_from:>9.3f}s {t_to:>8.3f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
