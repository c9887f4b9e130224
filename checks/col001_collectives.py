"""Collective correctness: all_reduce, broadcast, all_gather, reduce_scatter and barrier, checked exactly.

Every rank contributes values that depend on its rank and on the element index, so a wrong sum, a
stale buffer, a swapped chunk or a rank that reduced the wrong data shows up as a mismatch. Values are
small integers in float32, exact under any reduction order. Each rank checks its own result; rank 0
names the ranks whose data was wrong and the first mismatching element.
"""

from __future__ import annotations

from ddpdoctor.core.report import Finding, Severity
from ddpdoctor.core.summary import Summary
from ddpdoctor.core.world import WorldInfo

CODE = "COL001"
TITLE = "Collective correctness"
KIND = "cluster"
ORDER = 30
BUDGET_S = 20.0
SUITES = ("quick", "full")

# An odd length catches chunking bugs; a larger one crosses gloo/NCCL's internal chunk sizes.
LENGTHS = (7, 262_147)


def _compare(got, expected) -> dict:
    import torch

    bad = (got != expected).nonzero()
    if bad.numel() == 0:
        return {"ok": True}
    k = int(bad[0, 0]) if bad.dim() > 1 else int(bad[0])
    return {
        "ok": False,
        "bad_elements": int(bad.shape[0]),
        "first_bad": {"index": k, "got": float(got.flatten()[k]), "expected": float(expected.flatten()[k])},
        "length": int(torch.numel(got)),
    }


def run(ctx) -> dict:
    import torch
    import torch.distributed as dist

    n, r, dev = ctx.world_size, ctx.rank, ctx.device
    out: dict[str, dict] = {}

    def record(name: str, res: dict) -> None:
        prev = out.get(name)
        if prev is None or prev.get("ok", True):
            out[name] = res

    for length in LENGTHS:
        idx = torch.arange(length, device=dev, dtype=torch.float32) % 13
        # all_reduce(sum): sum_r (r + 1 + idx) = n(n+1)/2 + n*idx
        t = idx + (r + 1)
        with ctx.op(f"all_reduce {length} floats"):
            dist.all_reduce(t)
        record("all_reduce", _compare(t, idx * n + n * (n + 1) / 2))

        # broadcast from the first and the last rank
        for root in sorted({0, n - 1}):
            t = idx * (root + 2) if r == root else torch.full_like(idx, -1.0)
            with ctx.op(f"broadcast {length} floats from rank {root}"):
                dist.broadcast(t, src=root)
            record("broadcast", _compare(t, idx * (root + 2)))

        # all_gather: chunk j must be rank j's contribution
        mine = idx + 100 * r
        chunks = [torch.empty_like(idx) for _ in range(n)]
        with ctx.op(f"all_gather {length} floats"):
            dist.all_gather(chunks, mine)
        record("all_gather", _compare(torch.stack(chunks), torch.stack([idx + 100 * j for j in range(n)])))

        # reduce_scatter(sum): rank r gets sum over senders s of chunk r of s = sum_s (idx + s + r)
        inputs = [idx + s_chunk + r for s_chunk in range(n)]
        got = torch.empty_like(idx)
        with ctx.op(f"reduce_scatter {length} floats"):
            dist.reduce_scatter(got, inputs)
        record("reduce_scatter", _compare(got, idx * n + r * n + n * (n - 1) / 2))

    with ctx.op("barrier"):
        ctx.barrier()
    out["barrier"] = {"ok": True}
    return {"ops": out}


def summarize(results: dict[int, dict | None], world: WorldInfo) -> Summary:
    findings: list[Finding] = []
    ops = ["all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier"]
    table: dict[str, dict] = {}
    for op in ops:
        bad = {r: d["ops"][op] for r, d in results.items() if d and not d.get("ops", {}).get(op, {"ok": False})["ok"]}
        table[op] = {"ok_ranks": sorted(r for r, d in results.items() if d and r not in bad), "bad_ranks": sorted(bad)}
        if bad:
            first_rank = min(bad)
            fb = bad[first_rank].get("first_bad") or {}
            findings.append(
                Finding(
                    CODE,
                    Severity.ERROR,
                    f"{op}: ranks {sorted(bad)} got wrong data (rank {first_rank}, element {fb.get('index')}: "
                    f"got {fb.get('got')}, expected {fb.get('expected')})",
                    where={"ranks": sorted(bad), "nodes": sorted({world.host_of(r) for r in bad})},
                    evidence={"op": op, "per_rank": {str(r): v for r, v in bad.items()}},
                    hint="wrong results with no error point at faulty hardware (GPU memory, NIC, cable) or a "
                    "broken NCCL/driver install; re-run with NCCL_ALGO/NCCL_PROTO pinned to isolate it",
                )
            )
    n_ok = sum(1 for d in results.values() if d)
    text = (
        f"5 collectives exact on {n_ok} rank{'' if n_ok == 1 else 's'}"
        if not findings
        else f"wrong data in {', '.join(op for op in ops if table[op]['bad_ranks'])}"
    )
    return Summary(findings=findings, data={"ops": table, "lengths": list(LENGTHS)}, summary=text)
