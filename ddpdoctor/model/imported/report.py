"""A ddpdoctor report from what users measured with other tools, judged against a hardware profile.
Pure: parsed files and profiles in, a Report out (``ddpdoctor import`` reads the files and profiles).

Which profile: the one the user names, else the best match for what the logs say — the GPU model and
count per host (nccl-tests device lines: the GPUs the run used, a lower bound; nvbandwidth and
p2pBandwidthLatencyTest list every GPU of the node), NVLink when GPU↔GPU copies run faster than any
PCIe x16 link, and the backend (nccl-tests measure NCCL). The verdicts are those of
model/profiles/judge.py, applied to each imported BW001/P2P001 result on its own, plus perftest's
best bandwidth against the profile's ``per_nic``.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from ddpdoctor.core.report import CheckResult, Finding, Report, Severity, Status
from ddpdoctor.core.run_info import RunInfo
from ddpdoctor.model.bandwidth.payloads import BwSweepPayload, P2PPayload
from ddpdoctor.model.bandwidth.sizes import format_size
from ddpdoctor.model.imported import checks as ic
from ddpdoctor.model.imported.tool_runs import Parsed
from ddpdoctor.model.profiles.detect import MatchResult, NodeFacts, ReportFacts, rank_profiles
from ddpdoctor.model.profiles.judge import _verdict, apply_profile
from ddpdoctor.model.profiles.schema import Profile

IMPORT_HINT = (
    "run `ddpdoctor check` on these nodes: its NVLink, PCIe, InfiniBand and GPUDirect checks say which "
    "link or setting holds the bandwidth back"
)
PCIE_MAX_GBps = 64.0  # PCIe Gen5 x16 line rate; GPU↔GPU copies faster than this ride NVLink (or C2C)


def file_host(parsed: Parsed) -> str:
    """Matrices carry no hostname (single-node nvbandwidth, the CUDA sample): name the node after the
    file, so findings still say where to look."""
    hosts = {d.host for d in parsed.devices if d.host}
    if len(hosts) == 1:
        return hosts.pop()
    return parsed.path.replace("\\", "/").rsplit("/", 1)[-1]


def facts(files: list[Parsed]) -> ReportFacts:
    nodes: dict[str, NodeFacts] = {}
    sources: list[str] = []
    backend = None
    for p in files:
        for run in p.nccl:
            backend = "nccl"
            for host, gpus in ic.gpus_by_host(run.devices).items():
                n = nodes.setdefault(host, NodeFacts(host=host))
                n.gpu_names = n.gpu_names or [g["name"] for g in gpus if g["name"]]
                n.gpu_count_min = max(n.gpu_count_min, len(gpus))
            sources.append(f"nccl-tests device lines ({run.source})")
        if p.devices:
            host = file_host(p)
            n = nodes.setdefault(host, NodeFacts(host=host))
            n.gpu_names = [d.name for d in p.devices]
            n.gpu_count = n.gpu_count_min = len(p.devices)
            sources.append(f"GPU list of {p.path}")
        gpu = [
            m
            for m in p.matrices
            if m.square_gpu and m.unit == "GB/s" and "Disabled" not in m.name and m.direction != "<->"
        ]
        cells = [v for m in gpu for v in ic.off_diagonal(m.values)]
        if cells and statistics.median(cells) > PCIE_MAX_GBps:
            nodes.setdefault(file_host(p), NodeFacts(host=file_host(p))).nvlink = True
            sources.append(f"GPU↔GPU copies above PCIe speed in {p.path}")
    nodes = {h: n for h, n in nodes.items() if n != NodeFacts(host=h)}
    return ReportFacts(backend=backend, nodes=nodes, sources=sources)


def choose_profile(
    files: list[Parsed], profiles: list[Profile], chosen: Profile | None, off: bool = False
) -> tuple[Profile | None, str, MatchResult | None, list[MatchResult]]:
    """(profile, how, its match, every profile's match) — how: chosen, detected, none, off."""
    if off:
        return None, "off", None, []
    f = facts(files)
    ranked = rank_profiles(profiles, f) if profiles else []
    if chosen is not None:
        return chosen, "chosen", None, ranked
    # A log says little (no NICs, often no GPU count): only a GPU model it names picks a profile;
    # NVLink speed alone cannot tell an A100 from an H100 system.
    found = next((r for r in ranked if r.qualifies and "gpu_model" in r.satisfied), None)
    return (found.profile, "detected", found, ranked) if found else (None, "none", None, ranked)


def _ranks_of(check: CheckResult) -> list[dict[str, Any]]:
    if isinstance(check.data.get("ranks"), list):
        return check.data["ranks"]
    out = []
    for node, (host, gpus) in enumerate((check.data.get("gpus_by_host") or {}).items()):
        for g in gpus:
            out.append(
                {"rank": g.get("rank"), "hostname": host, "local_rank": g.get("index"), "node_rank": node}
            )
    return out


def judge_check(check: CheckResult, profile: Profile, how: str, match: MatchResult | None) -> dict[str, Any]:
    """Profile verdicts for one imported result, in place (status follows); returns the profile record."""
    if check.code == "RDMA001":
        judge_rdma(check, profile)
        return {}
    sub = Report(run=RunInfo(mode="import"), ranks=_ranks_of(check), checks=[check])
    apply_profile(sub, profile, how, match)
    for f in check.findings:
        if "profile" in f.evidence:  # the check's own hints name its sibling checks, which did not run here
            f.hint = IMPORT_HINT
    bw = BwSweepPayload.from_json(check.data) if check.code == "BW001" else None
    comp = bw.profile if bw is not None else None
    if comp is not None and comp.pct_of_expected is not None:
        verdict = (
            f"all_reduce busbw {comp.measured_GBps:.3g} GB/s at {format_size(comp.size_B)}: "
            f"{comp.pct_of_expected:.0f}% of the {bw.expected_busbw_GBps:.3g} GB/s expected on "
            f"{profile.name}"
        )
        rows = {op: [r.to_json() for r in op_rows] for op, op_rows in bw.ops.items()}
        check.summary = ic.nccl_headline(rows, bw.world_size or 0, list(bw.hosts or ()), verdict)
    if check.code == "P2P001":
        p2p = P2PPayload.from_json(check.data)
        med = p2p.median_GBps("intra_node")
        exp = profile.expected("p2p_intra_node")
        if med and exp:
            check.data = replace(p2p, expected_GBps=exp, pct_of_expected=round(100 * med / exp, 1)).to_json()
            check.summary += f": {100 * med / exp:.0f}% of the {exp:.3g} GB/s expected on {profile.name}"
    return sub.run.profile or {}


def judge_rdma(check: CheckResult, profile: Profile) -> None:
    exp = profile.expected("per_nic")
    if not exp:
        return
    for key, best in (check.data.get("best") or {}).items():
        pct = 100.0 * best["GBps"] / exp
        check.data.setdefault("pct_of_expected", {})[key] = round(pct, 1)
        check.summary += f"; {key}: {pct:.0f}% of the {exp:.3g} GB/s per NIC expected on {profile.name}"
        sev = _verdict(profile, pct)
        if sev is None:
            continue
        f = Finding(
            "RDMA001",
            sev,
            f"{key}: {best['GBps']:.3g} GB/s at {format_size(best['size_B'])} is {pct:.0f}% of the {exp:.3g} GB/s "
            f"one NIC carries on {profile.name}",
            where={"nic": key.split(" ", 1)[-1]},
            evidence={
                "profile": profile.name,
                "link_class": "per_nic",
                "measured_GBps": best["GBps"],
                "expected_GBps": exp,
                "pct_of_expected": round(pct, 1),
            },
            hint="check the port's rate and width (ibstat), its PCIe link, and that the test ran on the NIC "
            "you meant (-d mlx5_N); a loopback run measures the HCA, not the cable",
        )
        check.findings.append(f)
        if sev is Severity.ERROR:
            check.status = Status.FAILED
        elif check.status is Status.PASSED:
            check.status = Status.WARNING


def build_report(
    files: list[Parsed],
    profiles: list[Profile],
    chosen: Profile | None = None,
    off: bool = False,
) -> Report:
    checks: list[CheckResult] = []
    for group in ic.group_nccl([r for p in files for r in p.nccl]):
        checks.append(ic.nccl_check(group))
    for p in files:
        host = file_host(p)
        for make in (ic.matrix_check, ic.host_device_check):
            if (c := make(p, host)) is not None:
                checks.append(c)
    rdma = [r for p in files for r in p.rdma]
    if rdma:
        checks.append(ic.rdma_check(rdma))
    profile, how, match, ranked = choose_profile(files, profiles, chosen, off)
    record: dict[str, Any] = {"name": None, "how": how}
    if profile is not None:
        for c in checks:
            record = judge_check(c, profile, how, match) or record
        record.update({"name": profile.name, "how": how})
    elif how == "none" and ranked:
        record["closest"] = [r.to_dict() for r in ranked[:3]]
    hosts: dict[str, None] = {}
    for c in checks:
        for h in c.data.get("gpus_by_host") or {}:
            hosts[h] = None
        for r in c.data.get("ranks") or []:
            hosts[str(r.get("hostname"))] = None
    first_bw = next((c for c in checks if c.code == "BW001"), None)
    versions: dict[str, Any] = {}
    for p in files:
        versions.update({k: v for k, v in p.versions.items()})
        for run in p.nccl:
            if run.version:
                versions["nccl-tests"] = run.version
    return Report(
        run=RunInfo(
            mode="import",
            backend="nccl" if first_bw else None,
            world_size=first_bw.data.get("world_size") if first_bw else None,
            nodes=list(hosts),
            nnodes=len(hosts),
            imported=[{"file": p.path, "tools": p.tools} for p in files],
            profile=record,
            facts=facts(files).nodes and {h: n.to_dict() for h, n in facts(files).nodes.items()},
        ),
        ranks=_ranks_of(first_bw) if first_bw else [],
        versions=versions,
        checks=checks,
    )
