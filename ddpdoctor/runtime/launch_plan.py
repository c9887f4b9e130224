"""How `ddpdoctor check` becomes a torchrun (torch.distributed.run) launch. Pure: no torch import.

Node count, node rank and endpoint come from the options, else from Slurm's environment
(`srun ddpdoctor check`, one task per node), else from a Kubernetes training job's (Kubeflow
PyTorchJob: PET_NNODES, PET_NODE_RANK, MASTER_ADDR..., or an indexed Job), else a single node here.
"""

from __future__ import annotations

import re
import socket
import sys
from dataclasses import dataclass, field
from typing import Mapping

DEFAULT_PORT = 29400


class LaunchError(Exception):
    """Options that cannot make a launch; the message says which and why."""


@dataclass
class LaunchPlan:
    nnodes: int
    nproc_per_node: int
    endpoint_host: str
    endpoint_port: int
    rdzv_id: str
    rdzv_timeout_s: float
    node_rank: int | None = None  # None: the rendezvous assigns it
    is_host: bool | None = None  # whether this node hosts the rendezvous store (None: torch decides)
    source: str = "options"  # options | slurm | kubernetes | local
    endpoint_origin: str = "--rdzv-endpoint"  # where the endpoint came from, for messages
    prints_report: bool = True  # False on Slurm tasks other than SLURM_PROCID=0: one report per job
    local_addr: str | None = None  # this node's address as the others reach it (torchrun --local-addr)
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        host = f"[{self.endpoint_host}]" if ":" in self.endpoint_host else self.endpoint_host
        return f"{host}:{self.endpoint_port}"

    def torchrun_argv(self, worker_args: list[str], python: str | None = None) -> list[str]:
        t = max(1, int(round(self.rdzv_timeout_s)))
        conf = f"join_timeout={t},read_timeout={t}"
        if self.is_host is not None:
            conf += f",is_host={'true' if self.is_host else 'false'}"
        argv = [
            python or sys.executable, "-m", "torch.distributed.run",
            "--nnodes", f"{self.nnodes}:{self.nnodes}",
            "--nproc-per-node", str(self.nproc_per_node),
            "--rdzv-backend", "c10d",
            "--rdzv-endpoint", self.endpoint,
            "--rdzv-id", self.rdzv_id,
            "--rdzv-conf", conf,
            "--max-restarts", "0",
            "--monitor-interval", "0.2",
        ]
        if self.local_addr:
            # Without it the agent of node 0 advertises its hostname, which other nodes (or even the
            # node itself, in a container or namespace) may not resolve.
            argv += ["--local-addr", self.local_addr]
        return argv + ["-m", "ddpdoctor.runtime.worker", *worker_args]


