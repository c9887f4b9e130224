"""Environment and consistency: versions, resources and the variables that steer NCCL and gloo.

Each rank reports its hostname, addresses, the network interface the backend will use (the one named by
GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, else the one that routes to the rendezvous host), Python,
torch, CUDA, NCCL and driver versions, CPU count and memory, its GPU, and every NCCL_*, GLOO_*,
TORCH_NCCL_*, MASTER_*, CUDA_VISIBLE_DEVICES and OMP_NUM_THREADS variable. Rank 0 flags skew: torch or
NCCL versions that differ between ranks (collectives may not interoperate), NCCL_* variables set
differently across ranks, two ranks sharing one GPU, and a socket interface variable that names an
interface the node does not have.
"""

from __future__ import annotations

import os
import platform
import re
import socket

from ddpdoctor.core.report import Finding, Severity
from ddpdoctor.core.summary import Summary
from ddpdoctor.core.world import WorldInfo
from ddpdoctor.model.nodes.environment import EnvPayload, NodeEnv, RankEnv

CODE = "ENV001"
TITLE = "Environment and version consistency"
KIND = "cluster"
ORDER = 2
BUDGET_S = 15.0
SUITES = ("quick", "full")

ENV_RE = re.compile(r"^(NCCL_|GLOO_|TORCH_NCCL_|TORCH_DISTRIBUTED_|MASTER_ADDR$|MASTER_PORT$|CUDA_VISIBLE_DEVICES$|OMP_NUM_THREADS$)")
# Variables whose value differs per rank by design: never "skew".
PER_RANK_OK = {"CUDA_VISIBLE_DEVICES", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}


def route_interface(dest: str) -> tuple[str | None, str | None]:
    """(interface, local address) that the kernel would use to reach dest. A UDP connect sends nothing."""
    import psutil

    try:
        fam = socket.AF_INET6 if ":" in dest else socket.AF_INET
        with socket.socket(fam, socket.SOCK_DGRAM) as s:
            s.connect((dest, 9))
            local = s.getsockname()[0]
    except OSError:
        return None, None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == local for a in addrs):
            return name, local
    return None, local


