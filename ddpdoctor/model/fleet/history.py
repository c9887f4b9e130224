"""What a kept report records beside its checks (pure): the node set, the versions (torch, NCCL, CUDA,
driver), the NCCL variables and each node's topology in a comparable form. Read from the report
itself (ENV001's per-node data, GPU001's per-node topology snapshots, or `health`'s own snapshot)."""

from __future__ import annotations

import time

from ddpdoctor.core.report import Report
from ddpdoctor.model.nodes.environment import EnvPayload
from ddpdoctor.model.topology.payloads import TopologyPayload

VERSION_KEYS = ("torch", "nccl", "cuda", "driver", "python")


def _joined(values: list) -> str | None:
    seen = [str(v) for v in dict.fromkeys(values) if v not in (None, "")]
    return " | ".join(seen) if seen else None


def _env(report: Report) -> EnvPayload:
    env = report.check("ENV001")
    return EnvPayload.from_json(env.data) if env is not None else EnvPayload()


def versions(report: Report) -> dict[str, str | None]:
    per_node = _env(report).nodes
    out = {}
    for key in VERSION_KEYS:
        vals = [getattr(n, key) for n in per_node.values()]
        out[key] = _joined(vals) or (str(report.versions[key]) if report.versions.get(key) else None)
    return out


def nccl_variables(report: Report) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    for r in _env(report).per_rank.values():
        for k, v in r.env.items():
            if k.startswith("NCCL_"):
                found.setdefault(k, []).append(str(v))
    for snap in topologies(report).values():
        for k, v in (snap.get("env") or {}).items():
            found.setdefault(k, []).append(str(v))
    return {k: _joined(v) or "" for k, v in sorted(found.items())}


def topologies(report: Report) -> dict[str, dict]:
    """host -> topology snapshot (dict), from GPU001's per-node data or health's run.topology."""
    out = dict(report.run.topology)
    gpu = report.check("GPU001")
    out.update(TopologyPayload.from_json(gpu.data).snapshots() if gpu is not None else {})
    return out


def topology_signature(snap: dict) -> dict:
    """The parts of a snapshot that make a node what it is (not counters, not notes)."""
    return {
        "gpus": [g.get("name") for g in snap.get("gpus") or [] if isinstance(g, dict)],
        "driver": snap.get("driver_version") or None,
        "nics": sorted(
            f"{n.get('name')}:" + ",".join(f"{p.get('rate')}/{p.get('state')}" for p in n.get("ports") or []
                                            if isinstance(p, dict))
            for n in snap.get("nics") or [] if isinstance(n, dict)),
        "paths": snap.get("paths") or {},
        "interfaces": sorted(f"{i.get('name')}:{'up' if i.get('up') else 'down'}"
                             for i in snap.get("interfaces") or [] if isinstance(i, dict)),
    }


def meta(report: Report, valid_for_s: float) -> dict:
    nodes = [str(n) for n in report.run.nodes]
    return {
        "nodes": sorted(nodes),
        "versions": versions(report),
        "nccl_variables": nccl_variables(report),
        "topology": {h: topology_signature(s) for h, s in sorted(topologies(report).items())},
        "created": report.created,
        "valid_until": report.created + valid_for_s,
    }


def entry_name(report: Report, nodes_key: str) -> str:
    """``20261125T153000Z-<nodes key>.json``: sorts by time; the nodes key groups runs on one node set."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(report.created)) + f"-{nodes_key}.json"


def nodes_key(nodes: list[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(sorted(nodes)).encode()).hexdigest()[:12]
