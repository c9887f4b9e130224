"""The control plane at scale: simulated ranks against a real TCPStore (no torch processes).

    python benchmarks/control_plane_scale.py [--ranks 64,512,2048] [--per-node 8] [--protocol both]

Every simulated rank is a thread that runs the per-rank control loop of `ddpdoctor check` (post its info,
wait for the world, post "ready", then for each check: wait for "go", run the check, post the result);
rank 0 also runs the coordinator. A check is simulated by a sleep: three checks of 1 s (every rank ends
within a few ms of the others, as after a collective) and three skipped ones (0 s). The store is a real
torch TCPStore (libuv server) in this process, as torchrun's agent hosts it.

Two protocols:
- ``tree`` (ddpdoctor.runtime.control, used by the worker): a relay per node, blocking waits, one queue
  per gather, one heartbeat per node;
- ``polling`` (the protocol before issue 19, replicated here from worker.py/control.py at 5e18c91):
  each waiting rank polls its "go" key every 50 ms (check + get), the coordinator polls a counter and
  every rank's result key every 100 ms and every missing rank's heartbeat, every rank beats twice a
  second. Its start-up (every rank polls every rank's info: 2·N² requests) is run at 64 ranks only;
  above that its ranks are handed the world and only the checks are measured.

Requests are the messages the store server receives, counted where the clients send them (a get, a
multi_get and a blocking queue pop are two: the client waits for the key first).

Printed per size: run-store requests per second while the checks run (and, for the tree protocol, the
requests its node stores took, which never reach the run store), the time from the last rank's result
to the coordinator having all of them, and each check's fixed cost (go → every result in, minus the
check's own duration). Every thread shares one interpreter (the GIL) on this machine's cores, so the
times at 2,048 ranks include the simulation's own contention: read them as upper bounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import machine

CHECKS = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]  # seconds each simulated check runs on every rank
JITTER_S = 0.005  # ranks end a check within this spread (rank-dependent, deterministic)


class Meter:
    def __init__(self) -> None:
        self.n = 0
        self._lock = threading.Lock()

    def __call__(self, k: int = 1) -> None:
        with self._lock:
            self.n += k


def _store(port: int, timeout_s: float = 120.0, master: bool = False):
    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", port, is_master=master, timeout=timedelta(seconds=timeout_s),
                         wait_for_workers=False)


class Timeline:
    """What the coordinator and the ranks saw, per check."""

    def __init__(self, world: int) -> None:
        self.posted = [[0.0] * world for _ in CHECKS]  # monotonic time each rank posted each check
        self.go_at = [0.0] * len(CHECKS)
        self.all_in_at = [0.0] * len(CHECKS)
        self.phase_start = 0.0
        self.phase_end = 0.0
        self.reqs_at_start = 0
        self.reqs_at_end = 0
        self.node_reqs_at_start = 0
        self.node_reqs_at_end = 0


def _check_time(k: int, rank: int) -> float:
    return CHECKS[k] + (JITTER_S * (rank % 7) / 6 if CHECKS[k] else 0.0)


# -- the tree protocol (the worker's) ------------------------------------------------------------------------
def run_tree(world: int, per_node: int) -> tuple[Timeline, Meter, Meter]:
    from ddpdoctor.runtime.control import Control, Coordinator, NodeLink

    server = _store(0, master=True)
    run_meter, node_meter = Meter(), Meter()
    tl = Timeline(world)
    prefix = "ddpdoctor/bench/0/"
    errors: list[str] = []

    def coordinate(coord: Coordinator) -> None:
        got = coord.gather("info", 300, watch_nodes=False)
        _say(f"tree {world}: {len(got.values)} infos gathered")
        if len(got.values) != world:
            errors.append(f"info: {len(got.values)} of {world}")
            return
        coord.node_of = {r: v["node_rank"] for r, v in got.values.items()}
        coord.announce("world", [got.values[r] for r in range(world)])
        got = coord.gather("ready", 300)
        _say(f"tree {world}: {len(got.values)} ready; checks start")
        if len(got.values) != world:
            errors.append(f"ready: {len(got.values)} of {world}")
        tl.phase_start, tl.reqs_at_start, tl.node_reqs_at_start = time.monotonic(), run_meter.n, node_meter.n
        for k in range(len(CHECKS)):
            tl.go_at[k] = time.monotonic()
            coord.announce(f"go/{k}", {"action": "run", "pg": 0})
            got = coord.gather(f"res/{k}", 60)
            tl.all_in_at[k] = time.monotonic()
            _say(f"tree {world}: check {k} in after {tl.all_in_at[k] - tl.go_at[k]:.2f} s")
            if len(got.values) != world:
                errors.append(f"check {k}: {len(got.values)} of {world} results, lost {sorted(got.lost)[:5]}")
        coord.announce(f"go/{len(CHECKS)}", {"action": "end"})
        tl.phase_end, tl.reqs_at_end, tl.node_reqs_at_end = time.monotonic(), run_meter.n, node_meter.n

    def rank(r: int) -> None:
        try:
            control = Control("127.0.0.1", server.port, prefix, 120, meter=run_meter)
            link = NodeLink(control, r, r % per_node, r // per_node, per_node, alive=lambda pid: True,
                            node_meter=node_meter)
            link.connect(300)
            coord_thread = None
            if r == 0:
                coord_thread = threading.Thread(target=coordinate, args=(Coordinator(control, world),))
                coord_thread.start()
            link.post("info", {"rank": r, "node_rank": r // per_node, "pid": 1})
            if link.wait("world", 600) is None:
                raise RuntimeError("no world")
            link.post("ready", {"error": None})
            for k in range(len(CHECKS)):
                go = link.wait(f"go/{k}", 120)
                if not go or go["action"] != "run":
                    raise RuntimeError(f"no go for {k}")
                time.sleep(_check_time(k, r))
                tl.posted[k][r] = time.monotonic()
                link.post(f"res/{k}", {"status": "ok", "data": {}})
            link.wait(f"go/{len(CHECKS)}", 120)
            if coord_thread is not None:
                coord_thread.join()
            link.close()
        except Exception as e:  # the figures would be wrong: say so
            errors.append(f"rank {r}: {type(e).__name__}: {e}")

    _run_threads(rank, world)
    if errors:
        raise SystemExit(f"tree protocol at {world} ranks failed: {errors[:5]}")
    return tl, run_meter, node_meter


# -- the polling protocol (before issue 19), replicated ---------------------------------------------------
class Polling:
    """The pre-issue-19 loops, request for request (worker.py / control.py at 5e18c91)."""

    def __init__(self, port: int, meter: Meter, prefix: str) -> None:
        self.port, self.meter, self.prefix = port, meter, prefix
        self.local = threading.local()

    def _c(self):
        c = getattr(self.local, "c", None)
        if c is None:
            c = self.local.c = _store(self.port)
        return c

    def put(self, key, obj):
        self.meter(1)
        self._c().set(self.prefix + key, json.dumps(obj))

    def get(self, key):
        self.meter(2)  # TCPStore's client waits for the key, then gets it
        return json.loads(self._c().get(self.prefix + key))

    def has(self, key):
        self.meter(1)
        return bool(self._c().check([self.prefix + key]))

    def add(self, key, n=1):
        self.meter(1)
        return int(self._c().add(self.prefix + key, n))

    def poll(self, key, timeout_s, interval_s=0.05):
        end = time.monotonic() + timeout_s
        while True:
            if self.has(key):
                return self.get(key)
            if time.monotonic() >= end:
                return None
            time.sleep(interval_s)


def run_polling(world: int, per_node: int, with_startup: bool) -> tuple[Timeline, Meter]:
    server = _store(0, master=True)
    meter = Meter()
    tl = Timeline(world)
    ctl = Polling(server.port, meter, "ddpdoctor/bench/0/")
    stop = threading.Event()
    errors: list[str] = []

    def heartbeat(r: int) -> None:
        while not stop.is_set():
            ctl.add(f"hb/{r}", 1)
            stop.wait(0.5)

    def coordinate() -> None:
        for r in range(world):
            ctl.poll(f"ready/{r}", 120)
        tl.phase_start, tl.reqs_at_start = time.monotonic(), meter.n
        for k in range(len(CHECKS)):
            tl.go_at[k] = time.monotonic()
            ctl.put(f"go/{k}", {"action": "run", "pg": 0})
            hb_seen: dict[int, tuple[int, float]] = {}
            while True:
                if ctl.add(f"n/{k}", 0) >= world:
                    break
                now = time.monotonic()
                posted = {r for r in range(world) if ctl.has(f"res/{k}/{r}")}
                for r in (r for r in range(world) if r not in posted):
                    beat = ctl.add(f"hb/{r}", 0)
                    last = hb_seen.get(r)
                    if last is None or beat != last[0]:
                        hb_seen[r] = (beat, now)
                time.sleep(0.1)
            for r in range(world):
                if ctl.has(f"res/{k}/{r}"):
                    ctl.get(f"res/{k}/{r}")
            tl.all_in_at[k] = time.monotonic()
        ctl.put(f"go/{len(CHECKS)}", {"action": "end"})
        tl.phase_end, tl.reqs_at_end = time.monotonic(), meter.n

    def rank(r: int) -> None:
        try:
            threading.Thread(target=heartbeat, args=(r,), daemon=True).start()
            ctl.put(f"info/{r}", {"rank": r})
            if with_startup:
                for q in range(world):
                    ctl.poll(f"info/{q}", 120)
            ctl.put(f"ready/{r}", {"error": None})
            coord = None
            if r == 0:
                coord = threading.Thread(target=coordinate)
                coord.start()
            for k in range(len(CHECKS)):
                go = ctl.poll(f"go/{k}", 120)
                if not go:
                    raise RuntimeError(f"no go for {k}")
                time.sleep(_check_time(k, r))
                tl.posted[k][r] = time.monotonic()
                ctl.put(f"res/{k}/{r}", {"status": "ok", "data": {}})
                ctl.add(f"n/{k}", 1)
            if coord is not None:
                coord.join()
            else:
                ctl.poll(f"go/{len(CHECKS)}", 12)
        except Exception as e:
            errors.append(f"rank {r}: {type(e).__name__}: {e}")

    _run_threads(rank, world)
    stop.set()
    if errors:
        raise SystemExit(f"polling protocol at {world} ranks failed: {errors[:5]}")
    time.sleep(0.6)  # the heartbeat threads see stop before the server goes
    return tl, meter


def _say(msg: str) -> None:
    print(f"    [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _run_threads(target, world: int) -> None:
    threading.stack_size(512 * 1024)
    threads = [threading.Thread(target=target, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    _say(f"{world} rank threads started")
    for t in threads:
        t.join(600)


# -- the figures -------------------------------------------------------------------------------------------
def report(name: str, world: int, per_node: int, tl: Timeline, reqs: int, node_reqs: int | None,
           startup_reqs: int | None) -> dict:
    dur = tl.phase_end - tl.phase_start
    rate = reqs / dur if dur > 0 else float("nan")
    last_to_seen = [(tl.all_in_at[k] - max(tl.posted[k])) * 1e3 for k in range(len(CHECKS))]
    fixed = [(tl.all_in_at[k] - tl.go_at[k] - CHECKS[k]) * 1e3 for k in range(len(CHECKS))]
    skipped = [f for f, c in zip(fixed, CHECKS) if c == 0]
    out = {"protocol": name, "ranks": world, "nodes": world // per_node, "run_store_req_per_s": round(rate),
           "run_store_requests": reqs, "checks_phase_s": round(dur, 2),
           "last_result_to_coordinator_ms": round(statistics.median(last_to_seen), 1),
           "last_result_to_coordinator_max_ms": round(max(last_to_seen), 1),
           "fixed_cost_per_check_ms": round(statistics.median(fixed), 1),
           "skipped_check_ms": round(statistics.median(skipped), 1)}
    if node_reqs is not None:
        out["node_store_req_per_s"] = round(node_reqs / dur) if dur > 0 else None
    if startup_reqs is not None:
        out["startup_run_store_requests"] = startup_reqs
    print(f"  {name:<8} {world:>5} ranks / {world // per_node:>4} nodes: run store {rate:8.0f} req/s "
          f"({reqs} requests in {dur:.1f} s of checks)"
          + (f", node stores {out['node_store_req_per_s']} req/s" if node_reqs is not None else "")
          + f"; last result → coordinator median {out['last_result_to_coordinator_ms']} ms "
          f"(max {out['last_result_to_coordinator_max_ms']}); fixed cost per check median "
          f"{out['fixed_cost_per_check_ms']} ms; skipped check {out['skipped_check_ms']} ms"
          + (f"; start-up {startup_reqs} run-store requests" if startup_reqs is not None else ""), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="sys.setswitchinterval for the simulation (every simulated rank shares this "
                    "interpreter's GIL; a real rank has its own)")
    ap.add_argument("--ranks", default="64,512,2048")
    ap.add_argument("--per-node", type=int, default=8)
    ap.add_argument("--protocol", choices=("tree", "polling", "both"), default="both")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args()
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    sizes = [int(x) for x in args.ranks.split(",")]
    print(f"machine: {machine()}")
    print(f"checks per run: {len(CHECKS)} ({', '.join(f'{c:g} s' for c in CHECKS)}); {args.per_node} ranks per node; "
          "target: run store < 2,000 req/s at 2,048 ranks, growing with nodes")
    rows = []
    for world in sizes:
        if args.protocol in ("polling", "both"):
            startup = world <= 64
            # What the protocol asks for while a check runs: the coordinator's pass every 0.1 s (a counter,
            # every rank's result key, every missing rank's heartbeat) and every rank's beat every 0.5 s.
            print(f"  polling  {world:>5} ranks: asks for ≥ {10 * (2 * world + 1) + 2 * world:,} req/s while a check "
                  f"runs (computed); start-up info exchange 3·N² = {3 * world * world:,} requests (computed)")
            try:
                tl, _ = run_polling(world, args.per_node, with_startup=startup)
                rows.append(report("polling", world, args.per_node, tl, tl.reqs_at_end - tl.reqs_at_start, None,
                                   tl.reqs_at_start if startup else None))
                if not startup:
                    print("           start-up not run at this size (ranks handed the world)")
            except SystemExit as e:  # it could not finish here: that is the finding
                print(f"  polling  {world:>5} ranks: did not complete: {str(e)[:300]}")
        if args.protocol in ("tree", "both"):
            tl, _, _ = run_tree(world, args.per_node)
            rows.append(report("tree", world, args.per_node, tl, tl.reqs_at_end - tl.reqs_at_start,
                               tl.node_reqs_at_end - tl.node_reqs_at_start, tl.reqs_at_start))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    big = [r for r in rows if r["protocol"] == "tree" and r["ranks"] >= 2048]
    if big:
        ok = all(r["run_store_req_per_s"] < 2000 for r in big)
        print(f"target (tree, 2,048 ranks, < 2,000 req/s): {'met' if ok else 'MISSED'}")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
