"""Point-to-point bandwidth and latency for every ordered pair of ranks, and which node or link is slow.

What it does: ranks are paired by the schedule in ddpdoctor/model/bandwidth/pair_schedule.py — by default n−1
rounds of disjoint pairs measured at the same time (circle method), or one pair at a time with
``--p2p-mode sequential`` for contention-free numbers; beyond 64 ranks the full matrix inside each
node and, across nodes, only rail pairs (same local rank) in node-level rounds (``--p2p-plan``).
In each pair both directions are measured in turn: a small ping-pong for latency (half the round
trip), then the sender streams messages of ``--p2p-size`` (default 8 MiB on gloo, 256 MiB on NCCL) and
the receiver acknowledges each batch; bandwidth = bytes / (time − one round trip). The sender first
calibrates on growing messages from 64 KiB and sizes each batch to about a tenth of a second, so a
slow link shrinks the batch rather than blowing the budget; three batches, the median is the figure
(the best batch is kept too). Links that look slow are measured once more on their own, with every
other rank idle, before they are called slow: pairs measured side by side share CPUs and switches.

Analysis (ddpdoctor/model/bandwidth/p2p_analysis.py, peer-relative, no vendor baseline): per link class (same
node, across nodes) it flags pairs far below what their peers reach and localizes the cause — a node
slow on all its links, a single slow rank, one bad link or path between two nodes — and reports
asymmetric pairs. Findings: below half the peers' figure is a warning, below a quarter an error.
Payload: see docs/architecture.md, "Bandwidth payloads".
"""

from __future__ import annotations

import statistics
import time

from ddpdoctor import check_options as opt
from ddpdoctor.core.payload import LabeledMatrix
from ddpdoctor.core.report import Finding, Severity, Status
from ddpdoctor.core.summary import Summary
from ddpdoctor.core.world import WorldInfo
from ddpdoctor.model.bandwidth.p2p_analysis import Thresholds, analyze
from ddpdoctor.model.bandwidth.pair_schedule import make_schedule
from ddpdoctor.model.bandwidth.payloads import LinkClass, P2PPayload
from ddpdoctor.model.bandwidth.sizes import format_size, parse_size

from ._agree import agree_max, share_rows
from ._topology import my_cpus

CODE = "P2P001"
TITLE = "Point-to-point bandwidth matrix"
KIND = "cluster"
ORDER = 45
BUDGET_S = 30.0
SUITES = ("quick", "full")
OPTIONS = (
    opt.Option("p2p_size", "point-to-point message size (--p2p-size)", opt.size),
    opt.Option("p2p_mode", "pairs at once or one at a time (--p2p-mode)", opt.choice("pairs", "sequential")),
    opt.Option("p2p_plan", "which pairs are measured (--p2p-plan)", opt.choice("auto", "full", "rails")),
    opt.Option("p2p_target_s", "seconds each pair is measured for", opt.seconds),
)

DEFAULT_SIZE_B = {"gloo": 8 * 2**20, "nccl": 256 * 2**20}
CALIBRATION_B = 64 * 1024
REPS = 3
PINGS = 10
MAX_ITERS = 64
BUDGET_SHARE = 0.6  # of the check's budget the plan may use; the rest is the watchdog's slack

HINTS = {
    "slow_node": "a node slow on all its links: check its NIC (link rate, errors: ethtool -S, ibstat), cable "
    "and switch port, and that GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME name the fast interface on every node",
    "slow_rank": "one rank slow on every link while its node-mates are fine points at that process: CPU or NUMA "
    "affinity, a throttled GPU, another job on the same cores",
    "slow_path": "one direction between two nodes slow while both reach others fast points at the network "
    "between them: a cable, a switch port, routing, or traffic shaping",
    "bad_link": "a link slow while both its ends are fast elsewhere points at the path between them",
    "asymmetric": "a link much slower one way than the other: duplex/speed negotiation, a congested or shaped "
    "direction, or one side's NIC",
}


def _plan(ctx):
    nodes: dict[int, list[tuple[int, int]]] = {}
    for r in ctx.world.ranks:
        nodes.setdefault(r.node_rank, []).append((r.local_rank, r.rank))
    grouped = [[rank for _, rank in sorted(members)] for _, members in sorted(nodes.items())]
    return make_schedule(
        grouped, plan=ctx.options.get("p2p_plan", "auto"), mode=ctx.options.get("p2p_mode", "pairs")
    )


