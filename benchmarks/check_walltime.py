"""Default `ddpdoctor check` wall time on this machine, and what each check costs beyond its own work.

    python benchmarks/check_walltime.py [--runs 3]

Prints:
- the whole command's wall time (target ≤ 20 s on the 2-core CPU box);
- a bare `torchrun` of a two-rank gloo script (init, one all_reduce, exit) and the check's overhead over
  it: wall − bare torchrun − the run's in-run time (target ≤ 1 s);
- a check run of one few-ms check (RDZ001) minus the bare torchrun, in wall and in CPU time (user + sys
  of the whole process tree, which a busy machine changes far less than the wall time), and the load;
- where the time goes, both commands side by side (medians): before the ranks (start-up: torchrun, the
  ranks' imports, rendezvous, process group; for check also the CLI before torchrun), and after them
  (the last rank's work done to the command's exit: torchrun's teardown; for check also the report);
- from the event stream of the last run, per check: its slot (check_start to the next check_start: all it
  costs), the ranks' own time in it (first rank_check_start to last rank_check_end) and the fixed cost
  (slot − ranks' time: the go, the result exchange, rank 0's judgement). Targets: a skipped check's slot
  ≤ 10 ms, a check's fixed cost ≤ 20 ms (medians).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from _common import describe, machine, time_command

TARGET_S = 20.0
OVERHEAD_TARGET_S = 1.0
SKIPPED_TARGET_MS = 10.0
FIXED_TARGET_MS = 20.0

BARE = textwrap.dedent("""
    import os, time
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    with open(os.environ["BARE_TIMES"], "a") as f:  # when this rank's work was done (unix time)
        f.write(f"{time.time()}\\n")
""")


def timed(argv: list[str], env: dict | None = None) -> tuple[float, float, float, float]:
    """(wall seconds, unix start, unix end, CPU seconds) of one run; the CPU time (user + sys of the whole
    process tree: torchrun waits for its ranks) reads the same on a busy machine, the wall time does not."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    (wall,) = time_command(argv, 1, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, start, time.time(), cpu


