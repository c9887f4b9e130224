"""Which hardware profile fits a report: the facts a report holds, and how well each profile matches them.

Facts per node come from, in this order of trust: GPU001's topology snapshots (NVML + sysfs: GPU
names and count, NVLinks, PCIe generation, RDMA NICs), ENV001's per-rank ``gpu`` (torch's device
name; the GPUs the ranks used, so only a lower bound on the count), and the per-node ``gpus`` /
``nvlink`` / ``nics`` lists of the other checks (NUMA001's GPUs, NVL001's ``matrix``, IB001's NICs) or
of the flat shapes the TUI reads (tui/adapt.py). The backend comes from the run.

Each criterion of a profile's ``match`` is satisfied, violated or unknown (the report does not say).
A profile qualifies when nothing is violated and something besides the backend is satisfied (a profile
whose only criterion is the backend qualifies on it). The best has the most criteria satisfied, then
the fewest unknown, then the highest ``priority``; the name breaks what is left. (A NIC criterion
counts its rate and name as constraints of their own: Azure's ``mlx5_ib*`` names beat a plain
"8 InfiniBand NICs" when the report shows them.) Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.core.payload import LabeledMatrix
from ddpdoctor.core.report import Report
from ddpdoctor.model.bandwidth.payloads import BwSweepPayload
from ddpdoctor.model.nodes.environment import EnvPayload
from ddpdoctor.model.profiles.schema import Profile
from ddpdoctor.model.topology.analysis import nvlink_matrix
from ddpdoctor.model.topology.node import NodeTopology
from ddpdoctor.model.topology.payloads import ListedNic, TopologyPayload, host_lists

RDMA_KINDS = ("InfiniBand", "RoCE", "EFA", "RDMA")
# EFA devices carry the PCI-path names rdma-core gives them ("rdmap79s0", as in aws-ofi-nccl's
# p5.48xlarge topology file) or the kernel's "efa_0": a naming heuristic, not a driver query.
_EFA_NAME = re.compile(r"^(rdmap\d+s\d+|efa_?\d+)$")
_RATE_TOLERANCE = 0.01  # sysfs says "400 Gb/sec"; NCCL XML says speed="400000" (Mb/s)


@dataclass
class NicFact:
    name: str
    kind: str  # InfiniBand, RoCE, EFA, RDMA (kind unknown), Ethernet
    rate_Gbps: float | None = None


@dataclass
class NodeFacts:
    host: str
    gpu_names: list[str] = field(default_factory=list)
    gpu_count: int | None = None  # exact, when a snapshot says it
    gpu_count_min: int = 0  # at least this many (the GPUs the ranks used)
    nvlink: bool | None = None
    pcie_gen: int | None = None  # the highest GPU PCIe generation
    nics: list[NicFact] | None = None  # None: not known

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu_models": sorted(set(self.gpu_names)),
            "gpu_count": self.gpu_count,
            "gpu_count_min": self.gpu_count_min,
            "nvlink": self.nvlink,
            "pcie_gen": self.pcie_gen,
            "nics": None if self.nics is None else [f"{n.name}:{n.kind}:{n.rate_Gbps}" for n in self.nics],
        }


@dataclass
class ReportFacts:
    backend: str | None
    nodes: dict[str, NodeFacts]
    sources: list[str] = field(default_factory=list)  # which payloads said something


def as_report(report: Report | dict) -> Report:
    return report if isinstance(report, Report) else Report.from_dict(report)


def nic_kind(nic) -> str:
    """What kind of link an RDMA device is (a ``topology.Nic``)."""
    if _EFA_NAME.match(nic.name) or "efa" in (nic.hca_type or "").lower():
        return "EFA"
    return nic.kind


def node_facts(topo: NodeTopology) -> NodeFacts:
    """The facts one topology snapshot gives."""
    gpus = [] if topo.no_gpu_reason else topo.gpus
    nvlink = None
    if len(gpus) >= 2:
        nvlink = any(v for row in nvlink_matrix(topo)["values"] for v in row if v)
    gens = [g.pcie.max_gen for g in gpus if g.pcie.max_gen]
    return NodeFacts(
        host=topo.hostname,
        gpu_names=[g.name for g in gpus if g.name],
        gpu_count=len(gpus),
        gpu_count_min=len(gpus),
        nvlink=nvlink,
        pcie_gen=max(gens) if gens else None,
        nics=[NicFact(n.name, nic_kind(n), n.rate_gbps) for n in topo.nics],
    )


def _data(report: Report, code: str) -> dict:
    c = report.check(code)
    return c.data if c is not None and isinstance(c.data, dict) else {}


def _from_snapshots(report: Report, nodes: dict[str, NodeFacts], sources: list[str]) -> None:
    gpu = TopologyPayload.from_json(_data(report, "GPU001"))
    for host, snap in gpu.snapshots().items():
        try:
            facts = node_facts(NodeTopology.from_dict(snap))
        except ValueError:
            continue  # a malformed snapshot says nothing
        facts.host = str(host)
        nodes[str(host)] = facts
        sources.append(f"GPU001 topology of {host}")
    for host, why in (gpu.skipped or {}).items():
        if "no NVIDIA GPU" in why and host not in nodes:
            nodes[str(host)] = NodeFacts(host=str(host), gpu_count=0)
            sources.append(f"GPU001: {host} has no NVIDIA GPU")


def _from_env(report: Report, nodes: dict[str, NodeFacts], sources: list[str]) -> None:
    seen: dict[str, dict[str, str]] = {}
    for rank in EnvPayload.from_json(_data(report, "ENV001")).per_rank.values():
        if rank.gpu is None or not rank.hostname:
            continue
        key = str(rank.gpu.uuid or rank.gpu.index)
        seen.setdefault(rank.hostname, {})[key] = rank.gpu.name or ""
    for host, gpus in seen.items():
        n = nodes.setdefault(host, NodeFacts(host=host))
        if not n.gpu_names:
            n.gpu_names = [name for name in gpus.values() if name]
        n.gpu_count_min = max(n.gpu_count_min, len(gpus))
        sources.append(f"ENV001 GPUs of {host}")


def _nvlink_in(matrix: LabeledMatrix | None) -> bool | None:
    if matrix is None:
        return None
    cells = [v for row in matrix.values for v in row if v is not None]
    if not cells:
        return None
    return any(
        (isinstance(v, (int, float)) and v > 0) or (isinstance(v, str) and v.upper().startswith("NV"))
        for v in cells
    )


def _nics_in(listed: list[ListedNic] | None) -> list[NicFact] | None:
    if listed is None:
        return None
    return [NicFact(n.name, "EFA" if _EFA_NAME.match(n.name) else n.kind, n.rate_Gbps) for n in listed]


def _from_views(report: Report, nodes: dict[str, NodeFacts], sources: list[str]) -> None:
    """The per-node gpus / nvlink / nics lists (flat for a one-node report) the TUI reads."""
    default_host = next((str(r.get("hostname")) for r in report.ranks if r.get("hostname")), "")
    for c in report.checks:
        # the TUI's flat shape, or a topology check's per-node "data" (NVL001 calls its matrix "matrix")
        for host, d in host_lists(c.code, c.data, default_host, inside_data=True).items():
            if not host:
                continue
            n = nodes.setdefault(host, NodeFacts(host=host))
            gpus = d.gpus
            if gpus and all(isinstance(g, dict) for g in gpus) and n.gpu_count is None:
                n.gpu_names = n.gpu_names or [str(g["name"]) for g in gpus if g.get("name")]
                n.gpu_count = n.gpu_count_min = max(len(gpus), n.gpu_count_min)
                sources.append(f"{c.code} GPU list of {host}")
            if n.nvlink is None and (found := _nvlink_in(d.nvlink_matrix)) is not None:
                n.nvlink = found
                sources.append(f"{c.code} NVLink matrix of {host}")
            if n.nics is None and (nics := _nics_in(d.listed_nics)) is not None:
                n.nics = nics
                sources.append(f"{c.code} NICs of {host}")


def report_facts(report: Report | dict) -> ReportFacts:
    rep = as_report(report)
    nodes: dict[str, NodeFacts] = {}
    sources: list[str] = []
    _from_snapshots(rep, nodes, sources)
    _from_env(rep, nodes, sources)
    _from_views(rep, nodes, sources)
    backend = (
        rep.run.backend or rep.versions.get("backend") or BwSweepPayload.from_json(_data(rep, "BW001")).backend
    )
    nodes = {h: n for h, n in nodes.items() if n != NodeFacts(host=h)}  # drop hosts nothing was learned of
    return ReportFacts(backend=str(backend) if backend else None, nodes=nodes, sources=sources)


# -- matching ----------------------------------------------------------------------------------------
SAT, UNK, VIO = "satisfied", "unknown", "violated"


@dataclass
class MatchResult:
    profile: Profile
    satisfied: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    violated: list[str] = field(default_factory=list)  # "criterion: why"

    @property
    def qualifies(self) -> bool:
        if self.violated or not self.satisfied:
            return False
        return set(self.satisfied) != {"backend"} or self.profile.match.criteria() == ["backend"]

    @property
    def score(self) -> tuple[int, int, int]:
        """Most constraints satisfied, then fewest criteria unknown, then the profile's priority."""
        m = self.profile.match
        return (sum(m.weight(c) for c in self.satisfied), -len(self.unknown), self.profile.priority)

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile.name,
            "satisfied": self.satisfied,
            "unknown": self.unknown,
            "violated": self.violated,
        }


