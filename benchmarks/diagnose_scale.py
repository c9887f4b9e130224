"""How long `ddpdoctor hang` takes on big evidence: RANKS rank files with ENTRIES Flight Recorder
entries each (2000 is torch's default buffer), one rank missing the last all_reduce. Prints the time
to read + validate the files and the time to diagnose, per run, and checks the verdict is right.

    python benchmarks/diagnose_scale.py [--ranks 64,256] [--entries 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine

from ddpdoctor.model.hang.analysis import diagnose
from ddpdoctor.readers.hang_files import collector_paused, read_evidence


def _entry(seq: int, retired: bool = True) -> dict:
    return {
        "record_id": seq,
        "pg_id": 0,
        "process_group": ["0", "default_pg"],
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": "gloo:all_reduce",
        "input_sizes": [[1024, 1024]],
        "input_dtypes": ["Float"],
        "output_sizes": [[1024, 1024]],
        "output_dtypes": ["Float"],
        "state": "scheduled",
        "retired": retired,
        "is_p2p": False,
        "time_created_ns": seq * 10**9,
        "timeout_ms": 600000,
    }


def write_evidence(folder: Path, ranks: int, entries: int, culprit: int) -> int:
    folder.mkdir(parents=True)
    done = [_entry(s) for s in range(1, entries)]
    size = 0
    for r in range(ranks):
        fr = {
            "version": "2.10",
            "pg_config": {},
            "pg_status": {},
            "entries": done + ([] if r == culprit else [_entry(entries, retired=False)]),
        }
        doc = {
            "format": "ddpdoctor-hang-evidence",
            "version": 1,
            "rank": r,
            "world_size": ranks,
            "host": f"node{r // 8}",
            "captured_ns": (entries + 300) * 10**9,
            "reason": "hang",
            "flight_recorder": fr,
            "exception": None,
            "threads": [
                {
                    "id": 1,
                    "name": "MainThread",
                    "main": True,
                    "frames": [
                        {
                            "file": "/job/train.py",
                            "line": 40 if r == culprit else 12,
                            "function": "main",
                            "code": "",
                        }
                    ],
                }
            ],
        }
        p = folder / f"rank-{r}.json"
        p.write_text(json.dumps(doc))
        size += p.stat().st_size
    return size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="64,256")
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    for ranks in (int(x) for x in args.ranks.split(",")):
        tmp = Path(tempfile.mkdtemp(prefix="ddpd-diagscale-"))
        try:
            culprit = ranks // 2
            size = write_evidence(tmp / "ev", ranks, args.entries, culprit)
            reads, diags = [], []
            for _ in range(args.repeat):
                with collector_paused():  # as `ddpdoctor hang` (analyse) does
                    t0 = time.perf_counter()
                    ev = read_evidence([tmp / "ev"])
                    t1 = time.perf_counter()
                    d = diagnose(ev)
                    t2 = time.perf_counter()
                reads.append(t1 - t0)
                diags.append(t2 - t1)
                if d.culprit_ranks != [culprit] or d.seq != args.entries:
                    sys.exit(f"wrong verdict: {d.verdict}")
            print(
                f"{ranks} ranks x {args.entries} FR entries ({size / 1e6:.0f} MB of JSON): "
                f"read+validate median {statistics.median(reads):.2f} s, "
                f"diagnose median {statistics.median(diags):.2f} s over {args.repeat} run(s); "
                f"verdict: {d.verdict}"
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
