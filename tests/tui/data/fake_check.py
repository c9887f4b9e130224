"""A stand-in for `ddpdoctor check --events E --json R` that replays a sample run with delays.

The live-mode tests and the benchmark point the app at it through `ddpdoctor tui --check-cmd`.
Options: --delay S between events (default 0.05), --report PATH (the report to write at the end,
default report_2x2_gloo.json), --no-report (exit 1 without one), --progress N (extra progress events
per check, for the benchmark's stream), --hang (never finish: tests stop it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--events", required=True)
    p.add_argument("--json", required=True)
    p.add_argument("--delay", type=float, default=0.05)
    p.add_argument("--report", default=str(HERE / "report_2x2_gloo.json"))
    p.add_argument("--no-report", action="store_true")
    p.add_argument("--progress", type=int, default=3)
    p.add_argument("--hang", action="store_true")
    args, _unknown = p.parse_known_args()  # the real check's options pass through unused
    report = json.loads(Path(args.report).read_text())
    with open(args.events, "w", buffering=1) as out:  # line-buffered: the app sees each event
        return replay(out, report, args)


def replay(out, report: dict, args: argparse.Namespace) -> int:

    def emit(event: str, **fields) -> None:
        out.write(json.dumps({"t": time.time(), "event": event, **fields}) + "\n")
        time.sleep(args.delay)

    run = report["run"]
    checks = report["checks"]
    emit(
        "run_start",
        world_size=run["world_size"],
        nodes=run["nodes"],
        backend=run["backend"],
        checks=[{"code": c["code"], "title": c["title"]} for c in checks],
        endpoint=run.get("endpoint"),
    )
    for r in report["ranks"]:
        emit("rendezvous", rank=r["rank"], node_rank=r["node_rank"], hostname=r["hostname"], seconds=1.2)
    print("fake check: rendezvous done", flush=True)  # goes to the app's log file, not its screen
    for c in checks:
        emit("check_start", code=c["code"], title=c["title"], budget_s=20.0)
        for k in range(args.progress):
            emit(
                "progress",
                code=c["code"],
                rank=k % run["world_size"],
                done=k + 1,
                total=args.progress,
                message=f"step {k + 1}",
            )
        if args.hang:
            time.sleep(3600)
        emit(
            "check_end",
            code=c["code"],
            status=c["status"],
            summary=c["summary"],
            duration_s=c["duration_s"],
            findings=len(c["findings"]),
        )
    if args.no_report:
        emit("log", level="error", message="fake check: no report written")
        emit("run_end", exit_code=2)
        return 2
    shutil.copyfile(args.report, args.json)
    failed = any(c["status"] in ("failed", "timed_out", "error") for c in checks)
    emit("run_end", exit_code=int(failed), report=args.json)
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
