"""One arm of the NCCL_ALGO A/B: a fresh process that times all_reduce under the NCCL_ALGO it was given.

NCCL reads NCCL_ALGO once, when a communicator is created, so every algorithm needs processes of its
own. ALG001 starts one of these per rank and arm; the children of all ranks form their own process
group through the check's TCP store under a key prefix private to this arm and repetition:

    python -m ddpdoctor.checks._algo_probe --host H --port P --prefix KEY --rank R --world-size N \
        --local-rank L --backend nccl --sizes 1048576,26214400 --iters 20 --warmup 5 \
        --timeout 60 --parent-pid PID --out result.json

It writes one JSON object to ``--out``: the NCCL_ALGO it saw in its environment, NCCL's version, how
long the group took to form, and per size the mean time of one all_reduce on this rank (µs) and
whether the first result was exact. It ends itself when its parent goes away, and every blocking step
(store, group, collectives) has the ``--timeout``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from datetime import timedelta


def _watch_parent(parent_pid: int) -> None:
    """A child must never outlive the check that started it (the watchdog may end the parent)."""

    def loop() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(3)
            time.sleep(0.5)

    threading.Thread(target=loop, name="algo-probe-parent-watch", daemon=True).start()


def _say(message: str) -> None:
    """Progress in the log the parent keeps: where a child stopped is where its tail ends."""
    print(f"algo_probe: {message}", file=sys.stderr, flush=True)


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated byte counts") from None
    if not sizes or any(s < 4 for s in sizes):
        raise argparse.ArgumentTypeError(f"{text!r}: every size must be at least 4 bytes (one float32)")
    return sizes


def _test_fault(rank: int) -> None:
    """Test-only: DDPDOCTOR_TEST_PROBE_FAULT="exit@Tree:rank=1" or "hang@Tree:rank=1" makes that child
    fail or hang, as a broken NCCL_ALGO arm would; "default" names the arm without NCCL_ALGO."""
    spec = os.environ.get("DDPDOCTOR_TEST_PROBE_FAULT", "")
    arm = os.environ.get("NCCL_ALGO") or "default"
    for item in filter(None, spec.split(";")):
        kind, _, rest = item.partition("@")
        target, _, ranks = rest.partition(":rank=")
        if target == arm and (not ranks or rank in {int(r) for r in ranks.split(",")}):
            print(
                f"algo_probe: test fault {kind} for NCCL_ALGO={arm} on rank {rank}",
                file=sys.stderr,
                flush=True,
            )
            if kind == "exit":
                raise SystemExit(7)
            while kind == "hang":
                time.sleep(1)


def measure(args: argparse.Namespace) -> dict:
    import torch
    import torch.distributed as dist

    timeout = timedelta(seconds=args.timeout)
    nccl = args.backend == "nccl"
    if nccl:
        torch.cuda.set_device(args.local_rank)
        device = torch.device("cuda", args.local_rank)
    else:
        device = torch.device("cpu")
    out: dict = {
        "rank": args.rank,
        "backend": args.backend,
        "nccl_algo_env": os.environ.get("NCCL_ALGO"),
        "pid": os.getpid(),
    }
    if nccl:
        v = torch.cuda.nccl.version()
        out["nccl_version"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)

    t0 = time.monotonic()
    _say(f"rank {args.rank}: joining the group at {args.host}:{args.port} ({args.backend}, NCCL_ALGO="
         f"{out['nccl_algo_env'] or '(unset)'})")  # fmt: skip
    raw = dist.TCPStore(args.host, args.port, is_master=False, timeout=timeout, wait_for_workers=False)
    store = dist.PrefixStore(args.prefix, raw)
    kwargs = {"device_id": device} if nccl else {}
    dist.init_process_group(
        args.backend, store=store, rank=args.rank, world_size=args.world_size, timeout=timeout, **kwargs
    )

    def sync() -> None:
        if nccl:
            torch.cuda.synchronize(device)

    # The first collective creates the communicator (NCCL reads NCCL_ALGO here); it is part of set-up.
    probe = torch.full((1,), float(args.rank + 1), device=device)
    dist.all_reduce(probe)
    sync()
    out["init_s"] = round(time.monotonic() - t0, 4)
    _say(f"rank {args.rank}: group of {args.world_size} formed in {out['init_s']:.2f} s")
    n = args.world_size
    results = []
    for size in args.sizes:
        t = torch.empty(size // 4, dtype=torch.float32, device=device)
        # Exactness: small integers sum exactly in float32 in any order.
        t.fill_(float(args.rank + 1))
        dist.all_reduce(t)
        sync()
        exact = bool((t == n * (n + 1) / 2).all().item())
        t.zero_()  # the timed calls sum in place: zeros stay finite however many calls
        for _ in range(args.warmup):
            dist.all_reduce(t)
        sync()
        if nccl:
            dist.barrier(device_ids=[args.local_rank])
        else:
            dist.barrier()
        sync()
        start = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(t)
        sync()
        elapsed = time.perf_counter() - start
        _say(f"rank {args.rank}: {size} B done, {elapsed / args.iters * 1e6:.1f} us per call")
        results.append(
            {
                "size_B": size,
                "time_us": round(elapsed / args.iters * 1e6, 3),
                "iters": args.iters,
                "exact": exact,
            }
        )
        del t
    out["sizes"] = results
    dist.destroy_process_group()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ddpdoctor.checks._algo_probe")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--prefix", required=True, help="store key prefix private to this arm and repetition")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--local-rank", type=int, default=0)
    p.add_argument("--backend", choices=("nccl", "gloo"), required=True)
    p.add_argument("--sizes", type=_sizes, required=True, help="comma-separated message sizes in bytes")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument(
        "--timeout", type=float, default=60.0, help="seconds for the store, the group and each collective"
    )
    p.add_argument("--parent-pid", type=int, default=None)
    p.add_argument("--out", required=True, help="where to write the JSON result")
    args = p.parse_args(argv)
    if args.iters < 1 or args.warmup < 0 or args.timeout <= 0:
        p.error("--iters must be >= 1, --warmup >= 0 and --timeout > 0")
    if not 0 <= args.rank < args.world_size:
        p.error(f"--rank {args.rank} is outside 0..{args.world_size - 1}")
    if args.parent_pid:
        _watch_parent(args.parent_pid)
    _test_fault(args.rank)
    result = measure(args)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