def _per_node(facts: ReportFacts, judge) -> tuple[str, str]:
    """Combine one criterion over the nodes: any violation wins, all satisfied is satisfied."""
    verdicts = [(host, *judge(n)) for host, n in sorted(facts.nodes.items())]
    for host, verdict, why in verdicts:
        if verdict == VIO:
            return VIO, f"{why} on {host}"
    if verdicts and all(v == SAT for _, v, _ in verdicts):
        return SAT, ""
    return UNK, ""


def _gpu_model(pattern: re.Pattern):
    def judge(n: NodeFacts) -> tuple[str, str]:
        if n.gpu_count == 0:
            return VIO, "no GPU"
        if not n.gpu_names:
            return UNK, ""
        bad = sorted({g for g in n.gpu_names if not pattern.search(g)})
        return (VIO, f"{bad[0]!r} does not match {pattern.pattern!r}") if bad else (SAT, "")

    return judge


def _gpu_count(allowed: tuple[int, ...]):
    def judge(n: NodeFacts) -> tuple[str, str]:
        if n.gpu_count is not None:
            ok = n.gpu_count in allowed
            return (SAT, "") if ok else (VIO, f"{n.gpu_count} GPU(s), expected {list(allowed)}")
        if n.gpu_count_min > max(allowed):
            return VIO, f"at least {n.gpu_count_min} GPUs, expected {list(allowed)}"
        return UNK, ""

    return judge