def run(ctx) -> dict:
    import psutil
    import torch

    env = {k: v for k, v in os.environ.items() if ENV_RE.match(k)}
    ifaces = {
        name: [a.address for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)]
        for name, addrs in psutil.net_if_addrs().items()
    }
    stats = psutil.net_if_stats()
    var = "NCCL_SOCKET_IFNAME" if ctx.backend == "nccl" else "GLOO_SOCKET_IFNAME"
    named = os.environ.get(var)
    route_if, route_addr = route_interface(os.environ.get("MASTER_ADDR", "127.0.0.1"))
    data = {
        "hostname": ctx.hostname,
        "node_rank": ctx.node_rank,
        "local_rank": ctx.local_rank,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": None,
        "driver": None,
        "gpu": None,
        "cpu_count": psutil.cpu_count(logical=True),
        "cpu_affinity": len(psutil.Process().cpu_affinity()) if hasattr(psutil.Process(), "cpu_affinity") else None,
        "mem_total_GiB": round(psutil.virtual_memory().total / 2**30, 2),
        "mem_available_GiB": round(psutil.virtual_memory().available / 2**30, 2),
        "interfaces": {k: {"addrs": v, "up": bool(stats[k].isup) if k in stats else None} for k, v in ifaces.items()},
        "socket_ifname_var": var,
        "socket_ifname": named,
        "route_interface": route_if,
        "route_address": route_addr,
        "env": env,
    }
    if ctx.backend == "nccl":
        try:
            v = torch.cuda.nccl.version()
            data["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:
            pass
        props = torch.cuda.get_device_properties(ctx.device)
        data["gpu"] = {"index": ctx.device.index, "name": props.name, "uuid": str(getattr(props, "uuid", "")),
                       "pci_bus_id": getattr(props, "pci_bus_id", None)}
        try:
            import pynvml

            pynvml.nvmlInit()
            data["driver"] = pynvml.nvmlSystemGetDriverVersion()
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return data


def _skew_finding(res: dict[int, dict], what: str, value_of, show, sev: Severity, hint: str) -> list[Finding]:
    """One finding when the value differs across ranks, naming nodes (and the odd node when there is one)."""
    from ddpdoctor.model.nodes.spread import describe, spread, where

    sp = spread({r: value_of(d) for r, d in res.items()}, {r: d.get("hostname", "?") for r, d in res.items()})
    if sp is None:
        return []
    evidence = {show(v): {h: rs for h, rs in by_host.items()} for v, by_host in sp.groups.items()}
    return [Finding(CODE, sev, describe(sp, what, show), where=where(sp), evidence=evidence, hint=hint)]


def _show_env(value) -> str:
    return "unset" if value is None else repr(value)


def summarize(results: dict[int, dict | None], world: WorldInfo) -> Summary:
    res = {r: d for r, d in results.items() if d}
    findings: list[Finding] = []
    for key, sev, why in (
        ("torch", Severity.ERROR, "mixed torch versions may not interoperate in collectives"),
        ("nccl", Severity.ERROR, "mixed NCCL versions can hang or corrupt collectives"),
        ("cuda", Severity.WARNING, "mixed CUDA runtimes usually mean mixed installs"),
        ("driver", Severity.WARNING, "mixed drivers behave differently under load"),
        ("python", Severity.WARNING, "mixed Python versions usually mean mixed environments"),
    ):
        findings += _skew_finding(res, f"{key} versions differ", lambda d, k=key: str(d.get(k)), str, sev, why)
    # Variables set differently across ranks (or set on some only).
    names = sorted({k for d in res.values() for k in d.get("env", {})} - PER_RANK_OK)
    for name in names:
        if not (name.startswith("NCCL_") or name.startswith("GLOO_") or name.startswith("TORCH_NCCL_")):
            continue
        findings += _skew_finding(
            res, f"{name} is set differently", lambda d, n=name: d.get("env", {}).get(n), _show_env, Severity.WARNING,
            "set NCCL_/GLOO_ variables the same way on every node (the job script, not ~/.bashrc)")
    # Two ranks on one GPU.
    by_gpu: dict[tuple, list[int]] = {}
    for r, d in res.items():
        gpu = d.get("gpu") or {}
        if gpu.get("uuid"):
            by_gpu.setdefault((d.get("hostname"), gpu["uuid"]), []).append(r)
    for (host, uuid), ranks in by_gpu.items():
        if len(ranks) > 1:
            findings.append(Finding(CODE, Severity.ERROR, f"ranks {ranks} share one GPU ({uuid}) on {host}",
                                    where={"node": host, "ranks": ranks},
                                    hint="set the device from LOCAL_RANK (torch.cuda.set_device(local_rank))"))
    # Socket interface variables that name a missing or down interface.
    for r, d in sorted(res.items()):
        named = d.get("socket_ifname")
        if not named:
            continue
        wanted = [x for x in re.split(r"[,\s]+", named.lstrip("^=")) if x]
        have = d.get("interfaces", {})
        if named.startswith("^"):
            continue  # an exclusion list cannot be wrong on its own
        exact = named.startswith("=")
        ok = [w for w in wanted if any((h == w) if exact else h.startswith(w) for h in have)]
        if not ok:
            findings.append(Finding(CODE, Severity.ERROR,
                                    f"{d['socket_ifname_var']}={named} on {d['hostname']} matches no interface "
                                    f"(has {sorted(have)})", where={"node": d["hostname"], "ranks": [r]}))
    per_rank = {str(r): RankEnv.from_json(d) for r, d in res.items()}
    ranks_on: dict[str, list[int]] = {}
    for r, d in sorted(res.items()):
        ranks_on.setdefault(d["hostname"], []).append(r)
    payload = EnvPayload(
        nodes={h: NodeEnv.of(per_rank[str(ranks[0])], tuple(ranks)) for h, ranks in ranks_on.items()},
        per_rank=per_rank,
    )
    first = next(iter(res.values()), {})
    text = f"torch {first.get('torch')} on {len(ranks_on)} node(s)" + (f", NCCL {first.get('nccl')}" if first.get("nccl") else "")
    return Summary(findings=findings, data=payload.to_json(), summary=text)