def per_check(events: list[dict]) -> list[dict]:
    """Slot, ranks' time and fixed cost of every check, from one run's events (times in ms)."""
    starts = [e for e in events if e["event"] == "check_start"]
    ends = {e["code"]: e for e in events if e["event"] == "check_end"}
    run_end = next((e["t"] for e in events if e["event"] == "run_end"), None)
    rows = []
    for k, s in enumerate(starts):
        nxt = starts[k + 1]["t"] if k + 1 < len(starts) else (run_end or ends[s["code"]]["t"])
        rs = [e["t"] for e in events if e["event"] == "rank_check_start" and e.get("code") == s["code"]]
        re_ = [e["t"] for e in events if e["event"] == "rank_check_end" and e.get("code") == s["code"]]
        ranks_ms = (max(re_) - min(rs)) * 1e3 if rs and re_ else 0.0
        slot_ms = (nxt - s["t"]) * 1e3
        rows.append({"code": s["code"], "status": ends.get(s["code"], {}).get("status", "?"), "slot_ms": slot_ms,
                     "ranks_ms": ranks_ms, "fixed_ms": slot_ms - ranks_ms})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as d:
        rj, ev, bare = Path(d) / "r.json", Path(d) / "ev.jsonl", Path(d) / "bare.py"
        bare.write_text(BARE)
        walls, bares, in_run, phases, minimal = [], [], [], [], []
        for _ in range(args.runs):  # interleaved, so both see the same load
            times = Path(d) / "bare_times"
            times.unlink(missing_ok=True)
            b_wall, b_start, b_end, b_cpu = timed([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                                            "--standalone", str(bare)], env={"BARE_TIMES": str(times)})
            b_done = max(float(x) for x in times.read_text().split())
            bares.append(b_wall)
            ev.unlink(missing_ok=True)
            wall, start, end, _ = timed([sys.executable, "-m", "ddpdoctor", "check", "-q", "--json", str(rj),
                                         "--events", str(ev)])
            walls.append(wall)
            rep = json.loads(rj.read_text())
            in_run.append(rep["run"]["duration_s"])
            evs = [json.loads(line) for line in ev.read_text().splitlines() if line.strip()]
            run_start = next(e["t"] for e in evs if e["event"] == "run_start")
            run_end = next(e["t"] for e in evs if e["event"] == "run_end")
            phases.append({"bare_up": b_done - b_start, "bare_down": b_end - b_done,
                           "cli_pre": rep["run"]["launch_t0"] - start, "up": run_start - start,
                           "down": end - run_end})
            # the fixed cost alone: one check of a few ms (RDZ001 reads the start-up timings)
            m_wall, _, _, m_cpu = timed([sys.executable, "-m", "ddpdoctor", "check", "-q", "--select", "RDZ001"])
            minimal.append({"wall": m_wall - b_wall, "cpu": m_cpu - b_cpu, "bare_cpu": b_cpu})
        events = evs
    med = statistics.median(walls)
    overheads = [w - b - r for w, b, r in zip(walls, bares, in_run)]
    over = statistics.median(overheads)
    print(f"ddpdoctor check (default: {rep['run']['world_size']} ranks, {rep['run']['backend']}): {describe(walls)}; "
          f"target ≤ {TARGET_S} s: {'met' if med <= TARGET_S else 'MISSED'}")
    print(f"bare torchrun (2 ranks: init, all_reduce, exit): {describe(bares)}")
    print(f"overhead over bare torchrun (wall − bare − in-run), per run: {', '.join(f'{o:.2f}' for o in overheads)} s; "
          f"median {over:.2f} s; target ≤ {OVERHEAD_TARGET_S} s: {'met' if over <= OVERHEAD_TARGET_S else 'MISSED'}")
    def listed(key: str) -> str:
        return ", ".join(f"{x[key]:.2f}" for x in minimal)

    def med_of(key: str) -> float:
        return statistics.median(x[key] for x in minimal)

    print(f"check --select RDZ001 (a few ms in-run) − bare torchrun, per run: wall {listed('wall')} s; "
          f"CPU {listed('cpu')} s (bare's CPU: median {med_of('bare_cpu'):.2f} s); medians: wall {med_of('wall'):.2f} s, "
          f"CPU {med_of('cpu'):.2f} s")
    print(f"load: {', '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min) on {os.cpu_count()} CPU(s); "
          f"bytecode cache: {'off (PYTHONDONTWRITEBYTECODE): every run compiles ddpdoctor' if sys.dont_write_bytecode else 'on'}")

    def m(key: str) -> float:
        return statistics.median(p[key] for p in phases)

    print(f"where the time goes (medians): before the ranks' work: bare {m('bare_up'):.2f} s, check {m('up'):.2f} s "
          f"(of which the CLI before torchrun {m('cli_pre'):.2f} s); after it: bare {m('bare_down'):.2f} s, "
          f"check {m('down'):.2f} s (run_end to exit)")
    rows = per_check(events)
    print("last run, per check (slot = all it costs; ranks = the ranks' own time; fixed = slot − ranks):")
    for c, row in zip(rep["checks"], rows):
        print(f"  {c['code']:<8} {c['status']:<10} slot {row['slot_ms']:8.1f} ms  ranks {row['ranks_ms']:8.1f} ms  "
              f"fixed {row['fixed_ms']:6.1f} ms  {c['summary'][:40]}")
    skipped = [r["slot_ms"] for r in rows if r["status"] == "skipped"]
    fixed = statistics.median(r["fixed_ms"] for r in rows)
    ok = med <= TARGET_S and over <= OVERHEAD_TARGET_S and fixed <= FIXED_TARGET_MS
    if skipped:
        sk = statistics.median(skipped)
        ok = ok and sk <= SKIPPED_TARGET_MS
        print(f"  skipped checks: median slot {sk:.1f} ms over {len(skipped)}; target ≤ {SKIPPED_TARGET_MS:g} ms: "
              f"{'met' if sk <= SKIPPED_TARGET_MS else 'MISSED'}")
    print(f"  fixed cost per check: median {fixed:.1f} ms over {len(rows)}; target ≤ {FIXED_TARGET_MS:g} ms: "
          f"{'met' if fixed <= FIXED_TARGET_MS else 'MISSED'}")
    print(f"  in-run total {rep['run']['duration_s']:.2f} s; the rest is torchrun start-up, rendezvous and exit")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
