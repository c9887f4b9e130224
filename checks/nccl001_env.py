"""NCCL001 — NCCL environment sanity.

What it does: checks the NCCL_* variables of the rank's environment against this node:
NCCL_SOCKET_IFNAME must name interfaces that exist and are up, NCCL_IB_HCA must match real RDMA
devices (both with NCCL's ``^`` exclude / ``=`` exact / prefix syntax); knobs left set are reported
with what they cost — NCCL_P2P_DISABLE (intra-node traffic through host memory), NCCL_IB_DISABLE (TCP
between nodes), NCCL_SHM_DISABLE, NCCL_NET_GDR_LEVEL, NCCL_NET_GDR_READ=0, NCCL_ALGO/NCCL_PROTO
(debugging knobs), NCCL_NVLS_ENABLE=0, NCCL_DEBUG=INFO/TRACE, channel and level overrides. Across
nodes, NCCL variables that differ between nodes are flagged.
"""

from ddpdoctor.core.report import Finding, Severity
from ddpdoctor.model.topology.analysis import parse_gdr_level
from ddpdoctor.model.topology.node import NodeTopology

from ._topology import SYSFS_ROOT, topology_check

CODE = "NCCL001"
TITLE = "NCCL environment"
KIND = "cluster"
ORDER = 11
BUDGET_S = 10.0
SUITES = ("quick", "full")
OPTIONS = (SYSFS_ROOT,)


def _no_environment(node):
    """A topology file (NCCL XML, nvidia-smi topo -m) carries no variables, interfaces or probed state to
    judge: a pass would mean nothing."""
    if node.interfaces or node.env or node.peermem.probed:
        return None
    return "skipped: no NCCL environment (topology read from a file)"


def parse_name_list(value: str) -> tuple[bool, bool, list[str]]:
    """NCCL's interface/HCA list syntax: ``^`` excludes, ``=`` matches exactly, otherwise each entry
    is a prefix; entries are comma-separated (HCA entries may carry ``:port``).
    Returns (exclude, exact, entries)."""
    v = value.strip()
    exclude = v.startswith("^")
    v = v[1:] if exclude else v
    exact = v.startswith("=")
    v = v[1:] if exact else v
    return exclude, exact, [e.strip() for e in v.split(",") if e.strip()]


def _matches(entry: str, name: str, exact: bool) -> bool:
    return name == entry if exact else name.startswith(entry)


def _name_list_findings(
    node: NodeTopology, var: str, names: dict[str, bool], what: str, code: str
) -> list[Finding]:
    """names: candidate -> usable (interface up / port active)."""
    value = node.env.get(var)
    if value is None:
        return []
    exclude, exact, entries = parse_name_list(value)
    evidence = {"value": value, "available": sorted(names)}

    def finding(sev: Severity, message: str, hint: str | None = None) -> Finding:
        return Finding(
            code, sev, message, where={"node": node.hostname, "env": var}, evidence=evidence, hint=hint
        )

    if exclude:
        left = [n for n in names if not any(_matches(e.split(":")[0], n, exact) for e in entries)]
        if any(names[n] for n in left):
            return []
        return [finding(Severity.ERROR, f"{var}={value} excludes every usable {what} on this node")]
    matched = {e: [n for n in names if _matches(e.split(":")[0], n, exact)] for e in entries}
    if not any(names[n] for ns in matched.values() for n in ns):
        have = ", ".join(f"{n} ({'up' if ok else 'down'})" for n, ok in sorted(names.items())) or "none"
        return [
            finding(
                Severity.ERROR,
                f"{var}={value} matches no usable {what} on this node (have: {have})",
                hint=f"NCCL cannot use what {var} names; fix or unset it",
            )
        ]
    out = []
    for e, ns in matched.items():
        if not ns:
            out.append(finding(Severity.WARNING, f"{var} entry {e!r} matches no {what} on this node"))
        elif not any(names[n] for n in ns):
            out.append(
                finding(
                    Severity.WARNING, f"{var} entry {e!r} names only {what}s that are down: {', '.join(ns)}"
                )
            )
    return out


