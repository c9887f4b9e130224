"""Imported measurements as check results with the payloads of BW001 and P2P001, so the report, the
TUI and the recommenders read them like ddpdoctor's own (docs/architecture.md, "Bandwidth payloads").
Pure: parsed runs in, CheckResults out; the profile verdicts are added by model/imported/report.py.

- nccl-tests runs of one shape (same GPUs) → one BW001 result, a collective per run: rows, busbw and
  time curves, α–β fits. Wrong data (``#wrong`` ≠ 0, ``Out of bounds values : N FAILED``) is an error.
- a file's GPU↔GPU matrices (nvbandwidth, p2pBandwidthLatencyTest) → one P2P001 result: the
  unidirectional P2P matrix as ``matrix`` (row = sender), every matrix under ``matrices``; a GPU slow
  on all its links, or a pair far below the others, is named.
- a file's CPU↔GPU matrices (nvbandwidth host_to_device_…) → HD001: a GPU far below the others.
- perftest runs → RDMA001: the bandwidth curve per test and device.
"""

from __future__ import annotations

import statistics
from typing import Any

from ddpdoctor.core.payload import LabeledMatrix
from ddpdoctor.core.report import CheckResult, Finding, Severity, status_from_findings
from ddpdoctor.model.bandwidth.payloads import BwSweepPayload, LinkClass, P2PPayload
from ddpdoctor.model.bandwidth.sizes import format_size
from ddpdoctor.model.imported.tool_runs import BwMatrix, NcclRun, Parsed, RdmaRun

SLOW_FRAC, BAD_FRAC = 0.5, 0.25  # of the peers' median: warning, error (as P2P001's thresholds)
WRONG_HINT = (
    "wrong results without an error point at faulty hardware (GPU memory, NVLink, NIC) or a broken "
    "NCCL/driver install: rerun on the hosts named, then run `ddpdoctor check` there"
)


def _curve(points: list[list[float]], unit_y: str) -> dict:
    return {"unit_x": "B", "unit_y": unit_y, "points": points}


