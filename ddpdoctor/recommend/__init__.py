"""Recommendations from a report: each builder reads the measured figures and says what to set.

``recommend_from_report(report, options)`` runs every builder; each returns Recommendations with the
value, the evidence measured on this cluster and a confidence, or "keep the default" with the reason.
Pure (no torch): rank 0 calls it when it writes the report, ``ddpdoctor recommend REPORT.json`` on a
saved report. ``options``: see docs/architecture.md, "Recommendations and profiles".
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.core.report import Recommendation, Report


def recommend_from_report(report: Report, options: dict[str, Any] | None = None) -> list[Recommendation]:
    from ddpdoctor.recommend import bucket_cap, layouts, nccl_algo

    options = dict(options or {})
    recs: list[Recommendation] = []
    recs += bucket_cap.recommend(report, options.get("model"))
    recs += nccl_algo.recommend(report, options)
    recs += layouts.recommend(report, options.get("layout"))
    return recs
