"""Assembles the Report on rank 0 from the gathered results."""

from __future__ import annotations

import platform
import time
from typing import Any

from ddpdoctor.core.report import CheckResult, Report
from ddpdoctor.core.run_info import RunInfo
from ddpdoctor.runtime.worker_config import WorkerConfig


def runtime_versions(backend: str) -> dict[str, Any]:
    import torch

    v: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    v["cuda"] = torch.version.cuda
    try:
        if torch.cuda.is_available():
            nccl = torch.cuda.nccl.version()
            v["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    except Exception:
        pass
    v["backend"] = backend
    return v


def build_report(
    *,
    cfg: WorkerConfig,
    infos: list[dict],
    ready: dict[int, dict | None],
    backend: str,
    results: list[CheckResult],
    abort_reason: str | None,
    lost_ranks: list[int],
    started: float,
) -> Report:
    ranks = []
    for info in infos:
        r = dict(info)
        rd = ready.get(int(info["rank"])) or {}
        if rd.get("pg_init_s") is not None:
            r["pg_init_s"] = rd["pg_init_s"]
        ranks.append(r)
    hosts = []
    for r in sorted(ranks, key=lambda r: (r.get("node_rank", 0), r["rank"])):
        if r.get("hostname") not in hosts:
            hosts.append(r.get("hostname"))
    lost_nodes = sorted({ranks[r]["hostname"] for r in lost_ranks if r < len(ranks)})
    report = Report(
        run=RunInfo(
            backend=backend,
            world_size=len(infos),
            nodes=hosts,
            nnodes=len(hosts),
            endpoint=cfg.endpoint,
            rdzv_id=cfg.rdzv_id,
            options=cfg.options,
            complete=abort_reason is None,
            aborted_reason=abort_reason,
            lost_ranks=lost_ranks,
            lost_nodes=lost_nodes,
            duration_s=round(time.time() - started, 3),
            launch_t0=cfg.launch_t0,
        ),
        ranks=ranks,
        versions=runtime_versions(backend),
        checks=results,
    )
    attach_profile(report, cfg.profile)
    attach_recommendations(report, cfg.recommend)
    attach_bad_nodes(report)
    return report


def attach_bad_nodes(report: Report) -> None:
    """The nodes the verdict blames, as a list and as one Slurm hostlist (`check --bad-nodes`)."""
    from ddpdoctor.model.nodes.bad_nodes import bad_nodes_entry

    report.run.bad_nodes = bad_nodes_entry(report)


def attach_profile(report: Report, wanted: str | None) -> None:
    """Judge the measured bandwidth against the chosen or detected hardware profile ("% of expected")."""
    from ddpdoctor.baselines import ProfileError, apply_profile, forget_profile, resolve_profile

    if wanted == "none":
        forget_profile(report)
        report.run.profile = {"name": None, "how": "off"}
        return
    try:
        profile, how, found = resolve_profile(report, wanted)
        if profile is not None:
            apply_profile(report, profile, how, found)
    except ProfileError as e:  # checked before launch; a file changed since then must not cost the report
        report.run.add_warning(f"profile: {e}")


def attach_recommendations(report: Report, options: dict) -> None:
    """Recommendations are computed from the report itself (pure)."""
    from ddpdoctor.recommend import recommend_from_report

    try:
        report.recommendations = list(recommend_from_report(report, options))
    except Exception as e:  # a recommendation bug must not cost the user the report
        report.run.add_warning(f"recommendations failed: {type(e).__name__}: {e}")