# -- nccl-tests -> BW001 ---------------------------------------------------------------------------------
def _rows(run: NcclRun) -> list[dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    for r in run.rows:
        if r.size_B <= 0:
            continue  # size 0 carries no bandwidth
        h = r.main
        row = {
            "size_B": r.size_B,
            "time_us": h.time_us,
            "algbw_GBps": h.algbw_GBps,
            "busbw_GBps": h.busbw_GBps,
            "iters": None,
            "verified": not _wrong_sizes(run, [r]),
            "dtype": r.dtype,
            "line": r.line,
        }
        if r.out_of_place and r.in_place:
            row["in_place"] = {"time_us": r.in_place.time_us, "busbw_GBps": r.in_place.busbw_GBps}
        rows[r.size_B] = row  # a repeated size (a log's duplicated row): the later one
    return [rows[s] for s in sorted(rows)]


def _wrong_sizes(run: NcclRun, rows) -> list[int]:
    if run.wrong_column != "#wrong":
        return []  # the old "error" column is the largest error, not a verdict
    return [
        r.size_B
        for r in rows
        if any(h is not None and h.wrong is not None and h.wrong > 0 for h in (r.out_of_place, r.in_place))
    ]


def _hosts_text(hosts: list[str]) -> str:
    return ", ".join(hosts[:4]) + (f" and {len(hosts) - 4} more" if len(hosts) > 4 else "")


def wrong_data_findings(run: NcclRun) -> list[Finding]:
    """One error per run whose data came back wrong: the sizes, the counts, the hosts."""
    bad = _wrong_sizes(run, run.rows)
    failed_oob = run.out_of_bounds is not None and run.out_of_bounds > 0
    if not bad and not failed_oob:
        return []
    hosts = run.hosts
    parts = []
    if bad:
        sizes = ", ".join(format_size(s) for s in bad[:4]) + (
            f" (+{len(bad) - 4} more)" if len(bad) > 4 else ""
        )
        parts.append(f"wrong elements (#wrong) at {sizes}")
    if failed_oob:
        parts.append(f"'Out of bounds values : {run.out_of_bounds} FAILED'")
    on = f" on {_hosts_text(hosts)}" if hosts else ""
    where_line = (
        f"{run.source.rsplit(':', 1)[0]}:{run.out_of_bounds_line}" if run.out_of_bounds_line else run.source
    )
    return [
        Finding(
            "BW001",
            Severity.ERROR,
            f"{run.op} returned wrong data{on}: {'; '.join(parts)} ({where_line})",
            where={"nodes": hosts, "ranks": [d.rank for d in run.devices if d.rank is not None]},
            evidence={
                "op": run.op,
                "wrong_sizes_B": bad,
                "out_of_bounds": run.out_of_bounds,
                "source": run.source,
            },
            hint=WRONG_HINT,
        )
    ]


def gpus_by_host(devices) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for d in devices:
        out.setdefault(d.host or "?", []).append(
            {"index": d.index, "name": d.name, "bus_id": d.bus_id, "rank": d.rank}
        )
    return out


def nccl_check(runs: list[NcclRun]) -> CheckResult:
    """One BW001 result for runs over the same GPUs (one run per collective)."""
    first = runs[0]
    n = first.nranks or 0
    hosts = first.hosts
    table = {run.op: _rows(run) for run in runs}
    data = BwSweepPayload.from_rows(
        table,
        world_size=n,
        nnodes=max(1, len(hosts)),
        backend="nccl",
        device=first.devices[0].name if first.devices else None,
        stopped=None,
        source={"tool": "nccl-tests", "runs": {run.op: run.source for run in runs}},
        gpus_by_host=gpus_by_host(first.devices),
        hosts=tuple(hosts),
        avg_busbw_GBps={run.op: run.avg_busbw_GBps for run in runs},
    ).to_json()
    findings = [f for run in runs for f in wrong_data_findings(run)]
    return CheckResult(
        "BW001",
        f"Collective bandwidth (nccl-tests: {', '.join(table)})",
        status=status_from_findings(findings),
        summary=nccl_headline(table, n, hosts),
        findings=findings,
        data=data,
    )


def nccl_headline(table: dict[str, list[dict]], n: int, hosts: list[str], verdict: str | None = None) -> str:
    """ "all_reduce busbw 235 GB/s at 8 GiB (peak)" or, judged, the verdict in its place; then the shape."""
    op = "all_reduce" if table.get("all_reduce") else next((o for o in table if table[o]), None)
    if op is None:
        return "no sizes measured"
    peak = max(table[op], key=lambda r: r["busbw_GBps"])
    text = verdict or f"{op} busbw {peak['busbw_GBps']:.3g} GB/s at {format_size(peak['size_B'])} (peak)"
    where = f"{n} GPUs" if n else "GPUs"
    return text + f"; {len(table)} collective(s), {where} on {_hosts_text(hosts) or '?'}"


def group_nccl(runs: list[NcclRun]) -> list[list[NcclRun]]:
    """Runs over the same GPUs go together, one run per collective (a repeated collective starts a
    new group: two all_reduce tables are two measurements, not one curve)."""
    groups: list[list[NcclRun]] = []
    open_group: dict[tuple, list[NcclRun]] = {}  # the group still taking runs, per shape
    for run in runs:
        key = (run.nranks, tuple(run.hosts))
        g = open_group.get(key)
        if g is None or any(r.op == run.op for r in g):
            g = open_group[key] = []
            groups.append(g)
        g.append(run)
    return groups


# -- GPU matrices -> P2P001 --------------------------------------------------------------------------------
def _oriented(m: BwMatrix) -> list[list[float | None]]:
    """Row = sender, as P2P001 writes it: "GPU(row) <- GPU(column)" is transposed."""
    if m.direction == "<-":
        return [list(col) for col in zip(*m.values)]
    return [list(r) for r in m.values]


def off_diagonal(values) -> list[float]:
    return [v for i, row in enumerate(values) for j, v in enumerate(row) if i != j and v is not None]


def _primary(mats: list[BwMatrix]) -> BwMatrix | None:
    """The matrix P2P001's ``matrix`` means: one-way GPU→GPU bandwidth with peer access on."""

    def rank(m: BwMatrix) -> tuple:
        n = m.name
        return (
            "P2P=Enabled" not in n and "device_to_device" not in n,
            "write" not in n and "Writes" not in n,
            "_sm" in n,
        )

    cands = [
        m
        for m in mats
        if m.square_gpu
        and m.unit == "GB/s"
        and m.direction in ("->", "<-")
        and "Disabled" not in m.name
        and "CPU-initiated" not in m.name
    ]
    return min(cands, key=rank) if cands else None


def gpu_matrix_findings(
    code: str, m: BwMatrix, labels: list[str], values, buses: dict[int, str] | None = None
) -> tuple[list[Finding], set]:
    """A GPU slow on all its links, and pairs far below the others' median (peer-relative)."""
    cells = off_diagonal(values)
    n = len(values)
    if len(cells) < 2 or n < 3:
        return [], set()
    med = statistics.median(cells)
    if med <= 0:
        return [], set()
    findings, outliers = [], set()
    slow = {}
    for g in range(n):
        links = [v for j, v in enumerate(values[g]) if j != g and v is not None]
        links += [values[i][g] for i in range(n) if i != g and values[i][g] is not None]
        if links and (gm := statistics.median(links)) < SLOW_FRAC * med:
            slow[g] = gm
    for g, gm in slow.items():
        sev = Severity.ERROR if gm < BAD_FRAC * med else Severity.WARNING
        findings.append(
            Finding(
                code,
                sev,
                f"{labels[g]}{_bus(buses, g)} is slow on all its links ({m.name}): median {gm:.3g} {m.unit}, "
                f"{gm / med:.0%} of the {med:.3g} {m.unit} the other GPUs reach ({m.source})",
                where={"gpu": labels[g], "bus_id": (buses or {}).get(g)},
                evidence={"matrix": m.name, "gpu_median_GBps": round(gm, 4), "median_GBps": round(med, 4)},
                hint="one GPU slow on every link: its NVLinks or PCIe link (nvidia-smi nvlink --status, "
                "nvidia-smi -q: link width/generation, clocks, XID errors)",
            )
        )
        outliers |= {(g, j) for j in range(n) if j != g} | {(i, g) for i in range(n) if i != g}
    pairs = [
        (i, j, v)
        for i, row in enumerate(values)
        for j, v in enumerate(row)
        if i != j and v is not None and v < SLOW_FRAC * med and i not in slow and j not in slow
    ]
    if pairs:
        pairs.sort(key=lambda p: p[2])
        worst = pairs[0][2]
        sev = Severity.ERROR if worst < BAD_FRAC * med else Severity.WARNING
        shown = "; ".join(
            f"{labels[i]} → {labels[j]} {v:.3g} {m.unit} ({v / med:.0%})" for i, j, v in pairs[:4]
        )
        more = f" (+{len(pairs) - 4} more)" if len(pairs) > 4 else ""
        findings.append(
            Finding(
                code,
                sev,
                f"slow GPU pair(s) in {m.name}, against the median {med:.3g} {m.unit}: {shown}{more} ({m.source})",
                where={
                    "link": [pairs[0][0], pairs[0][1]],
                    "gpus": [labels[pairs[0][0]], labels[pairs[0][1]]],
                },
                evidence={
                    "matrix": m.name,
                    "pairs": [[i, j, v] for i, j, v in pairs],
                    "median_GBps": round(med, 4),
                },
                hint="a slow pair while both GPUs are fast elsewhere: the link between them (NVLink lanes "
                "down, a PCIe path through the CPU instead of a switch: nvidia-smi topo -m)",
            )
        )
        outliers |= {(i, j) for i, j, _ in pairs}
    return findings, outliers


def parsed_host_known(parsed: Parsed) -> bool:
    return any(d.host for d in parsed.devices)


def gpu_labels(n: int, host: str | None) -> list[str]:
    """GPU3@node7 when the log names the host (as P2P001's r3@node7), else GPU3."""
    return [f"GPU{i}@{host}" if host else f"GPU{i}" for i in range(n)]


def matrix_check(parsed: Parsed, host: str) -> CheckResult | None:
    mats = [m for m in parsed.matrices if m.square_gpu]
    primary = _primary(mats)
    if primary is None:
        return None
    values = _oriented(primary)
    n = len(values)
    labels = gpu_labels(n, host if parsed_host_known(parsed) else None)
    findings, outliers = [], set()
    for m in mats:
        if m.unit != "GB/s" or m.direction == "<->" or "Disabled" in m.name:
            continue  # bidirectional and host-staged copies are context, not links to judge
        f, o = gpu_matrix_findings(
            "P2P001", m, labels, _oriented(m), {d.index: d.bus_id for d in parsed.devices}
        )
        findings += f
        if m is primary:
            outliers = o
    cells = off_diagonal(values)
    med = statistics.median(cells) if cells else None
    names = {d.index: d.name for d in parsed.devices}
    data = P2PPayload(
        matrix=LabeledMatrix(tuple(labels), tuple(map(tuple, values)), unit="GB/s"),
        matrices={
            m.name: {
                "unit": m.unit,
                "labels": labels[: len(m.row_labels)],
                "values": _oriented(m),
                "description": m.description,
            }
            for m in mats
        },
        mode="sequential",  # both tools measure one pair at a time
        ranks=tuple(
            {"rank": i, "node_rank": 0, "local_rank": i, "hostname": host, "gpu": names.get(i)}
            for i in range(n)
        ),
        outliers=tuple(sorted(outliers)),
        classes={"intra_node": LinkClass(median_GBps=med, pairs=len(cells))} if med is not None else {},
        pairs_measured=len(cells),
        pairs_possible=n * (n - 1),
        source={"tool": primary.tool, "file": parsed.path, "matrix": primary.name, "at": primary.source},
        gpus_by_host={
            host: [{"index": d.index, "name": d.name, "bus_id": d.bus_id} for d in parsed.devices]
        },
    ).to_json()
    summary = (
        f"{primary.name}: GPU↔GPU median {med:.3g} GB/s over {len(cells)} pairs"
        if med
        else f"{primary.name}: no pair measured"
    )
    return CheckResult(
        "P2P001",
        f"GPU-to-GPU bandwidth ({primary.tool})",
        status=status_from_findings(findings),
        summary=summary,
        findings=findings,
        data=data,
    )


# -- CPU<->GPU matrices -> HD001 ---------------------------------------------------------------------------
def _bus(buses: dict[int, str | None] | None, g: int) -> str:
    """ " (bus 0000:ba:00)" when the log gave the GPU's PCI address: what finds the card in the box."""
    bus = (buses or {}).get(g)
    return f" (bus {bus})" if bus else ""


def host_device_check(parsed: Parsed, host: str) -> CheckResult | None:
    mats = [m for m in parsed.matrices if "CPU" in (m.row_kind, m.col_kind) and m.unit == "GB/s"]
    if not mats:
        return None
    findings: list[Finding] = []
    tests: dict[str, Any] = {}
    buses = {d.index: d.bus_id for d in parsed.devices}
    parts = []
    for m in mats:
        # one figure per GPU: the GPU is the column (CPU(row)) or the row (GPU(row) ... CPU(column))
        per_gpu_rows = m.values if m.row_kind == "GPU" else [list(c) for c in zip(*m.values)]
        gpu_vals = [max((v for v in r if v is not None), default=None) for r in per_gpu_rows]
        labels = gpu_labels(len(gpu_vals), host if parsed_host_known(parsed) else None)
        tests[m.name] = {
            "unit": m.unit,
            "labels": labels,
            "values": gpu_vals,
            "description": m.description,
            "sum_GBps": m.total,
        }
        got = [v for v in gpu_vals if v is not None]
        if len(got) < 3:
            continue
        med = statistics.median(got)
        parts.append(f"{m.name} median {med:.3g} GB/s")
        for g, v in enumerate(gpu_vals):
            if v is not None and med > 0 and v < SLOW_FRAC * med:
                findings.append(
                    Finding(
                        "HD001",
                        Severity.ERROR if v < BAD_FRAC * med else Severity.WARNING,
                        f"{labels[g]}{_bus(buses, g)}: {m.name} {v:.3g} GB/s, {v / med:.0%} of the {med:.3g} GB/s "
                        "the other GPUs "
                        f"get ({m.source})",
                        where={"gpu": labels[g], "bus_id": buses.get(g)},
                        evidence={"test": m.name, "GBps": v, "median_GBps": round(med, 4)},
                        hint="one GPU slow to or from host memory: its PCIe link (nvidia-smi -q: current link "
                        "generation and width), its NUMA placement, or a bad riser/slot",
                    )
                )
    return CheckResult(
        "HD001",
        "Host-to-GPU copy bandwidth (nvbandwidth)",
        status=status_from_findings(findings),
        summary="; ".join(parts[:2]) or f"{len(tests)} host↔GPU test(s)",
        findings=findings,
        data={"host_device": tests, "source": {"tool": "nvbandwidth", "file": parsed.path}},
    )


# -- perftest -> RDMA001 -------------------------------------------------------------------------------------
def rdma_check(runs: list[RdmaRun]) -> CheckResult:
    curves, table = {}, {}
    for r in runs:
        key = f"{r.test} {r.device or '?'}"
        curves[key] = _curve(
            [[row.size_B, row.avg_GBps] for row in sorted(r.rows, key=lambda x: x.size_B)], "GB/s"
        )
        table[key] = {
            "test": r.test,
            "device": r.device,
            "link_type": r.link_type,
            "connection": r.connection,
            "source": r.source,
            "rows": [
                {
                    "size_B": x.size_B,
                    "iterations": x.iterations,
                    "peak_GBps": x.peak_GBps,
                    "avg_GBps": x.avg_GBps,
                    "msg_rate_Mpps": x.msg_rate_Mpps,
                }
                for x in r.rows
            ],
        }
    best = {k: max(t["rows"], key=lambda x: x["avg_GBps"]) for k, t in table.items()}
    summary = "; ".join(
        f"{k} {b['avg_GBps']:.3g} GB/s at {format_size(b['size_B'])}" for k, b in best.items()
    )
    return CheckResult(
        "RDMA001",
        "RDMA bandwidth (perftest)",
        summary=summary,
        data={
            "busbw": curves,
            "runs": table,
            "best": {k: {"size_B": b["size_B"], "GBps": b["avg_GBps"]} for k, b in best.items()},
        },
    )