def _fact_equals(attr: str, allowed: tuple) -> Any:
    def judge(n: NodeFacts) -> tuple[str, str]:
        v = getattr(n, attr)
        if v is None:
            return UNK, ""
        return (
            (SAT, "") if v in allowed else (VIO, f"{attr} is {v}, expected {' or '.join(map(str, allowed))}")
        )

    return judge


def _nics(want):
    def judge(n: NodeFacts) -> tuple[str, str]:
        if n.nics is None:
            return UNK, ""
        if want.kind == ("none",):
            rdma = [x.name for x in n.nics if x.kind in RDMA_KINDS]
            return (VIO, f"RDMA NIC(s) {', '.join(rdma)} present, expected none") if rdma else (SAT, "")
        fit = [
            x
            for x in n.nics
            if x.kind in want.kind
            and (
                want.rate_Gbps is None
                or (
                    x.rate_Gbps is not None
                    and abs(x.rate_Gbps - want.rate_Gbps) <= _RATE_TOLERANCE * want.rate_Gbps
                )
            )
            and (want.name is None or want.name.search(x.name))
        ]
        if len(fit) >= want.min_count:
            return SAT, ""
        what = "/".join(want.kind) + (f" at {want.rate_Gbps:g} Gb/s" if want.rate_Gbps else "")
        what += f" named like {want.name.pattern!r}" if want.name else ""
        return VIO, f"{len(fit)} {what} NIC(s), expected at least {want.min_count}"

    return judge


def match_profile(profile: Profile, facts: ReportFacts) -> MatchResult:
    m = profile.match
    out = MatchResult(profile)
    checks: list[tuple[str, tuple[str, str]]] = []
    if m.backend is not None:
        if facts.backend is None:
            checks.append(("backend", (UNK, "")))
        else:
            ok = facts.backend == m.backend
            checks.append(
                ("backend", (SAT, "") if ok else (VIO, f"backend is {facts.backend}, expected {m.backend}"))
            )
    if m.gpu_model is not None:
        checks.append(("gpu_model", _per_node(facts, _gpu_model(m.gpu_model))))
    if m.gpus_per_node is not None:
        checks.append(("gpus_per_node", _per_node(facts, _gpu_count(m.gpus_per_node))))
    if m.nvlink is not None:
        checks.append(("nvlink", _per_node(facts, _fact_equals("nvlink", (m.nvlink,)))))
    if m.pcie_gen is not None:
        checks.append(("pcie_gen", _per_node(facts, _fact_equals("pcie_gen", m.pcie_gen))))
    if m.nics is not None:
        checks.append(("nics", _per_node(facts, _nics(m.nics))))
    for name, (verdict, why) in checks:
        if verdict == SAT:
            out.satisfied.append(name)
        elif verdict == UNK:
            out.unknown.append(name)
        else:
            out.violated.append(f"{name}: {why}")
    return out


def rank_profiles(profiles: list[Profile], facts: ReportFacts) -> list[MatchResult]:
    """Every profile's match, the qualifying ones first, best first."""
    results = [match_profile(p, facts) for p in profiles]
    return sorted(results, key=lambda r: (not r.qualifies, tuple(-x for x in r.score), r.profile.name))


def best_match(profiles: list[Profile], facts: ReportFacts) -> MatchResult | None:
    ranked = rank_profiles(profiles, facts)
    return ranked[0] if ranked and ranked[0].qualifies else None
