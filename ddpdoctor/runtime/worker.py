"""The per-rank entry point that torchrun starts: ``python -m ddpdoctor.runtime.worker --config FILE``.

Every rank runs the selected cluster checks in order. Rank 0 also runs a coordinator thread that hands
out each check ("go"), collects every rank's result through the control store, decides whether the run
can go on (a fresh process group after a collective error; a clean end when a rank is stuck or lost)
and writes the report. Each check runs under a watchdog: when its budget is spent the watchdog posts
what the rank was doing and, since the stuck call cannot be interrupted, ends the process once the
coordinator has its verdict.

Run it under your own torchrun with a config written by ``ddpdoctor check --write-config FILE``:

    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29400 \
        -m ddpdoctor.runtime.worker --config FILE
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
import traceback
from datetime import timedelta
from typing import Any

from ddpdoctor.core.events import (
    CheckEnd,
    CheckInfo,
    CheckStart,
    Event,
    Log,
    RankCheckEnd,
    RankCheckStart,
    Rendezvous,
    RunEnd,
    RunStart,
)
from ddpdoctor.core.report import CheckResult, Finding, Severity, Status
from ddpdoctor.core.summary import Summary, default_summarize
from ddpdoctor.core.world import WorldInfo
from ddpdoctor.events import EventWriter
from ddpdoctor.registry import CheckSpec, discover
from ddpdoctor.runtime import check_hooks
from ddpdoctor.runtime.context import ClusterContext
from ddpdoctor.runtime.control import Control, Coordinator, NodeLink
from ddpdoctor.runtime.verdict import classify_ranks
from ddpdoctor.runtime.worker_config import ConfigError, WorkerConfig

GRACE_S = 4.0  # slack after a budget for results to arrive through the store


def _env_int(name: str, default: int | None = None) -> int:
    v = os.environ.get(name)
    if v is None:
        if default is None:
            raise SystemExit(f"ddpdoctor worker: {name} is not set; start it with torchrun")
        return default
    return int(v)


def _main_thread_stack() -> list[str]:
    frame = sys._current_frames().get(threading.main_thread().ident)
    if frame is None:
        return []
    return [ln.rstrip() for ln in traceback.format_stack(frame)[-6:]]


class Worker:
    def __init__(self, cfg: WorkerConfig) -> None:
        self.cfg = cfg
        self.t_proc_start = time.time()
        self.rank = _env_int("RANK")
        self.world_size = _env_int("WORLD_SIZE")
        self.local_rank = _env_int("LOCAL_RANK", 0)
        self.local_world_size = _env_int("LOCAL_WORLD_SIZE", 1)
        self.node_rank = _env_int("GROUP_RANK", 0)
        self.hostname = socket.gethostname()
        run_id = os.environ.get("TORCHELASTIC_RUN_ID", "ddpdoctor")
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self.control = Control.from_env(self.rank, f"ddpdoctor/{run_id}/{restart}/", cfg.rdzv_timeout_s)
        self.link = NodeLink(self.control, self.rank, self.local_rank, self.node_rank, self.local_world_size)
        self.events = EventWriter(cfg.events)
        self.specs: list[CheckSpec] = []
        self.world: WorldInfo | None = None
        self.backend = "gloo"
        self.device: Any = None
        self.pg_gen = -1
        self.report_written = threading.Event()
        self._post_lock = threading.Lock()

    # -- helpers ------------------------------------------------------------------------------------
    def emit(self, event: Event) -> None:
        try:
            self.events.emit(event)
        except OSError:
            pass  # progress is advisory

    def _budget(self, spec: CheckSpec) -> float:
        overrides = self.cfg.budgets
        scale = float(self.cfg.budget_scale)
        return float(overrides.get(spec.code, spec.budget_s * scale))

    # -- start-up -----------------------------------------------------------------------------------
    def start(self) -> None:
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
        rdzv_timeout = float(self.cfg.rdzv_timeout_s)
        self.link.connect(rdzv_timeout)
        info = {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "local_world_size": self.local_world_size,
            "node_rank": self.node_rank,
            "hostname": self.hostname,
            "pid": os.getpid(),
            "proc_start": self.t_proc_start,
            "launch_t0": self.cfg.launch_t0,
        }
        if self.rank == 0:
            self.coord = Coordinator(self.control, self.world_size)
            self.coordinator = threading.Thread(target=self.gather_world, args=(rdzv_timeout,),
                                                name="ddpdoctor-world", daemon=True)
            self.coordinator.start()
        self.link.post("info", info)
        self.emit(Rendezvous(
            rank=self.rank,
            node_rank=self.node_rank,
            hostname=self.hostname,
            seconds=round(self.t_proc_start - float(self.cfg.launch_t0 or self.t_proc_start), 3),
        ))
        infos = self.link.wait("world", rdzv_timeout * 2)
        if infos is None:
            raise SystemExit(f"ddpdoctor worker: rank {self.rank} got no word from rank 0 within {rdzv_timeout * 2:g} s")
        self.infos = infos
        self.world = WorldInfo.from_dicts(infos, options=self.cfg.options)
        codes = self.cfg.checks
        specs = discover(self.cfg.check_paths, kind="cluster")
        self.specs = [s for s in specs if codes is None or s.code in codes]
        self._pick_backend()
        self.world.backend = self.backend

    def _pick_backend(self) -> None:
        import torch

        want = self.cfg.backend
        has_gpu = torch.cuda.is_available() and torch.cuda.device_count() > 0
        self.backend = "nccl" if (want == "nccl" or (want == "auto" and has_gpu)) else "gloo"
        if self.backend == "nccl":
            torch.cuda.set_device(self.local_rank % max(1, torch.cuda.device_count()))
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")

    def _new_group(self, gen: int) -> float:
        """(Re)create the default process group on a fresh store prefix; returns seconds taken."""
        import torch.distributed as dist

        t0 = time.monotonic()
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:
                pass
        timeout = float(self.cfg.collective_timeout_s or max([self._budget(s) for s in self.specs] + [10]) + 10)
        store = dist.PrefixStore(f"pg/{gen}/", self._pg_store())
        kwargs: dict[str, Any] = {}
        if self.backend == "nccl":
            kwargs["device_id"] = self.device
        dist.init_process_group(
            self.backend,
            store=store,
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(seconds=timeout),
            **kwargs,
        )
        self.pg_gen = gen
        return time.monotonic() - t0

    def _pg_store(self):
        import torch.distributed as dist

        # A client of its own: the group's store traffic must not queue behind control polling.
        raw = dist.TCPStore(
            self.control.host, self.control.port, is_master=False,
            timeout=timedelta(seconds=float(self.cfg.rdzv_timeout_s)), wait_for_workers=False,
        )
        self._pg_raw_store = raw
        return dist.PrefixStore(self.control.prefix, raw)

    # -- one check on this rank -----------------------------------------------------------------------
    def run_check(self, i: int, spec: CheckSpec, startup: dict) -> None:
        budget = self._budget(spec)
        ctx = ClusterContext(
            rank=self.rank,
            world_size=self.world_size,
            local_rank=self.local_rank,
            local_world_size=self.local_world_size,
            node_rank=self.node_rank,
            nnodes=len({r.node_rank for r in self.world.ranks}),
            hostname=self.hostname,
            backend=self.backend,
            device=self.device,
            world=self.world,
            options=dict(self.cfg.options),
            budget_s=budget,
            check_code=spec.code,
            emit_fn=self.emit,
        )
        ctx.startup = startup
        import torch.distributed as dist

        ctx.store = dist.PrefixStore(f"chk/{i}/", self.control.client())
        ctx.store_endpoint = (self.control.host, self.control.port, f"{self.control.prefix}chk/{i}/")
        ctx.group = dist.group.WORLD
        done = threading.Event()
        posted = {"v": False}

        def post(result: dict) -> bool:
            with self._post_lock:
                if posted["v"]:
                    return False
                posted["v"] = True
            self.link.post(f"res/{i}", result)
            return True

        def watchdog() -> None:
            if done.wait(budget):
                return
            op, op_s = ctx.current_op()
            result = {
                "status": "timed_out",
                "op": op or "(no collective: Python code)",
                "op_seconds": round(op_s, 3),
                "op_index": ctx.op_count,
                "stack": _main_thread_stack(),
                "duration_s": budget,
            }
            if post(result):
                self.emit(RankCheckEnd(code=spec.code, rank=self.rank, status="timed_out", op=result["op"]))
            # The main thread is stuck and cannot be interrupted: wait for the verdict, then end.
            self.link.wait(f"go/{i + 1}", GRACE_S * 3 + budget)
            if self.rank == 0:
                self.report_written.wait(GRACE_S * 4 + budget)
            self.finish_node_copy()
            os._exit(0)

        threading.Thread(target=watchdog, name=f"ddpdoctor-watchdog-{spec.code}", daemon=True).start()
        self.emit(RankCheckStart(code=spec.code, rank=self.rank))
        t0 = time.monotonic()
        try:
            for hook in check_hooks.BEFORE_CHECK:
                hook(ctx)
            data = spec.module.run(ctx)
            if data is not None and not isinstance(data, dict):
                raise TypeError(f"{spec.code}.run() returned {type(data).__name__}, not a dict")
            result = {"status": "ok", "data": data or {}}
        except Exception as e:
            op, _ = ctx.current_op()
            result = {
                "status": "error",
                "error": f"{type(e).__name__}: {e}".strip()[:2000],
                "op": op,
                "op_index": ctx.op_count,
                "traceback": traceback.format_exc(limit=6)[-4000:],
            }
        result["duration_s"] = round(time.monotonic() - t0, 6)
        done.set()
        if post(result):
            self.emit(RankCheckEnd(code=spec.code, rank=self.rank, status=result["status"]))

    # -- the rank's main loop ---------------------------------------------------------------------------
    def main(self) -> int:
        self.start()
        pg_error = None
        startup: dict[str, Any] = {"proc_start": self.t_proc_start, "launch_t0": self.cfg.launch_t0}
        try:
            startup["pg_init_s"] = round(self._new_group(0), 4)
        except Exception as e:
            pg_error = f"{type(e).__name__}: {e}"
        self.link.post("ready", {"error": pg_error, **startup})
        if self.rank == 0:
            self.coordinator.join()  # the world is announced; now the checks
            self.coordinator = threading.Thread(target=self.coordinate, name="ddpdoctor-coordinator", daemon=True)
            self.coordinator.start()
        aborted = False
        for i, spec in enumerate(self.specs):
            wait = float(self.cfg.rdzv_timeout_s) + sum(self._budget(s) + GRACE_S * 3 for s in self.specs[: i + 1])
            go = self.link.wait(f"go/{i}", wait)
            if go is None:
                self.emit(Log(level="error",
                             message=f"rank {self.rank}: no word from rank 0 for check {spec.code}; giving up"))
                aborted = True
                break
            if go.get("action") != "run":
                aborted = go.get("action") == "abort"
                break
            if go.get("pg") != self.pg_gen:
                try:
                    self._new_group(int(go["pg"]))
                except Exception as e:  # the check will fail on the dead group and say so
                    self.emit(Log(level="error", message=f"rank {self.rank}: new process group failed: {e}"))
            self.run_check(i, spec, startup)
        if self.rank == 0:
            self.coordinator.join()
        else:
            self.link.wait(f"go/{len(self.specs)}", GRACE_S * 3)
        self.finish_node_copy()
        self.link.close()
        if aborted:
            os._exit(0)  # a poisoned group can block destroy; the report is written already
        try:
            import torch.distributed as dist

            dist.destroy_process_group()
        except Exception:
            pass
        return 0

    def finish_node_copy(self) -> None:
        """Node leaders other than rank 0 save rank 0's report locally, so every node's CLI has it."""
        if self.rank == 0 or self.local_rank != 0 or not self.cfg.report:
            return
        got = None
        try:
            got = self.control.wait_get("report", GRACE_S * 2)
        except Exception:
            pass
        if got:
            from ddpdoctor.report.io import write_json_atomic

            write_json_atomic(self.cfg.report, got)

    # -- rank 0: the coordinator ----------------------------------------------------------------------
    def gather_world(self, timeout_s: float) -> None:
        """Every rank's info, announced to all as "world" (a rank that never posted is marked missing)."""
        got = self.coord.gather("info", timeout_s, watch_nodes=False)
        infos = [got.values.get(r) or {"rank": r, "hostname": "?", "node_rank": -1, "missing": True}
                 for r in range(self.world_size)]
        self.coord.node_of = {int(i["rank"]): int(i["node_rank"]) for i in infos if not i.get("missing")}
        self.coord.announce("world", infos)

    def coordinate(self) -> None:
        from ddpdoctor.runtime.finalize import build_report

        t_run = time.time()
        coord = self.coord
        # Wait for every rank to have a process group (or say why not).
        got = coord.gather("ready", float(self.cfg.rdzv_timeout_s))
        ready = {r: got.values.get(r) for r in range(self.world_size)}
        self.emit(RunStart(
            world_size=self.world_size,
            nodes=self.world.nodes,
            backend=self.backend,
            checks=[CheckInfo(s.code, s.title, self._budget(s)) for s in self.specs],
            endpoint=self.cfg.endpoint,
        ))
        results: list[CheckResult] = []
        abort_reason = None
        lost: set[int] = set(got.lost)
        pg_errors = {r: v["error"] for r, v in ready.items() if v and v.get("error")}
        missing_ready = [r for r, v in ready.items() if v is None]
        if pg_errors or missing_ready:
            abort_reason = "the process group could not be created: " + "; ".join(
                [f"rank {r}: {e}" for r, e in sorted(pg_errors.items())]
                + ([f"ranks {missing_ready} never reported"] if missing_ready else [])
            )
        pg_gen = 0
        i = 0
        for i, spec in enumerate(self.specs):
            if abort_reason:
                break
            budget = self._budget(spec)
            coord.announce(f"go/{i}", {"action": "run", "pg": pg_gen})
            self.emit(CheckStart(code=spec.code, title=spec.title, budget_s=budget))
            t0 = time.monotonic()
            got = coord.gather(f"res/{i}", budget + GRACE_S)
            per_rank: dict[int, dict | None] = {r: got.values.get(r) for r in range(self.world_size)}
            newly_lost = got.lost
            lost |= newly_lost
            result, verdict = self._judge(spec, per_rank, newly_lost, time.monotonic() - t0)
            results.append(result)
            self.emit(CheckEnd(
                code=spec.code,
                status=result.status.value,
                summary=result.summary,
                duration_s=round(result.duration_s, 3),
                findings=len(result.findings),
            ))
            if verdict == "abort":
                abort_reason = f"{spec.code} {result.status.value}: {result.summary}"
                i += 1
                break
            if verdict == "new_group":
                pg_gen += 1
        else:
            i = len(self.specs)
        coord.announce(f"go/{i}", {"action": "abort" if abort_reason else "end"})
        for spec in self.specs[len(results):]:
            results.append(
                CheckResult(code=spec.code, title=spec.title, status=Status.NOT_RUN,
                            summary="not run: the run ended early" + (f" ({abort_reason})" if abort_reason else ""))
            )
        report = build_report(
            cfg=self.cfg,
            infos=self.infos,
            ready=ready,
            backend=self.backend,
            results=results,
            abort_reason=abort_reason,
            lost_ranks=sorted(lost),
            started=t_run,
        )
        data = report.to_dict()
        if self.cfg.report:
            from ddpdoctor.report.io import write_json_atomic

            write_json_atomic(self.cfg.report, data)
        try:
            self.control.put("report", data)
        except Exception:
            pass
        self.emit(RunEnd(exit_code=report.exit_code(), report=self.cfg.report_final))
        self.report_written.set()

    def _judge(self, spec: CheckSpec, per_rank: dict[int, dict | None], lost: set[int], elapsed: float):
        """CheckResult for one check, and what the run does next: continue, new_group or abort."""
        assert self.world is not None
        verdict = classify_ranks(per_rank, lost, self.world, spec.code, self._budget(spec))
        data_by_rank = {r: (v or {}).get("data") if (v or {}).get("status") == "ok" else None for r, v in per_rank.items()}
        summarize = getattr(spec.module, "summarize", None) or default_summarize
        try:
            summary = summarize(data_by_rank, self.world)
            if not isinstance(summary, Summary):
                raise TypeError(f"summarize() returned {type(summary).__name__}, not Summary")
        except Exception as e:
            summary = Summary(
                findings=[Finding(spec.code, Severity.ERROR, f"the check's analysis failed: {type(e).__name__}: {e}")],
                status=Status.ERROR,
                summary="analysis failed",
            )
        findings = verdict.findings + summary.findings
        status = summary.final_status()
        if verdict.status is not None:
            status = verdict.status
        text = verdict.summary or summary.summary
        result = CheckResult(
            code=spec.code,
            title=spec.title,
            kind="cluster",
            status=status,
            summary=text,
            duration_s=elapsed,
            findings=findings,
            data=summary.data,
        )
        return result, verdict.next_step


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ddpdoctor.runtime.worker")
    p.add_argument("--config", required=True, help="JSON written by `ddpdoctor check --write-config`")
    args = p.parse_args(argv)
    with open(args.config, encoding="utf-8") as f:
        try:
            cfg = WorkerConfig.from_dict(json.load(f))
        except (ValueError, ConfigError) as e:
            raise SystemExit(f"ddpdoctor worker: --config {args.config}: {e}") from None
    return Worker(cfg).main()


if __name__ == "__main__":
    sys.exit(main())
