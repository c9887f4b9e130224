"""Synthetic ALG001 per-rank payloads (what run() returns on each rank), for the pure halves' tests."""

from __future__ import annotations

from ddpdoctor.core.world import WorldInfo

MiB = 1 << 20


def world(n: int = 16, per_node: int = 8, backend: str = "nccl") -> WorldInfo:
    return WorldInfo.from_dicts(
        [{"rank": r, "local_rank": r % per_node, "node_rank": r // per_node, "hostname": f"node{r // per_node}",
          "local_world_size": per_node} for r in range(n)],
        backend=backend,
    )  # fmt: skip


def rank_payloads(
    time_us,
    *,
    n: int = 16,
    per_node: int = 8,
    arms=("default", "Ring", "Tree"),
    sizes=(1 * MiB, 25 * MiB, 256 * MiB),
    reps: int = 2,
    job_sizes=(1 * MiB, 25 * MiB),
    fail: dict | None = None,
    env_override: dict | None = None,
    nccl_version: str = "2.21.5",
) -> dict[int, dict]:
    """``time_us(arm, rep, size, rank)`` gives each rank's time; ``fail[(arm, rep, rank)]`` an error."""
    fail = fail or {}
    env_override = env_override or {}
    order = [[arm, rep] for rep in range(reps) for arm in arms]
    out = {}
    for r in range(n):
        launches = []
        for arm, rep in order:
            if (arm, rep, r) in fail:
                launches.append(
                    {
                        "arm": arm,
                        "rep": rep,
                        "ok": False,
                        "error": fail[(arm, rep, r)],
                        "log_tail": f"rank {r} log: NCCL WARN something",
                        "seconds": 3.0,
                    }
                )
                continue
            env = env_override.get((arm, r), None if arm == "default" else arm)
            launches.append({
                "arm": arm, "rep": rep, "ok": True, "seconds": 5.0, "nccl_algo_env": env,
                "nccl_read_algo": None if arm == "default" else arm, "nccl_version": nccl_version, "init_s": 1.0,
                "pid": 1000 * (len(launches) + 1) + r,
                "sizes": [{"size_B": s, "time_us": time_us(arm, rep, s, r), "iters": 20, "exact": True}
                          for s in sizes],
            })  # fmt: skip
        out[r] = {
            "applies": True, "backend": "nccl", "test_mode": False, "arms": list(arms), "sizes_B": list(sizes),
            "job_sizes_B": list(job_sizes), "reps": reps, "iters": 20, "nccl_version": nccl_version,
            "gpu": {"name": "NVIDIA H100 80GB HBM3", "sm": 90, "nvlinks": 18}, "nvls_capable": False,
            "inherited_nccl_algo": None, "local_world_size": per_node, "order": order, "launches": launches,
            "stopped_early": None,
        }  # fmt: skip
    return out


def alpha_beta(lat_us: float, algbw_GBps: float):
    """A time function: lat + size / algbw, the same on every rank and repetition."""
    return lambda arm, rep, size, rank: lat_us + size / (algbw_GBps * 1e3)
