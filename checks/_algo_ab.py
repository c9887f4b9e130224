"""The parent side of ALG001's A/B: on every rank, one child process per arm and repetition.

Every rank runs the same launches in the same order (default, Ring, Tree, ..., then again), one at a
time. Rank 0 decides everything that could differ between ranks — which arms exist (NVLS only when
every rank's GPU supports multicast) and whether time is left for the next launch — and posts it to
the check's store; the other ranks wait for that word with a timeout, so all children of one launch
start together and meet in their own process group (key prefix ``alg/<k>/<arm>/rep<r>/``).

A child that fails posts ``alg/<k>/failed`` so the other ranks stop waiting for theirs; a child that
overruns is killed with its process group. Nothing here waits without a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ddpdoctor.boundary.processes import end_process

POLL_S = 0.1
# A child's own timeouts end a little after its parent's deadline, so an overrun is always the parent's
# "timed out" (it kills the child), never a peer's child giving up first and looking like the culprit.
CHILD_SLACK_S = 5.0
PEER_SLACK_S = 30.0  # beyond one launch's timeout, how long a rank waits for word from the others
ABORT_KEY = "alg/abort"  # a rank that cannot go on says so; the others stop instead of timing out
MARGIN_S = 5.0  # kept back from the check's budget for posting the result
LOG_TAIL_CHARS = 2000
# NCCL logs the variable it read at communicator creation (tuning.cc: INFO(NCCL_ENV, ...)).
_NCCL_READ_RE = re.compile(r"NCCL_ALGO set by environment to (\S+)")


@dataclass
class AbPlan:
    backend: str  # what the children run: "nccl", or "gloo" in test mode
    candidates: list[str]  # NCCL_ALGO values to try besides the default; NVLS is added when possible
    sizes: list[int]
    reps: int
    iters: int
    warmup: int
    launch_timeout_s: float


def nccl_read_algo(log: str) -> str | None:
    """The NCCL_ALGO value NCCL itself says it read, from a child's log (None if it said nothing)."""
    found = _NCCL_READ_RE.findall(log)
    return found[-1] if found else None


def multicast_supported(device_index: int) -> bool:
    """Whether this GPU can do NVLink SHARP: the CUDA driver's CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED
    (132 in cuda.h), which NCCL itself asks in ncclNvlsInit. False when the driver cannot say."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        dev, val = ctypes.c_int(), ctypes.c_int()
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(dev), device_index) != 0:
            return False
        if cuda.cuDeviceGetAttribute(ctypes.byref(val), 132, dev) != 0:
            return False
        return bool(val.value)
    except (OSError, AttributeError):
        return False


def gpu_facts(device_index: int) -> dict[str, Any]:
    """Name, compute capability (×10, as NCCL writes it) and active NVLinks of this rank's GPU."""
    import torch

    props = torch.cuda.get_device_properties(device_index)
    facts: dict[str, Any] = {"name": props.name, "sm": props.major * 10 + props.minor, "nvlinks": None}
    try:
        import pynvml
    except ImportError:  # NVML is a nicety here: the model then assumes PCIe
        return facts
    try:
        busid = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    except AttributeError:  # an older torch without PCI ids in the device properties
        return facts
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return facts
    try:
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(busid)
        active = 0
        for link in range(18):  # NVML_NVLINK_MAX_LINKS on Hopper
            try:
                state = pynvml.nvmlDeviceGetNvLinkState(handle, link)
            except pynvml.NVMLError:
                break
            active += int(state == pynvml.NVML_FEATURE_ENABLED)
        facts["nvlinks"] = active
    except pynvml.NVMLError:
        pass  # no NVLink query on this GPU: unknown, not zero
    finally:
        pynvml.nvmlShutdown()
    return facts


def nccl_version() -> str | None:
    import torch

    try:
        v = torch.cuda.nccl.version()
    except (RuntimeError, AttributeError):
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


