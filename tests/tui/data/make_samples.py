"""Regenerate the sample reports the TUI tests read (python tests/tui/data/make_samples.py).

The figures follow this machine's measurements and the reference facts in shared/DESIGN.md: gloo over
loopback ≈ 2 GB/s p2p, a netns link shaped to 200 Mbit/s ≈ 0.025 GB/s, H100 SXM NVLink4 ring busbw
≈ 370 GB/s, NDR 400 Gb/s HCAs. They are samples for the views, not measurements.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
T0 = 1795320000.0  # a fixed "created" time keeps the files (and snapshots) stable


def finding(code, sev, msg, where=None, evidence=None, hint=None, location=None):
    d = {"code": code, "severity": sev, "message": msg, "where": where or {}, "evidence": evidence or {}}
    if hint:
        d["hint"] = hint
    if location:
        d["location"] = location
    return d


def check(code, title, status, summary, dur, findings=(), data=None, kind="cluster"):
    return {
        "code": code,
        "title": title,
        "kind": kind,
        "status": status,
        "summary": summary,
        "duration_s": dur,
        "findings": list(findings),
        "data": data or {},
    }


def header() -> dict:
    return {"schema_version": 1, "tool": {"name": "ddpdoctor", "version": "0.1.0"}, "created": T0}


def busbw_curve(n, alpha_s, algbw_Bps, sizes):
    times = [[s, round(alpha_s + s / algbw_Bps, 9)] for s in sizes]
    factor = 2 * (n - 1) / n  # all_reduce busbw factor (nccl-tests PERFORMANCE.md)
    return {
        "all_reduce": {"unit_x": "B", "unit_y": "s", "points": times},
        "busbw": {
            "unit_x": "B",
            "unit_y": "GB/s",
            "points": [[s, round(s / t * factor / 1e9, 4)] for s, t in times],
        },
    }


def gloo_2x2():
    hosts = ["ddpd-node0", "ddpd-node0", "ddpd-node1", "ddpd-node1"]
    labels = [f"r{r}@{h}" for r, h in enumerate(hosts)]
    intra, inter = 2.05, 1.12
    vals = [
        [None if i == j else (intra if hosts[i] == hosts[j] else inter) for j in range(4)] for i in range(4)
    ]
    vals[0][1], vals[1][0], vals[2][3], vals[3][2] = 2.11, 1.98, 2.03, 2.07
    vals[0][2], vals[2][0], vals[1][3] = 1.15, 1.09, 1.13
    vals[3][1] = 0.025  # the shaped direction node1 -> node0
    vals[3][0] = 0.026
    sizes = [4**k for k in range(5, 14)]  # 1 KiB .. 64 MiB
    bw = busbw_curve(4, 180e-6, 0.52e9, sizes)
    bw["expected_busbw_GBps"] = 1.1
    return {
        **header(),
        "run": {
            "backend": "gloo",
            "world_size": 4,
            "nodes": 2,
            "nproc_per_node": 2,
            "endpoint": "10.213.0.1:29400",
            "suite": "quick",
            "complete": True,
        },
        "ranks": [
            {"rank": r, "local_rank": r % 2, "node_rank": r // 2, "hostname": h} for r, h in enumerate(hosts)
        ],
        "versions": {"torch": "2.13.0+cpu", "python": "3.12.3", "gloo": "bundled"},
        "checks": [
            check(
                "ENV001",
                "Environment consistency",
                "passed",
                "torch 2.13.0+cpu on all 4 ranks",
                0.41,
                data={"versions": {"torch": {"2.13.0+cpu": [0, 1, 2, 3]}}},
            ),
            check(
                "RDZ001",
                "Rendezvous",
                "passed",
                "4 ranks on 2 nodes joined in 1.32 s",
                1.32,
                data={"seconds": {"0": 1.21, "1": 1.22, "2": 1.32, "3": 1.31}},
            ),
            check(
                "COL001",
                "Collective correctness",
                "passed",
                "7 collectives × 3 dtypes agree",
                2.8,
                data={
                    "ops": [
                        "all_reduce",
                        "broadcast",
                        "all_gather",
                        "reduce_scatter",
                        "all_to_all",
                        "barrier",
                        "send_recv",
                    ]
                },
            ),
            check(
                "BW001",
                "All-reduce bandwidth sweep",
                "warning",
                "busbw 0.78 GB/s at 64M, below the expected 1.1 GB/s",
                9.6,
                findings=[
                    finding(
                        "BW001",
                        "warning",
                        "all_reduce busbw 0.78 GB/s at 64 MiB is 71% of "
                        "the 1.1 GB/s expected for 10 GbE-class links",
                        where={"ranks": [0, 1, 2, 3]},
                        evidence={"busbw_GBps": 0.78, "expected_GBps": 1.1, "size_B": 67108864},
                        hint="the slowest link sets a ring's speed: see P2P001",
                    )
                ],
                data=bw,
            ),
            check(
                "P2P001",
                "Point-to-point bandwidth matrix",
                "failed",
                "1 slow link: r3@ddpd-node1 → r1@ddpd-node0 at 0.025 GB/s",
                6.1,
                findings=[
                    finding(
                        "P2P001",
                        "error",
                        "r3 → r1 (ddpd-node1 → ddpd-node0) at 0.025 GB/s is 2% of the median 1.1 GB/s",
                        where={"ranks": [3, 1], "node": "ddpd-node1", "link": "ddpd-node1→ddpd-node0"},
                        evidence={"GBps": 0.025, "median_GBps": 1.12, "size_B": 67108864},
                        hint="check the NIC, cable and any shaping on ddpd-node1's egress",
                    ),
                    finding(
                        "P2P001",
                        "warning",
                        "r3 → r0 at 0.026 GB/s, same direction",
                        where={"ranks": [3, 0]},
                        evidence={"GBps": 0.026},
                    ),
                ],
                data={
                    "matrix": {"unit": "GB/s", "labels": labels, "values": vals},
                    "outliers": [[3, 1], [3, 0]],
                    "size_B": 67108864,
                    "mode": "pairs",
                },
            ),
        ],
        "recommendations": [
            {
                "id": "bucket_cap_mb",
                "title": "DDP bucket size",
                "value": 50,
                "evidence": {"busbw_at_25MiB_GBps": 0.74, "busbw_at_50MiB_GBps": 0.77, "alpha_us": 180},
                "confidence": "medium",
                "rationale": "The measured all-reduce curve flattens above 16 MiB; replaying a 124 M-parameter "
                "model's buckets, 50 MiB overlaps 6% more communication than the default 25 MiB.",
                "snippet": "model = DDP(model, device_ids=None, bucket_cap_mb=50)",
                "data": {},
            },
            {
                "id": "gloo_ifname",
                "title": "Pin gloo to the fast interface",
                "value": "ddpd-v0",
                "evidence": {"interfaces": ["lo", "ddpd-v0"]},
                "confidence": "high",
                "rationale": "gloo picked the interface by hostname lookup; name it so every node agrees.",
                "snippet": "export GLOO_SOCKET_IFNAME=ddpd-v0",
                "data": {},
            },
        ],
        "lint": [
            finding(
                "DDP101",
                "error",
                "DistributedSampler without sampler.set_epoch(epoch) in the epoch loop: "
                "every epoch sees the same order",
                location={"path": "train_bad.py", "line": 18, "col": 5},
                hint="call train_sampler.set_epoch(epoch) at the top of the loop",
            ),
            finding(
                "DDP301",
                "error",
                "all_reduce only on rank 0: the other ranks never join and the job hangs",
                location={"path": "train_bad.py", "line": 25, "col": 17, "end_line": 25, "end_col": 47},
            ),
            finding(
                "DDP601",
                "warning",
                "find_unused_parameters=True with a static graph costs an extra pass",
                location={"path": "train_bad.py", "line": 13, "col": 17},
            ),
        ],
    }


def gpu_node():
    n = 8
    gpus = [f"GPU{i}" for i in range(n)]
    nv = [[None if i == j else 18 for j in range(n)] for i in range(n)]
    nics = [
        {
            "name": f"mlx5_{k}",
            "state": "ACTIVE",
            "rate_gbps": 400,
            "link_layer": "InfiniBand",
            "numa": 0 if i < 4 else 1,
            "gpu": f"GPU{i}",
            "rail": i,
            "path": "PIX",
        }
        for i, k in enumerate([0, 1, 4, 5, 6, 7, 8, 9])
    ]
    nics.append(
        {
            "name": "mlx5_bond_0",
            "state": "ACTIVE",
            "rate_gbps": 200,
            "link_layer": "Ethernet",
            "numa": 0,
            "gpu": None,
            "rail": None,
            "path": "SYS",
        }
    )
    sizes = [2**k for k in range(10, 34, 2)]
    bw = busbw_curve(8, 22e-6, 212e9, sizes)
    vals = [[None if i == j else round(389.0 - (i * 7 + j) % 5 * 0.8, 1) for j in range(n)] for i in range(n)]
    vals[5][2] = 121.4
    return {
        **header(),
        "run": {
            "backend": "nccl",
            "world_size": 8,
            "nodes": 1,
            "endpoint": "gpu-h100-07:29400",
            "complete": True,
        },
        "ranks": [{"rank": r, "local_rank": r, "node_rank": 0, "hostname": "gpu-h100-07"} for r in range(n)],
        "versions": {"torch": "2.13.0+cu128", "nccl": "2.27.3", "driver": "570.124.06", "cuda": "12.8"},
        "checks": [
            check(
                "NVL001",
                "NVLink topology",
                "passed",
                "8 GPUs fully connected by NV18 (NVLink4)",
                0.3,
                data={
                    "gpus": [
                        {"index": i, "name": "NVIDIA H100 80GB HBM3", "numa": 0 if i < 4 else 1}
                        for i in range(n)
                    ],
                    "nvlink": {"unit": "links", "labels": gpus, "values": nv},
                },
            ),
            check(
                "IB001",
                "InfiniBand ports and rails",
                "passed",
                "8 × NDR 400 Gb/s ACTIVE, one per GPU",
                0.2,
                data={"nics": nics},
            ),
            check(
                "GDR001",
                "GPUDirect RDMA",
                "passed",
                "enabled: nvidia_peermem loaded, NICs PIX to GPUs",
                0.1,
                data={
                    "gdr": {
                        "verdict": "enabled",
                        "reason": "peer memory module present and every rail NIC is PIX to its GPU",
                        "evidence": {
                            "/sys/module/nvidia_peermem/version": "570.124.06",
                            "NCCL_NET_GDR_LEVEL": "unset (default PXB)",
                        },
                    }
                },
            ),
            check(
                "BW001",
                "All-reduce bandwidth sweep",
                "passed",
                "busbw 362 GB/s at 8G (NVLink4 ring)",
                14.2,
                data={**bw, "expected_busbw_GBps": 370.0},
            ),
            check(
                "P2P001",
                "Point-to-point bandwidth matrix",
                "failed",
                "1 slow link: GPU5 → GPU2 121 GB/s",
                11.0,
                findings=[
                    finding(
                        "P2P001",
                        "error",
                        "r5 → r2 at 121 GB/s is 31% of the median 388 GB/s",
                        where={"ranks": [5, 2], "gpu": [5, 2]},
                        evidence={"GBps": 121.4, "median_GBps": 388.2},
                    )
                ],
                data={
                    "matrix": {
                        "unit": "GB/s",
                        "labels": [f"r{i}@gpu-h100-07" for i in range(n)],
                        "values": vals,
                    },
                    "outliers": [[5, 2]],
                },
            ),
        ],
        "recommendations": [
            {
                "id": "nccl_algo",
                "title": "NCCL_ALGO",
                "value": "keep the default",
                "evidence": {
                    "Ring_64MiB_GBps": 351.0,
                    "Tree_64MiB_GBps": 298.0,
                    "NVLS_64MiB_GBps": 472.0,
                    "nccl": "2.27.3",
                },
                "confidence": "high",
                "rationale": "NCCL already picks NVLS at the job's sizes; an override would only pin it.",
                "snippet": None,
                "data": {},
            },
        ],
        "lint": [],
    }


if __name__ == "__main__":
    for name, rep in (("report_2x2_gloo.json", gloo_2x2()), ("report_gpu_node.json", gpu_node())):
        (HERE / name).write_text(json.dumps(rep, indent=1) + "\n")
        print("wrote", HERE / name)