class _Link:
    """Blocking send/recv between this rank and one peer, timed on the host clock (after a CUDA sync)."""

    def __init__(self, ctx, peer: int, buf) -> None:
        import torch
        import torch.distributed as dist

        self.ctx, self.peer, self.dist, self.torch = ctx, peer, dist, torch
        self.buf = buf  # one buffer for all peers: a rank talks to one peer at a time
        self.hdr = torch.zeros(2, dtype=torch.int64, device=ctx.device)
        self.tick = torch.zeros(1, device=ctx.device)

    def sync(self) -> None:
        if self.ctx.on_gpu:
            self.torch.cuda.synchronize()

    def send(self, t, what: str) -> None:
        with self.ctx.op(f"send {what} to rank {self.peer}"):
            self.dist.send(t, self.peer)

    def recv(self, t, what: str) -> None:
        with self.ctx.op(f"recv {what} from rank {self.peer}"):
            self.dist.recv(t, self.peer)

    # -- the sender drives, the receiver follows the headers ---------------------------------------------
    def ping(self) -> tuple[float, float]:
        """One-way latency in seconds from PINGS tiny round trips: (half the fastest, half the median).

        A batch's fixed cost is taken from the fastest round trip: one trip stalled by a busy CPU would
        otherwise be subtracted from every batch and overstate the bandwidth (seen: 1.14x the shaped
        rate on a loaded 2-core machine).
        """
        for _ in range(2):
            self.send(self.tick, "ping")
            self.recv(self.tick, "pong")
        self.sync()
        trips = []
        for _ in range(PINGS):
            t0 = time.perf_counter()
            self.send(self.tick, "ping")
            self.recv(self.tick, "pong")
            self.sync()
            trips.append(time.perf_counter() - t0)
        return min(trips) / 2, statistics.median(trips) / 2

    def pong(self) -> None:
        for _ in range(PINGS + 2):
            self.recv(self.tick, "ping")
            self.send(self.tick, "pong")

    def batch(self, elems: int, iters: int) -> float:
        """Send ``iters`` messages of ``elems`` floats; seconds until the receiver's acknowledgement."""
        self.hdr[0], self.hdr[1] = elems, iters
        self.send(self.hdr, "header")
        view = self.buf[:elems]
        what = format_size(elems * 4)
        self.sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            self.send(view, what)
        self.recv(self.tick, "acknowledgement")
        self.sync()
        return time.perf_counter() - t0

    def follow(self) -> None:
        while True:
            self.recv(self.hdr, "header")
            elems, iters = (int(x) for x in self.hdr.tolist())
            if iters == 0:
                return
            view = self.buf[:elems]
            for _ in range(iters):
                self.recv(view, format_size(elems * 4))
            self.send(self.tick, "acknowledgement")

    def end(self) -> None:
        self.hdr[0], self.hdr[1] = 0, 0
        self.send(self.hdr, "end of measurement")