class AbRunner:
    def __init__(self, ctx, plan: AbPlan) -> None:
        self.ctx = ctx
        self.plan = plan
        if ctx.store is None or ctx.store_endpoint is None:
            raise RuntimeError("ALG001 needs the check store and its endpoint (ctx.store_endpoint)")
        self.host, self.port, self.prefix = ctx.store_endpoint
        self.tmp = ""  # the children's result and log files, for the length of run()
        # The worker's own GPU (it picked local_rank modulo the visible devices).
        index = getattr(ctx.device, "index", None)
        self.device_index = index if index is not None else ctx.local_rank
        self.durations: list[float] = []

    # -- agreement through the store ---------------------------------------------------------------
    def _wait_key(self, key: str) -> str:
        """A key another rank posts; it comes within one launch's time or something is wrong."""
        wait_s = min(self.ctx.time_left() - 1.0, self.plan.launch_timeout_s + PEER_SLACK_S)
        if wait_s <= 0:
            raise TimeoutError(f"no time left to wait for {key!r}")
        try:
            self.ctx.store.wait([key], timedelta(seconds=wait_s))
        except RuntimeError as e:  # torch's DistStoreError on timeout
            raise TimeoutError(f"no {key!r} from the other ranks within {wait_s:.0f} s: {e}") from None
        return self.ctx.store.get(key).decode()

    def _decide(self, key: str, decide) -> str:
        """Rank 0 computes the value and posts it; every rank returns the same string."""
        if self.ctx.rank == 0:
            value = decide()
            self.ctx.store.set(key, value)
            return value
        with self.ctx.op(f"waiting for rank 0's word on {key}"):
            return self._wait_key(key)

    def agree_arms(self, nvls_here: bool) -> list[str]:
        ctx = self.ctx
        ctx.store.set(f"alg/nvls/{ctx.rank}", "1" if nvls_here else "0")

        def decide() -> str:
            everyone = all(self._wait_key(f"alg/nvls/{r}") == "1" for r in range(ctx.world_size))
            arms = ["default", *self.plan.candidates]
            # NCCL 2.20 runs NVLS within one node and needs more than 2 GPUs there (nvls.cc); across
            # nodes the NVLink SHARP algorithm is NVLSTree.
            if everyone and ctx.local_world_size > 2:
                extra = "NVLS" if ctx.nnodes == 1 else "NVLSTree"
                if extra not in arms:
                    arms.append(extra)
            return json.dumps(arms)

        with self._abort_on_error(), ctx.op("agreeing on the NCCL_ALGO arms"):
            return json.loads(self._decide("alg/arms", decide))

    @contextlib.contextmanager
    def _abort_on_error(self) -> Iterator[None]:
        """A rank that cannot go on tells the others, who then stop instead of waiting out timeouts."""
        try:
            yield
        except Exception as e:
            self.ctx.store.set(ABORT_KEY, f"rank {self.ctx.rank} gave up ({type(e).__name__}: {e})"[:500])
            raise

    # -- one launch ---------------------------------------------------------------------------------
    def _env(self, arm: str) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("NCCL_ALGO", None)  # the default arm runs with NCCL's own choice
        if arm != "default":
            env["NCCL_ALGO"] = arm
        if self.plan.backend == "nccl" and "NCCL_DEBUG" not in env:
            # Only NCCL's environment lines: they prove which NCCL_ALGO it read.
            env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"] = "INFO", "ENV"
        env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def launch(self, k: int, arm: str, rep: int) -> dict[str, Any]:
        ctx, plan = self.ctx, self.plan
        deadline = time.monotonic() + max(min(plan.launch_timeout_s, ctx.time_left() - MARGIN_S), 1.0)
        out_path = os.path.join(self.tmp, f"{k}.json")
        log_path = os.path.join(self.tmp, f"{k}.log")
        fail_key = f"alg/{k}/failed"
        cmd = [
            sys.executable, "-m", "ddpdoctor.checks._algo_probe",
            "--host", str(self.host), "--port", str(self.port),
            "--prefix", f"{self.prefix}alg/{k}/{arm}/rep{rep}/",
            "--rank", str(ctx.rank), "--world-size", str(ctx.world_size), "--local-rank", str(self.device_index),
            "--backend", plan.backend, "--sizes", ",".join(map(str, plan.sizes)),
            "--iters", str(plan.iters), "--warmup", str(plan.warmup),
            "--timeout", f"{deadline - time.monotonic() + CHILD_SLACK_S:.1f}",
            "--parent-pid", str(os.getpid()), "--out", out_path,
        ]  # fmt: skip
        entry: dict[str, Any] = {"arm": arm, "rep": rep, "ok": False}
        t0 = time.monotonic()
        with open(log_path, "wb") as log, ctx.op(f"NCCL_ALGO={arm} repetition {rep + 1}: child process"):
            proc = subprocess.Popen(
                cmd, env=self._env(arm), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            why = None
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    why = f"timed out after {time.monotonic() - t0:.0f} s"
                    ctx.store.set(fail_key, str(ctx.rank))
                elif ctx.store.check([fail_key]):
                    why = f"stopped: the child of rank {ctx.store.get(fail_key).decode()} failed"
                elif ctx.store.check([ABORT_KEY]):
                    why = f"stopped: {ctx.store.get(ABORT_KEY).decode()}"
                if why:
                    _kill(proc)
                    break
                time.sleep(POLL_S)
        entry["seconds"] = round(time.monotonic() - t0, 3)
        self.durations.append(entry["seconds"])
        log_text = _read(log_path)
        entry["nccl_read_algo"] = nccl_read_algo(log_text)
        got = _load_json(out_path) if why is None and proc.returncode == 0 else None
        if got is not None:
            entry.update(
                ok=True,
                **{k2: got.get(k2) for k2 in ("nccl_algo_env", "nccl_version", "init_s", "sizes", "pid")},
            )
            return entry
        if why is None:
            why = f"exit code {proc.returncode}" if proc.returncode else "no readable result file"
            ctx.store.set(fail_key, str(ctx.rank))
        entry.update(error=why, log_tail=log_text[-LOG_TAIL_CHARS:])
        return entry

    # -- the whole A/B ------------------------------------------------------------------------------
    def run(self, arms: list[str]) -> dict[str, Any]:
        order = [(arm, rep) for rep in range(self.plan.reps) for arm in arms]  # A B C A B C ...
        self.tmp = tempfile.mkdtemp(prefix=f"ddpdoctor-alg-r{self.ctx.rank}-")
        try:
            with self._abort_on_error():
                launches, stopped = self._launch_all(order)
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return {"order": [list(x) for x in order], "launches": launches, "stopped_early": stopped}

    def _launch_all(self, order: list[tuple[str, int]]) -> tuple[list[dict], str | None]:
        ctx = self.ctx
        launches: list[dict] = []

        def go() -> str:
            if ctx.store.check([ABORT_KEY]):
                return "abort"
            # The next launch must fit what is left, judged by the slowest one so far.
            need = (max(self.durations) if self.durations else 0.0) + MARGIN_S
            return "go" if ctx.time_left() > need + MARGIN_S else "stop"

        for k, (arm, rep) in enumerate(order):
            word = self._decide(f"alg/go/{k}", go)
            if word == "stop":
                return launches, f"the check's time budget ran out after {k} of {len(order)} launches"
            if word != "go":
                return launches, f"after {k} of {len(order)} launches: {ctx.store.get(ABORT_KEY).decode()}"
            launches.append(self.launch(k, arm, rep))
            ctx.emit("progress", done=k + 1, total=len(order), message=f"NCCL_ALGO={arm} rep {rep + 1}")
        return launches, None


def _kill(proc: subprocess.Popen) -> None:
    """End a child we started, and anything it started (boundary/processes.py)."""
    end_process(proc, 5.0, first_signal=signal.SIGKILL)


def _load_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            got = json.load(f)
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) else None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""
