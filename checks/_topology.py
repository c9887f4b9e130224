"""Shared halves of the hardware topology checks (GPU001, NVL001, PCI001, NUMA001, IB001, GDR001,
NCCL001). Not a check itself (the leading underscore keeps the registry away).

``run``: the node leader (local rank 0) probes its node once per process (NVML + sysfs, cached) and
returns the findings of one concern plus the facts compared across nodes; other local ranks return
only who they are (and, for NUMA, the CPUs they may run on). ``summarize``: merges the leaders'
findings, flags the odd node, and says "skipped: no NVIDIA GPU" when no node has one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ddpdoctor.check_options import Option, text
from ddpdoctor.core.report import Finding, Severity, Status
from ddpdoctor.core.summary import Summary
from ddpdoctor.core.world import WorldInfo
from ddpdoctor.model.topology.payloads import NodeEntry, TopologyPayload

SKIP_NO_GPU = "skipped: no NVIDIA GPU"
_CACHE: dict[str, Any] = {}

# Every check that probes the node through topology_check reads it (tests hand in captured trees).
SYSFS_ROOT = Option("sysfs_root", "read /sys and /proc under this folder", text)


def node_topology(ctx):
    """This node's NodeTopology, probed once per process and sysfs root (ctx.options["sysfs_root"])."""
    from ddpdoctor.probes.collect import collect_node

    root = str(ctx.options.get("sysfs_root", "/"))
    if root not in _CACHE:
        _CACHE[root] = collect_node(root=root, hostname=ctx.hostname)
    return _CACHE[root]


def without_rdma(reason: str) -> Callable:
    """A skip_if: skip with ``reason`` on a node with no InfiniBand/RoCE (RDMA) NIC."""
    return lambda node: None if any(n.rdma or n.ports for n in node.nics) else reason


def node_payload(
    node,
    concern: str,
    judge: Callable,
    needs_gpu: bool = True,
    extra: Callable | None = None,
    skip_if: Callable | None = None,
) -> dict:
    """What a node leader reports for one concern: findings, compared facts, the check's data, or
    why it skipped. Pure: also builds reports offline from saved snapshots."""
    from ddpdoctor.model.topology.compare import node_facts

    out: dict[str, Any] = {"node": node.hostname, "leader": True}
    if needs_gpu and (node.no_gpu_reason or not node.gpus):
        # "skipped: no NVIDIA GPU: NVML could not start (…)"; a topology file without GPUs is not a pass
        why = node.no_gpu_reason or f"no NVIDIA GPU: none listed in {node.source or 'the topology'}"
        out["skipped"] = f"skipped: {why}"
        return out
    reason = skip_if(node) if skip_if is not None else None
    if reason:
        out["skipped"] = reason
        return out
    out["findings"] = [f.to_dict() for f in judge(node)]
    out["facts"] = node_facts(node, concern)
    if extra is not None:
        out["data"] = extra(node)
    return out


def my_cpus() -> list[int]:
    """The CPUs this rank may run on (psutil; the scheduler's affinity mask where psutil cannot say)."""
    fallback = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    try:
        import psutil
    except ImportError:
        return fallback
    try:
        return sorted(psutil.Process().cpu_affinity())
    except (AttributeError, OSError, psutil.Error):  # cpu_affinity is missing on macOS
        return fallback


def _my_gpu_busid(ctx) -> str | None:
    """The PCI address of this rank's CUDA device (NCCL runs only), as NVML writes it normalized."""
    if not ctx.on_gpu:
        return None
    import torch

    from ddpdoctor.model.topology.node import normalize_busid

    props = torch.cuda.get_device_properties(ctx.device)
    parts = [getattr(props, f"pci_{k}_id", None) for k in ("domain", "bus", "device")]
    if None in parts:
        return None  # an older torch without the PCI fields
    return normalize_busid("{:04x}:{:02x}:{:02x}.0".format(*parts))