def _measure(link: _Link, max_elems: int, target_s: float) -> dict:
    """Sender side of one direction: latency, then REPS timed batches sized to about target_s each."""
    lat, typical_lat = link.ping()
    # Calibrate on growing messages: a shaper's burst lets a small first message through at line rate.
    elems = min(max_elems, CALIBRATION_B // 4)
    while True:
        t = link.batch(elems, 1)
        bw = elems * 4 / max(t - 2 * lat, t * 0.1)  # bytes/s, an estimate
        if elems >= max_elems or t >= target_s / 4:
            break
        elems = min(max_elems, elems * 8)
    elems = max(min(elems, CALIBRATION_B // 4), min(max_elems, int(bw * target_s / 4) // 1024 * 1024))
    reps = []
    iters_used = []
    for _ in range(REPS):
        iters = int(min(MAX_ITERS, max(1, round(target_s * bw / (elems * 4)))))
        t = link.batch(elems, iters)
        bw = elems * 4 * iters / max(t - 2 * lat, t * 0.5)
        reps.append(bw / 1e9)
        iters_used.append(iters)
    link.end()
    return {
        "GBps": statistics.median(reps),
        # Contention only ever slows a batch down: the best one says what the link can do.
        "best_GBps": max(reps),
        "reps_GBps": [round(x, 6) for x in reps],
        "bytes": elems * 4,
        "iters": iters_used,
        "latency_us": round(typical_lat * 1e6, 3),
    }


def _exchange(ctx, link: _Link, src: int, dst: int, max_elems: int, target_s: float) -> dict | None:
    """One direction between this rank and its peer: the sender measures, the receiver follows."""
    if ctx.rank == src:
        return _measure(link, max_elems, target_s)
    link.pong()
    link.follow()
    return None


def _hosts(world) -> tuple[list[int], list[str]]:
    """Each rank's node index (0..nodes-1) and the nodes' hostnames."""
    order = sorted({r.node_rank for r in world.ranks})
    index = {nr: i for i, nr in enumerate(order)}
    return (
        [index[r.node_rank] for r in world.ranks],
        [world.host_of(world.ranks_on_node(nr)[0]) for nr in order],
    )


def run(ctx) -> dict:
    if ctx.world_size < 2:
        return {"one_rank": True}
    sched = _plan(ctx)
    size = parse_size(ctx.options.get("p2p_size") or DEFAULT_SIZE_B.get(ctx.backend, DEFAULT_SIZE_B["gloo"]))
    max_elems = max(1, size // 4)
    per_round = 2 * (REPS + 1.5)  # batches per round: both directions, calibration and headers
    plan_s = ctx.budget_s * BUDGET_SHARE
    target_s = max(
        0.01, min(float(ctx.options.get("p2p_target_s", 0.1)), plan_s / max(1, len(sched.rounds)) / per_round)
    )
    started = time.monotonic()
    sent: dict[str, dict] = {}
    links: dict[int, _Link] = {}

    import torch

    buf = torch.ones(max_elems, device=ctx.device)

    def link_to(peer: int) -> _Link:
        if peer not in links:
            links[peer] = _Link(ctx, peer, buf)
        return links[peer]

    for k, _ in enumerate(sched.rounds):
        ctx.barrier()
        peer = sched.partner(k, ctx.rank)
        if peer is not None:
            lo, hi = sorted((ctx.rank, peer))
            for src, dst in ((lo, hi), (hi, lo)):
                m = _exchange(ctx, link_to(peer), src, dst, max_elems, target_s)
                if m is not None:
                    sent[str(dst)] = m
        ctx.emit(
            "progress", done=k + 1, total=len(sched.rounds), message=f"round {k + 1}/{len(sched.rounds)}"
        )

    # Pairs measured side by side share CPUs, switches and PCIe: a link that looks slow is measured once
    # more on its own before it is called slow (every rank derives the same suspects from the same matrix).
    row = [sent[str(j)]["GBps"] if str(j) in sent else None for j in range(ctx.world_size)]
    matrix = share_rows(ctx, row)
    node_of, hosts = _hosts(ctx.world)
    suspects = analyze(matrix, node_of, hosts).suspects  # default (strict) thresholds: a wide net
    confirmed = []
    if suspects:
        (elapsed,) = agree_max(ctx, time.monotonic() - started)
        per_pair = (REPS + 1.5) * target_s + 0.05
        room = max(0, int((plan_s - elapsed) / per_pair))
        for k, (src, dst) in enumerate(suspects[:room]):
            ctx.barrier()
            if ctx.rank in (src, dst):
                peer = dst if ctx.rank == src else src
                m = _exchange(ctx, link_to(peer), src, dst, max_elems, target_s)
                if m is not None:
                    sent[str(dst)]["first_GBps"] = sent[str(dst)]["GBps"]
                    sent[str(dst)].update(m)
            confirmed.append([src, dst])
            ctx.emit(
                "progress",
                done=k + 1,
                total=min(room, len(suspects)),
                message="re-measuring slow links alone",
            )
    return {
        "sent": sent,
        "cpus": len(my_cpus()),
        "plan": sched.plan,
        "mode": sched.mode,
        "rounds": len(sched.rounds),
        "pairs": sched.pairs,
        "size_B": size,
        "target_s": round(target_s, 4),
        "remeasured": confirmed,
        "suspects": [list(p) for p in suspects],
    }


# On CPU-bound gloo links (ranks ≥ CPUs) a batch can run at a third of the next one's speed.
RELAXED = Thresholds(slow_frac=0.25, bad_frac=0.1, asym_ratio=0.35)


def _cpu_bound_nodes(got: dict[int, dict], world: WorldInfo) -> list[str]:
    """Nodes whose gloo ranks outnumber the CPUs they may use: loopback copies then compete for CPUs."""
    if world.backend != "gloo":
        return []
    out = []
    for node_rank in sorted({r.node_rank for r in world.ranks}):
        ranks = world.ranks_on_node(node_rank)
        cpus = [got[r].get("cpus") for r in ranks if r in got and got[r].get("cpus")]
        if cpus and len(ranks) >= min(cpus):
            out.append(f"{len(ranks)} ranks on {min(cpus)} CPUs on {world.host_of(ranks[0])}")
    return out


def summarize(results: dict[int, dict | None], world: WorldInfo) -> Summary:
    if world.world_size < 2:
        return Summary(status=Status.SKIPPED, summary="one rank: no pair of ranks to measure")
    got = {r: d for r, d in results.items() if d}
    n = world.world_size
    if not got:
        return Summary(summary="no rank returned measurements")
    node_of, hosts = _hosts(world)
    bw = [[None] * n for _ in range(n)]
    lat = [[None] * n for _ in range(n)]
    for r, d in got.items():
        for dst, m in (d.get("sent") or {}).items():
            bw[r][int(dst)] = round(float(m["GBps"]), 6)
            lat[r][int(dst)] = m.get("latency_us")
    labels = [f"r{r}@{world.host_of(r)}" for r in range(n)]
    pairs = [
        {"from": r, "to": int(dst), **m}
        for r, d in sorted(got.items())
        for dst, m in sorted((d.get("sent") or {}).items(), key=lambda kv: int(kv[0]))
    ]
    first = got[min(got)]
    cpu_bound = _cpu_bound_nodes(got, world)
    analysis = analyze(bw, node_of, hosts, RELAXED if cpu_bound else None)
    remeasured = {tuple(p) for p in first.get("remeasured") or []}
    findings = []
    for v in analysis.verdicts:
        sev, msg = Severity.parse(v.severity), v.message
        # A verdict stands on a pair measured alone; one seen only beside other pairs is a hint.
        if first.get("mode") != "sequential" and not remeasured.intersection(v.pairs):
            sev, msg = Severity.INFO, msg + " (seen beside other pairs, not re-measured alone)"
        findings.append(Finding(CODE, sev, msg, where=v.where, evidence=v.evidence, hint=HINTS.get(v.kind)))
    if cpu_bound:
        findings.append(
            Finding(
                CODE,
                Severity.INFO,
                f"gloo links here are CPU-bound ({'; '.join(cpu_bound)}): figures vary from one batch to the next, "
                f"so links are called slow only below {RELAXED.slow_frac:.0%} of their peers (not "
                f"{Thresholds().slow_frac:.0%})",
                evidence={"cpu_bound_nodes": cpu_bound},
            )
        )
    measured = sum(1 for row in bw for v in row if v is not None)
    data = P2PPayload(
        matrix=LabeledMatrix(tuple(labels), tuple(map(tuple, bw)), unit="GB/s"),
        latency=LabeledMatrix(tuple(labels), tuple(map(tuple, lat)), unit="us"),
        size_B=first.get("size_B"),
        mode=first.get("mode"),
        plan=first.get("plan"),
        rounds=first.get("rounds"),
        target_s=first.get("target_s"),
        pairs=tuple(pairs),
        remeasured_alone=tuple(first.get("remeasured") or []),
        unconfirmed=tuple(p for p in first.get("suspects") or [] if p not in (first.get("remeasured") or [])),
        pairs_measured=measured,
        pairs_possible=n * (n - 1),
        ranks=tuple(
            {"rank": r.rank, "node_rank": r.node_rank, "local_rank": r.local_rank, "hostname": r.hostname}
            for r in world.ranks
        ),
        classes={cls: LinkClass.from_json(c) for cls, c in analysis.classes.items()},
        outliers=tuple((a, b) for a, b in analysis.outliers),
        asymmetric=tuple(analysis.asymmetric),
        localization=analysis.localization(),
    ).to_json()
    lost = sorted(r for r in range(n) if r not in got)
    parts = [
        f"{cls.replace('_', '-')} median {c['median_GBps']:.3g} GB/s" for cls, c in analysis.classes.items()
    ]
    text = "; ".join(parts) or "no pair measured"
    text += f"; {measured} of {n * (n - 1)} directed pairs in {first.get('rounds')} rounds"
    culprits = [
        v.where.get("node") or v.where.get("rank")
        for v in analysis.verdicts
        if v.kind in ("slow_node", "slow_rank")
    ]
    if culprits:
        text += "; slow: " + ", ".join(str(c) for c in culprits)
    if lost:
        text += f"; no data from ranks {lost}"
    return Summary(findings=findings, data=data, summary=text)
