"""Emulated nodes on one machine: network namespaces joined through a bridge, with tc to shape links.

For tests and benchmarks (DESIGN.md §6). Every node is a namespace with its own address, interface
and (through ``unshare --uts``) hostname; node i's uplink is a veth pair to a bridge in a hub
namespace. Traffic only ever flows between namespaces this object created. ``destroy()`` (also on
context exit, also after a failure) removes everything it made.

    with NetBed(3) as bed:
        bed.shape(2, rate_mbit=200)                     # everything node 2 sends
        bed.shape(2, rate_mbit=200, direction="in")     # everything node 2 receives
        bed.shape_pair(0, 1, rate_mbit=100)             # only node 0 -> node 1
        p = bed.popen(0, ["ddpdoctor", "check", ...])
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Sequence

_counter = itertools.count()


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=30)


def netns_available() -> tuple[bool, str]:
    """Whether this process may create namespaces; the reason when not (tests skip with it)."""
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return False, "network namespaces need Linux"
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return False, f"`{tool}` is not installed (iproute2 / util-linux)"
    probe = f"ddpdprobe{os.getpid()}"
    r = _run(["ip", "netns", "add", probe], check=False)
    if r.returncode != 0:
        return False, f"cannot create a network namespace: {r.stderr.strip()}"
    _run(["ip", "netns", "del", probe], check=False)
    return True, ""


class NetBed:
    def __init__(self, nodes: int, subnet: str = "10.213.0", mtu: int | None = None) -> None:
        if not 1 <= nodes <= 200:
            raise ValueError("nodes must be 1..200")
        self.nodes = nodes
        self.subnet = subnet
        self.mtu = mtu
        self.tag = f"{uuid.uuid4().hex[:4]}{next(_counter)}"  # unique per bed, short for ifnames
        self.hub = f"ddpd-{self.tag}-hub"
        self._created_ns: list[str] = []
        self._up = False

    # -- names --------------------------------------------------------------------------------------
    def ns(self, i: int) -> str:
        return f"ddpd-{self.tag}-n{i}"

    def ifname(self, i: int) -> str:
        return f"dd{self.tag}n{i}"[:15]

    def _hub_if(self, i: int) -> str:
        return f"dd{self.tag}h{i}"[:15]

    def addr(self, i: int) -> str:
        return f"{self.subnet}.{i + 1}"

    def hostname(self, i: int) -> str:
        return f"ddpd-node{i}"

    # -- life cycle -------------------------------------------------------------------------------
    def create(self) -> NetBed:
        try:
            self._ns_add(self.hub)
            _run(["ip", "-n", self.hub, "link", "add", "br0", "type", "bridge"])
            _run(["ip", "-n", self.hub, "link", "set", "br0", "up"])
            _run(["ip", "-n", self.hub, "link", "set", "lo", "up"])
            for i in range(self.nodes):
                ns = self.ns(i)
                self._ns_add(ns)
                a, b = self.ifname(i), self._hub_if(i)
                _run(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
                _run(["ip", "link", "set", a, "netns", ns])
                _run(["ip", "link", "set", b, "netns", self.hub])
                _run(["ip", "-n", self.hub, "link", "set", b, "master", "br0"])
                _run(["ip", "-n", self.hub, "link", "set", b, "up"])
                _run(["ip", "-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", a])
                if self.mtu:
                    _run(["ip", "-n", ns, "link", "set", a, "mtu", str(self.mtu)])
                _run(["ip", "-n", ns, "link", "set", a, "up"])
                _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            self._up = True
            return self
        except BaseException:
            self.destroy()
            raise

    def _ns_add(self, name: str) -> None:
        _run(["ip", "netns", "add", name])
        self._created_ns.append(name)

    def destroy(self) -> None:
        """Remove every namespace (and with it every veth end) this bed created. Idempotent."""
        for name in reversed(self._created_ns):
            # Kill whatever still runs in the namespace so `ip netns del` frees it.
            pids = _run(["ip", "netns", "pids", name], check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError, PermissionError):
                    pass
            _run(["ip", "netns", "del", name], check=False)
        self._created_ns.clear()
        self._up = False

    def __enter__(self) -> NetBed:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    # -- shaping and faults -----------------------------------------------------------------------
    def shape(
        self,
        i: int,
        rate_mbit: float | None = None,
        direction: str = "out",
        delay_ms: float | None = None,
        loss_pct: float | None = None,
    ) -> None:
        """Shape node i's uplink: "out" = what node i sends, "in" = what it receives, or "both"."""
        if direction not in ("out", "in", "both"):
            raise ValueError("direction must be out, in or both")
        targets = []
        if direction in ("out", "both"):
            targets.append((self.ns(i), self.ifname(i)))
        if direction in ("in", "both"):
            targets.append((self.hub, self._hub_if(i)))  # the hub side's egress is node i's ingress
        for ns, dev in targets:
            _run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"], check=False)
            if rate_mbit is not None and (delay_ms or loss_pct):
                _run(self._netem(ns, dev, "root", "1:", delay_ms, loss_pct))
                _run(self._tbf(ns, dev, "parent 1:1", "10:", rate_mbit))
            elif rate_mbit is not None:
                _run(self._tbf(ns, dev, "root", "1:", rate_mbit))
            elif delay_ms or loss_pct:
                _run(self._netem(ns, dev, "root", "1:", delay_ms, loss_pct))

    def shape_pair(self, src: int, dst: int, rate_mbit: float) -> None:
        """Shape only the traffic node ``src`` sends to node ``dst`` (one link, one direction).

        htb with an unlimited default class and a u32 filter on the destination address steers that
        one flow into a tbf-limited class (this kernel has htb, tbf and u32, but not prio or netem).
        """
        ns, dev = self.ns(src), self.ifname(src)
        ex = ["ip", "netns", "exec", ns, "tc"]
        _run(ex + ["qdisc", "del", "dev", dev, "root"], check=False)
        _run(ex + ["qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10", "r2q", "100000"])
        _run(ex + ["class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", "100gbit"])
        _run(ex + ["class", "add", "dev", dev, "parent", "1:", "classid", "1:30", "htb", "rate", "100gbit"])
        _run(self._tbf(ns, dev, "parent 1:30", "30:", rate_mbit))
        _run(ex + ["filter", "add", "dev", dev, "protocol", "ip", "parent", "1:0", "prio", "1", "u32",
                   "match", "ip", "dst", f"{self.addr(dst)}/32", "flowid", "1:30"])

    def clear_shaping(self, i: int) -> None:
        for ns, dev in ((self.ns(i), self.ifname(i)), (self.hub, self._hub_if(i))):
            _run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"], check=False)

    def link_down(self, i: int) -> None:
        _run(["ip", "-n", self.hub, "link", "set", self._hub_if(i), "down"])

    def link_up(self, i: int) -> None:
        _run(["ip", "-n", self.hub, "link", "set", self._hub_if(i), "up"])

    @staticmethod
    def _tbf(ns: str, dev: str, parent: str, handle: str, rate_mbit: float) -> list[str]:
        # burst must hold at least rate/HZ; 64 kB is enough up to ~5 Gbit/s at HZ=1000 and keeps
        # the measured rate within a few percent of the set one.
        burst_kb = max(64, int(rate_mbit * 1e6 / 8 / 250 / 1024))
        return ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, *parent.split(),
                "handle", handle, "tbf", "rate", f"{rate_mbit}mbit", "burst", f"{burst_kb}kb",
                "latency", "100ms"]

    @staticmethod
    def _netem(ns, dev, parent, handle, delay_ms, loss_pct) -> list[str]:
        # Not every kernel has sch_netem (the one these tests were written on does not): callers get
        # tc's "qdisc kind is unknown" as a CalledProcessError and should skip with that reason.
        argv = ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, *parent.split(),
                "handle", handle, "netem"]
        if delay_ms:
            argv += ["delay", f"{delay_ms}ms"]
        if loss_pct:
            argv += ["loss", f"{loss_pct}%"]
        return argv

    # -- running things on a node ------------------------------------------------------------------
    def command(self, i: int, argv: Sequence[str], hostname: str | None = None) -> list[str]:
        """argv wrapped to run inside node i, with its own hostname."""
        host = hostname or self.hostname(i)
        return ["ip", "netns", "exec", self.ns(i), "unshare", "--uts", "sh", "-c",
                f'hostname {host} && exec "$@"', "sh", *argv]

    def popen(self, i: int, argv: Sequence[str], env: dict | None = None, **kw) -> subprocess.Popen:
        full_env = dict(os.environ if env is None else env)
        full_env.setdefault("GLOO_SOCKET_IFNAME", self.ifname(i))
        full_env.setdefault("NCCL_SOCKET_IFNAME", self.ifname(i))
        return subprocess.Popen(self.command(i, argv), env=full_env, **kw)

    def run(self, i: int, argv: Sequence[str], env: dict | None = None, timeout: float = 120, **kw):
        full_env = dict(os.environ if env is None else env)
        full_env.setdefault("GLOO_SOCKET_IFNAME", self.ifname(i))
        return subprocess.run(self.command(i, argv), env=full_env, timeout=timeout, **kw)

    def run_check(
        self, args: Sequence[str], out_dir: str | Path, timeout: float = 300, env: dict | None = None,
        port: int = 29400, nproc: int = 1,
    ) -> list[tuple[int, str]]:
        """``ddpdoctor check ARGS`` on every node at once, ``nproc`` ranks per node, node 0 hosting the
        rendezvous; node i's report goes to ``out_dir/r{i}.json``. Returns (exit code, output) per node.
        Whatever still runs after ``timeout`` seconds is killed and TimeoutExpired raised."""
        ep = f"{self.addr(0)}:{port}"
        procs = []
        for i in range(self.nodes):
            report = Path(out_dir) / f"r{i}.json"
            argv = [sys.executable, "-m", "ddpdoctor", "check", "--nodes", str(self.nodes),
                    "--node-rank", str(i), "--nproc-per-node", str(nproc), "--rdzv-endpoint", ep,
                    "-q", "--json", str(report), *args]
            procs.append(
                self.popen(i, argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            )
        deadline = time.monotonic() + timeout
        results = []
        try:
            for p in procs:
                out = p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0]
                results.append((p.returncode, out))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.communicate()
        return results