def _truthy(v: str | None) -> bool:
    return v is not None and v.strip() not in ("", "0")


def nccl_env_findings(node: NodeTopology, code: str = "NCCL001") -> list[Finding]:
    env = node.env
    out: list[Finding] = []
    ifaces = {i.name: i.up for i in node.interfaces}
    if ifaces:
        out += _name_list_findings(node, "NCCL_SOCKET_IFNAME", ifaces, "interface", code)
    hcas = {n.name: (not n.ports or any(p.up for p in n.ports)) for n in node.nics if n.rdma or n.ports}
    out += _name_list_findings(node, "NCCL_IB_HCA", hcas, "RDMA device", code)
    where = {"node": node.hostname}

    def knob(var: str, sev: Severity, message: str, hint: str | None = None) -> None:
        out.append(
            Finding(
                code,
                sev,
                f"{var}={env[var]} is set: {message}",
                where={**where, "env": var},
                evidence={"value": env[var]},
                hint=hint,
            )
        )

    has_nvlink = any(
        (node.path(a.label, b.label) or "").startswith("NV")
        for a in node.gpus
        for b in node.gpus
        if a is not b
    )
    if _truthy(env.get("NCCL_P2P_DISABLE")):
        knob(
            "NCCL_P2P_DISABLE",
            Severity.WARNING,
            "GPU↔GPU traffic inside the node goes through host memory"
            + (" instead of NVLink — a fraction of its bandwidth" if has_nvlink else " instead of PCIe P2P"),
            "unset it unless P2P is known broken on this machine",
        )
    if _truthy(env.get("NCCL_IB_DISABLE")) and any(n.rdma or n.ports for n in node.nics):
        knob(
            "NCCL_IB_DISABLE",
            Severity.WARNING,
            "NCCL ignores the InfiniBand/RoCE NICs and uses TCP sockets between nodes",
            "unset it",
        )
    if _truthy(env.get("NCCL_SHM_DISABLE")):
        knob(
            "NCCL_SHM_DISABLE", Severity.WARNING, "GPUs without P2P fall back to the network inside the node"
        )
    if "NCCL_NET_GDR_LEVEL" in env:
        try:
            level = parse_gdr_level(env["NCCL_NET_GDR_LEVEL"])
            knob(
                "NCCL_NET_GDR_LEVEL",
                Severity.WARNING if level == "X" else Severity.INFO,
                "GPUDirect RDMA disabled"
                if level == "X"
                else f"GPUDirect RDMA allowed up to {level} instead of NCCL's default PXB",
            )
        except ValueError:
            knob("NCCL_NET_GDR_LEVEL", Severity.ERROR, "not a level NCCL knows (LOC, PIX, PXB, PHB, SYS)")
    if env.get("NCCL_NET_GDR_READ", "").strip() == "0":
        knob(
            "NCCL_NET_GDR_READ",
            Severity.INFO,
            "sends are staged through host memory instead of read by the NIC",
        )
    for var in ("NCCL_ALGO", "NCCL_PROTO"):
        if var in env:
            knob(
                var,
                Severity.INFO,
                "a debugging knob; NCCL otherwise picks per call from its cost model",
                "keep it only if an A/B measurement at your message sizes backs it",
            )
    if env.get("NCCL_NVLS_ENABLE", "").strip() == "0" and has_nvlink:
        knob(
            "NCCL_NVLS_ENABLE",
            Severity.INFO,
            "NVLink SHARP all-reduce is off (NVSwitch systems lose its speed-up)",
        )
    if env.get("NCCL_DEBUG", "").strip().upper() in ("INFO", "TRACE"):
        knob(
            "NCCL_DEBUG",
            Severity.INFO,
            "verbose logging on every rank"
            + (" and TRACE slows every call" if env["NCCL_DEBUG"].strip().upper() == "TRACE" else ""),
        )
    for var in ("NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_P2P_LEVEL", "NCCL_CROSS_NIC"):
        if var in env:
            knob(var, Severity.INFO, "overrides NCCL's own topology-based choice")
    return out


payload, run, summarize = topology_check(CODE, "nccl", nccl_env_findings, skip_if=_no_environment)