def parse_endpoint(text: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """``HOST:PORT``, ``HOST``, ``[v6]:PORT``. Raises LaunchError with the reason."""
    text = text.strip()
    if not text:
        raise LaunchError("empty --rdzv-endpoint; expected HOST:PORT")
    m = re.fullmatch(r"\[([0-9a-fA-F:.]+)\](?::(\d+))?", text)
    if m:
        host, port = m.group(1), m.group(2)
    elif text.count(":") == 1:
        host, port = text.split(":")
    elif ":" in text:
        raise LaunchError(f"--rdzv-endpoint {text!r}: write IPv6 addresses as [ADDR]:PORT")
    else:
        host, port = text, None
    if not host:
        raise LaunchError(f"--rdzv-endpoint {text!r}: no host")
    if port is None or port == "":
        return host, default_port
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise LaunchError(f"--rdzv-endpoint {text!r}: port must be 1..65535")
    return host, int(port)


def expand_slurm_nodelist(spec: str) -> list[str]:
    """``node[01-03,07],gpu5`` -> ``[node01, node02, node03, node07, gpu5]`` (zero padding kept).
    Several bracket groups in one name expand as Slurm does, the leftmost slowest:
    ``rack[1-2]-node[01-02]`` -> ``rack1-node01, rack1-node02, rack2-node01, rack2-node02``."""
    if spec.count("[") != spec.count("]") or re.search(r"\[[^\]]*\[|\][^\[]*\]", spec):
        raise LaunchError(f"cannot read Slurm node list {spec!r} (unbalanced brackets)")
    # commas outside brackets separate names; those inside separate ranges
    parts = re.findall(r"(?:[^,\[]|\[[^\]]*\])+", spec)
    return [host for part in parts for host in _expand_name(part, spec)]


def _expand_name(name: str, spec: str) -> list[str]:
    m = re.match(r"([^\[]*)\[([^\]]*)\](.*)", name)
    if not m:
        return [name]
    prefix, ranges, rest = m.groups()
    heads: list[str] = []
    for r in ranges.split(","):
        lo, dash, hi = r.partition("-")
        if not lo.isdigit() or (dash and (not hi.isdigit() or int(hi) < int(lo))):
            raise LaunchError(f"cannot read Slurm node list {spec!r} (range {r!r})")
        numbers = range(int(lo), int(hi) + 1) if dash else [int(lo)]
        heads.extend(f"{prefix}{i:0{len(lo)}d}" for i in numbers)
    tails = _expand_name(rest, spec)
    return [h + tail for h in heads for tail in tails]


def slurm_settings(env: Mapping[str, str]) -> dict | None:
    """Nodes, node rank, endpoint host and run id from SLURM_* (None when not under srun/sbatch)."""
    if "SLURM_JOB_ID" not in env or "SLURM_NODEID" not in env:
        return None
    in_step = env.get("SLURM_STEP_ID") is not None or env.get("SLURM_STEPID") is not None
    # A step may run on part of the allocation (srun -N2 in a 3-node job): its own node count, and
    # SLURM_NODEID counts within the step.
    nnodes = int((env.get("SLURM_STEP_NUM_NODES") if in_step else None) or env.get("SLURM_JOB_NUM_NODES")
                 or env.get("SLURM_NNODES") or 1)
    if not in_step and nnodes > 1:
        # The batch script runs on the first node only: the other nodes would never join.
        raise LaunchError(
            f"this is the batch script of a {nnodes}-node Slurm job, not a job step: start one task per node "
            "with `srun --ntasks-per-node=1 ddpdoctor check` (see examples/ddpdoctor-check.sbatch)"
        )
    per_node = env.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0]
    if env.get("SLURM_STEP_ID") is not None and per_node.isdigit() and int(per_node) > 1:
        raise LaunchError(
            "run one ddpdoctor task per node under Slurm (srun --ntasks-per-node=1 ddpdoctor check): "
            "ddpdoctor starts the ranks of each node itself"
        )
    var = next((v for v in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST") if env.get(v)), None)
    if var == "SLURM_STEP_NODELIST" and env.get("SLURM_JOB_NODELIST") == env[var]:
        var = "SLURM_JOB_NODELIST"  # the same list; name the one users know
    hosts = expand_slurm_nodelist(env[var]) if var else []
    return {
        "nnodes": nnodes,
        "node_rank": int(env["SLURM_NODEID"]),
        "endpoint": f"{hosts[0]}:{DEFAULT_PORT}" if hosts else None,
        "origin": f"the first host of {var or 'SLURM_JOB_NODELIST'}",
        "rdzv_id": f"slurm-{env['SLURM_JOB_ID']}",
        "prints_report": env.get("SLURM_PROCID", "0") == "0",
    }


def _int_var(env: Mapping[str, str], name: str) -> int:
    value = env[name].strip()
    if not value.isdigit():
        raise LaunchError(f"{name}={env[name]!r} is not a whole number")
    return int(value)


def kubernetes_settings(env: Mapping[str, str]) -> dict | None:
    """Nodes, node rank, ranks per node and endpoint from a Kubernetes training job (None when absent).

    Kubeflow's training operator (PyTorchJob) sets PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK and
    MASTER_ADDR/MASTER_PORT (PET_MASTER_ADDR/PET_MASTER_PORT in newer releases); with an elasticPolicy it
    sets PET_RDZV_ENDPOINT, PET_RDZV_ID and a PET_NNODES range instead of a node rank. A plain indexed
    Job gives JOB_COMPLETION_INDEX; the manifest sets the rest (docs/kubernetes.md).
    """
    if "PET_NNODES" not in env:
        return None
    nnodes_text = env["PET_NNODES"].strip()
    lo, _, hi = nnodes_text.partition(":")
    if hi and lo != hi:
        raise LaunchError(f"PET_NNODES={nnodes_text} is an elastic range; ddpdoctor checks a fixed set of "
                          "nodes: set minReplicas = maxReplicas, or give --nodes N")
    if not lo.isdigit() or int(lo) < 1:
        raise LaunchError(f"PET_NNODES={nnodes_text!r} is not a node count")
    rank_var = next((v for v in ("PET_NODE_RANK", "JOB_COMPLETION_INDEX") if env.get(v, "").strip()), None)
    node_rank = _int_var(env, rank_var) if rank_var else None
    nproc = env.get("PET_NPROC_PER_NODE", "").strip()
    endpoint, origin = None, None
    if env.get("PET_RDZV_ENDPOINT", "").strip():
        endpoint, origin = env["PET_RDZV_ENDPOINT"].strip(), "PET_RDZV_ENDPOINT"
    else:
        for prefix in ("PET_", ""):
            addr = env.get(f"{prefix}MASTER_ADDR", "").strip()
            if addr:
                port = env.get(f"{prefix}MASTER_PORT", "").strip() or str(DEFAULT_PORT)
                endpoint, origin = f"{addr}:{port}", f"{prefix}MASTER_ADDR"
                break
    backend = env.get("PET_RDZV_BACKEND", "c10d").strip()
    if backend not in ("c10d", ""):
        raise LaunchError(f"PET_RDZV_BACKEND={backend}: ddpdoctor runs its own c10d rendezvous; "
                          "use rdzvBackend c10d (or leave it unset)")
    return {
        "nnodes": int(lo),
        "node_rank": node_rank,
        # "auto", "gpu" or "cpu" (torchrun's words) leave the choice to ddpdoctor's own default
        "nproc_per_node": int(nproc) if nproc.isdigit() else None,
        "endpoint": endpoint,
        "origin": origin,
        "rdzv_id": env.get("PET_RDZV_ID", "").strip() or None,
    }


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def plan_launch(
    *,
    nodes: int | None,
    nproc_per_node: int | None,
    node_rank: int | None,
    rdzv_endpoint: str | None,
    rdzv_id: str | None,
    rdzv_timeout_s: float,
    env: Mapping[str, str],
    default_nproc_per_node: int = 1,
) -> LaunchPlan:
    if rdzv_timeout_s <= 0:
        raise LaunchError("--rdzv-timeout must be positive")
    origin, source = "--rdzv-endpoint", "options"
    found = None
    if nodes is None or rdzv_endpoint is None:
        found = slurm_settings(env)
        source = "slurm" if found else "options"
        if found is None:
            found = kubernetes_settings(env)
            source = "kubernetes" if found else "options"
    if found:
        nodes = nodes or found["nnodes"]
        node_rank = found["node_rank"] if node_rank is None else node_rank
        rdzv_id = rdzv_id or found["rdzv_id"]
        nproc_per_node = nproc_per_node or found.get("nproc_per_node")
        if rdzv_endpoint is None:
            if not found["endpoint"]:
                raise LaunchError(
                    "under Slurm but SLURM_JOB_NODELIST is empty; give --rdzv-endpoint" if source == "slurm"
                    else "PET_NNODES is set but neither PET_RDZV_ENDPOINT nor MASTER_ADDR; give --rdzv-endpoint"
                )
            rdzv_endpoint, origin = found["endpoint"], found["origin"]
    if nproc_per_node is None:
        nproc_per_node = default_nproc_per_node
    if nproc_per_node < 1:
        raise LaunchError("--nproc-per-node must be at least 1")
    nodes = nodes or 1
    if nodes < 1:
        raise LaunchError("--nodes must be at least 1")
    if node_rank is not None and not 0 <= node_rank < nodes:
        raise LaunchError(f"--node-rank {node_rank} is outside 0..{nodes - 1}")
    if nodes > 1 and rdzv_endpoint is None:
        raise LaunchError(
            f"--nodes {nodes} needs --rdzv-endpoint HOST:PORT (the same on every node; HOST is node 0), "
            "or run under Slurm or a Kubernetes training job"
        )
    if rdzv_endpoint is None:
        host, port, source = "127.0.0.1", free_port(), "local"
        is_host: bool | None = True
    else:
        try:
            host, port = parse_endpoint(rdzv_endpoint)
        except LaunchError as e:
            raise LaunchError(str(e).replace("--rdzv-endpoint", origin, 1)) from None
        # With an explicit node rank the hosting is explicit too: node 0 hosts the store. Without it,
        # torch's c10d backend decides by matching the endpoint to this machine's addresses.
        is_host = None if node_rank is None else node_rank == 0
    return LaunchPlan(
        nnodes=nodes,
        nproc_per_node=nproc_per_node,
        endpoint_host=host,
        endpoint_port=port,
        rdzv_id=rdzv_id or "ddpdoctor",
        rdzv_timeout_s=rdzv_timeout_s,
        node_rank=node_rank,
        is_host=is_host,
        source=source,
        endpoint_origin=origin,
        prints_report=found.get("prints_report", True) if found else True,
    )
