"""Real evidence fixtures (tests/fixtures/hang) with their stack paths pointed at this checkout, and
small builders of synthetic evidence."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hang"
SCRIPTS = FIXTURES / "scripts"
RECORDED = "/work/wt/hangcore/tests/fixtures/hang/scripts"  # where the fixtures were produced


def fixture(name: str, dest: Path) -> Path:
    """A copy of fixture folder ``name`` under ``dest`` whose stack paths name this checkout's scripts."""
    out = dest / name
    shutil.copytree(FIXTURES / name, out)
    for p in out.rglob("*.json"):
        p.write_text(p.read_text().replace(RECORDED, str(SCRIPTS)))
    return out


def entry(
    seq: int,
    op: str = "all_reduce",
    sizes=((8,),),
    dtype: str = "Float",
    retired: bool = True,
    pg: tuple[str, str] = ("0", "default_pg"),
    created: int = 0,
    p2p: bool = False,
) -> dict:
    return {
        "record_id": seq,
        "pg_id": int(pg[0]),
        "process_group": list(pg),
        "collective_seq_id": 0 if p2p else seq,
        "p2p_seq_id": seq if p2p else 0,
        "op_id": seq,
        "profiling_name": f"gloo:{op}",
        "input_sizes": [list(s) for s in sizes],
        "input_dtypes": [dtype] * len(sizes),
        "output_sizes": [list(s) for s in sizes],
        "state": "scheduled",
        "retired": retired,
        "is_p2p": p2p,
        "time_created_ns": created or 1_000_000_000 * seq,
        "timeout_ms": 30000,
    }


def frame(file: str, line: int, function: str, code: str = "", args: dict | None = None) -> dict:
    d = {"file": file, "line": line, "function": function, "code": code}
    if args:
        d["locals"] = {k: str(v) for k, v in args.items()}
    return d


C10D = "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py"


def rank_doc(
    rank: int,
    world: int,
    entries: list[dict] | None = None,
    frames: list[dict] | None = None,
    host: str | None = None,
    exception: dict | None = None,
    groups: dict | None = None,
) -> dict:
    return {
        "format": "ddpdoctor-hang-evidence",
        "version": 1,
        "rank": rank,
        "world_size": world,
        "local_rank": rank,
        "node_rank": 0,
        "host": host or f"node{rank // 2}",
        "pid": 100 + rank,
        "captured_ns": 20_000_000_000,
        "reason": "hang",
        "flight_recorder": None
        if entries is None
        else {
            "version": "2.10",
            "pg_config": groups
            or {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}},
            "pg_status": {},
            "entries": entries,
        },
        "threads": [{"id": 1, "name": "MainThread", "main": True, "frames": frames or []}],
        "exception": exception,
    }


def write_ranks(dest: Path, docs: list[dict]) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for d in docs:
        (dest / f"rank-{d['rank']}.json").write_text(json.dumps(d))
    return dest
