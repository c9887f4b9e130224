"""Writing the fleet outputs of a report: Prometheus text, Kubernetes labels, the history entry, and
(for `health`) the JSON report, each through the output boundary (temp file beside it, then a rename:
node_exporter's textfile collector reads only ``*.prom``, never the hidden temp file)."""

from __future__ import annotations

import json
from pathlib import Path

from ddpdoctor.boundary.outputs import write_output
from ddpdoctor.core.report import Report
from ddpdoctor.model.fleet import k8s_labels as _k8s
from ddpdoctor.model.fleet import metrics as _metrics


def write_outputs(report: Report, *, json_path: str | None = None, metrics: str | None = None,
                  k8s_labels: list[str] = (), valid_for_s: float = 86400.0, history: str | None = None) -> list[str]:
    written = []
    if json_path:
        write_output(json_path, json.dumps(report.to_dict(), indent=1, default=str) + "\n", "--json")
        written.append(json_path)
    if metrics:
        write_output(metrics, _metrics.render(report), "--metrics")
        written.append(metrics)
    if k8s_labels:
        items = _k8s.node_labels(report, valid_for_s)
        for path in k8s_labels:
            text = (json.dumps(_k8s.labels_json(items), indent=1) + "\n" if str(path).endswith(".json")
                    else _k8s.kubectl_lines(items))
            write_output(path, text, "--k8s-labels")
            written.append(str(path))
    if history:
        from ddpdoctor.runtime.history_store import keep

        written.append(str(keep(Path(history), report, valid_for_s)))
    return written


