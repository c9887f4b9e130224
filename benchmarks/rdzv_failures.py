"""How long `ddpdoctor check` takes to name an impossible rendezvous, and what it says (issue 24).

Cases: the endpoint's port taken by another program (no --node-rank), a --local-addr that is not an
address of this node, and a 2-node run whose second node never comes with --rdzv-timeout 5. Each runs
`--select ENV001` (the fastest check) on this machine, --runs times; prints the wall times and the
message. Before issue 24 (main at 5e18c91, this 2-core machine under load): 134.7 s "no node arrived",
119.5 s "arrived: 999.1.1.1", 17.5 s. torchrun alone with join_timeout=5 takes ~10.6 s here (5.6 s of it
importing torch), so the last case cannot go much below that.

    python benchmarks/rdzv_failures.py [--runs 1]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time

from _common import machine


def run(argv: list[str]) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "check", "--select", "ENV001", *argv],
                       capture_output=True, text=True, timeout=600)
    last = (p.stderr.strip().splitlines() or [""])[-1]
    return time.perf_counter() - t0, p.returncode, last


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    print(machine())
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        cases = {
            "port taken": ["--rdzv-endpoint", f"127.0.0.1:{port}"],
            "--local-addr 999.1.1.1": ["--local-addr", "999.1.1.1"],
            "--nodes 2, one node, --rdzv-timeout 5": ["--nodes", "2", "--rdzv-endpoint", "127.0.0.1:{free}",
                                                       "--rdzv-timeout", "5"],
        }
        for name, argv in cases.items():
            for _ in range(args.runs):  # a fresh free port each run: the last run's may be in TIME_WAIT
                s, rc, msg = run([a.format(free=free_port()) for a in argv])
                print(f"{name:40s} {s:6.1f} s  exit {rc}  {msg}")


if __name__ == "__main__":
    main()