def run_concern(ctx, payload: Callable) -> dict:
    """A check's run(ctx): local rank 0 probes the node; the others say who they are and where they run."""
    out: dict[str, Any] = {
        "node": ctx.hostname,
        "node_rank": ctx.node_rank,
        "local_rank": ctx.local_rank,
        "leader": ctx.is_node_leader,
    }
    out["cpus"] = my_cpus()
    busid = _my_gpu_busid(ctx)
    if busid:
        out["gpu_busid"] = busid
    if not ctx.is_node_leader:
        return out
    with ctx.op("probe node topology"):
        node = node_topology(ctx)
    return {**out, **payload(node), "node": ctx.hostname}


def summarize_concern(
    results: dict[int, dict | None],
    world: WorldInfo,
    code: str,
    concern: str,
    severity: dict[str, Severity] | None = None,
    per_node: Callable[[dict, list[dict]], list[Finding]] | None = None,
    explained: tuple[str, ...] = (),
) -> Summary:
    from ddpdoctor.model.topology.compare import fold_explained, name_nodes, odd_node_findings

    leaders = {d["node"]: d for d in results.values() if isinstance(d, dict) and d.get("leader")}
    findings: list[Finding] = []
    for host in world.nodes:
        if host not in leaders:
            findings.append(
                Finding(
                    code,
                    Severity.WARNING,
                    f"node {host} sent no topology (its local rank 0 was lost or stuck)",
                    where={"node": host},
                )
            )
    probed = {h: d for h, d in leaders.items() if "skipped" not in d}
    skipped = {h: d["skipped"] for h, d in leaders.items() if "skipped" in d}
    if leaders and not probed:
        reason = next(iter(skipped.values()))
        return Summary(
            status=Status.SKIPPED,
            summary=reason if len(skipped) == 1 else SKIP_NO_GPU,
            data=TopologyPayload(skipped=skipped).to_json(),
        )
    for host in sorted(skipped):
        findings.append(
            Finding(
                code,
                Severity.ERROR,
                f"odd node {host}: {skipped[host]} while {len(probed)} other node(s) were probed",
                where={"node": host},
                evidence={"reason": skipped[host]},
            )
        )
    own: dict[str, list[Finding]] = {}
    for host, d in sorted(probed.items()):
        own[host] = [Finding.from_dict(f) for f in d.get("findings", [])]
        if per_node is not None:
            peers = [r for r in results.values() if isinstance(r, dict) and r.get("node") == host]
            own[host].extend(per_node(d, peers))
    odd = odd_node_findings({h: d.get("facts", {}) for h, d in probed.items()}, code, severity)
    odd, odd_hosts = fold_explained(odd, own, explained)
    findings.extend(name_nodes(own, odd_hosts))
    findings.extend(odd)
    data = TopologyPayload(
        nodes={h: NodeEntry(d.get("facts", {}), d.get("data")) for h, d in sorted(probed.items())},
        skipped=skipped,
    ).to_json()
    n = len(probed)
    summary = f"{n} node(s): " + (f"{len(findings)} finding(s)" if findings else "ok")
    return Summary(findings=findings, data=data, summary=summary)


def topology_check(
    code: str,
    concern: str,
    judge: Callable | None,
    *,
    needs_gpu: bool = True,
    extra: Callable | None = None,
    skip_if: Callable | None = None,
    severity: dict[str, Severity] | None = None,
    per_node: Callable | None = None,
    explained: tuple[str, ...] = (),
):
    """A topology check's (payload, run, summarize); ``judge(node)`` returns the check's findings on one node.
    ``explained``: compared facts whose difference a node's own findings already report (one cause)."""

    def payload(node) -> dict:
        return node_payload(node, concern, judge or (lambda n: []), needs_gpu, extra, skip_if)

    def run(ctx) -> dict:
        return run_concern(ctx, payload)

    def summarize(results: dict[int, dict | None], world: WorldInfo) -> Summary:
        return summarize_concern(results, world, code, concern, severity, per_node, explained)

    return payload, run, summarize
