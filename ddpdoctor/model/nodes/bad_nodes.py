"""The nodes a report's verdict blames (pure), for `check --bad-nodes` and the JSON report.

A node is blamed when a failed check has an error finding that localizes to it: a slow node, a lost
node or one that never arrived, a hardware fault seen on it (wrong data, odd topology), or skew where
it is the odd one out. A finding that names every node of a multi-node run blames none (nodes that
disagree without a majority, a path between two nodes is a link, not a node): excluding them all would
leave nothing to run on, and nothing says which one is at fault.
"""

from __future__ import annotations

from ddpdoctor.core.report import Report, Severity
from ddpdoctor.core.run_info import BadNodes
from ddpdoctor.model.nodes.hostlist import compress_hostlist


def blamed_nodes(report: Report) -> list[str]:
    """Blamed hostnames in the run's node order (unknown names last, sorted)."""
    all_nodes = list(report.run.nodes)
    blamed: set[str] = set(report.run.lost_nodes)
    for c in report.checks:
        if not c.status.failing:
            continue
        for f in c.findings:
            if f.severity is not Severity.ERROR:
                continue
            names = [f.where["node"]] if f.where.get("node") else list(f.where.get("nodes") or [])
            names = [n for n in names if isinstance(n, str) and n]
            if len(all_nodes) > 1 and set(names) >= set(all_nodes):
                continue
            blamed.update(names)
    known = [n for n in all_nodes if n in blamed]
    return known + sorted(blamed - set(known))


def bad_nodes_entry(report: Report) -> BadNodes:
    """What the report's ``run.bad_nodes`` holds: the list and the Slurm hostlist expression."""
    nodes = blamed_nodes(report)
    return BadNodes(tuple(nodes), compress_hostlist(nodes))
