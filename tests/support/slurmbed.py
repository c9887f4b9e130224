"""A real Slurm on the namespace test bed: munge, slurmctld on node 0, one slurmd per node.

For tests and benchmarks (DESIGN.md §7). Everything the daemons own (munge key and socket, slurm.conf,
state, spool, logs, pid files, the nodes' hosts files) lives under one temp folder; every daemon runs
inside its node's network namespace with that node's hostname and a private mount namespace in which
the node's hosts file is bind-mounted over /etc/hosts (the machine's own /etc/hosts and /sys/fs/cgroup
are never touched). ``stop()`` (also on context exit, also after a failure) kills every daemon by its
pid file, then the bed's namespaces go (NetBed.destroy kills whatever still runs in them).

    with NetBed(3) as bed, SlurmBed(bed) as slurm:
        p = slurm.run(["srun", "-N3", "--ntasks-per-node=1", "hostname"])
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from ddpdoctor.model.nodes.hostlist import compress_hostlist

from .testbed import NetBed

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo", "scontrol", "runuser")


def slurm_available() -> tuple[bool, str]:
    """Whether Slurm and munge are installed; the reason when not (tests skip with it)."""
    missing = [d for d in DAEMONS if shutil.which(d) is None and not Path("/usr/sbin", d).exists()]
    if missing:
        return False, (f"Slurm is not installed ({', '.join(missing)} missing): "
                       "apt-get install -y slurm-wlm munge")
    try:
        import pwd

        pwd.getpwnam("munge")
    except KeyError:
        return False, "no `munge` user (the munge package creates it)"
    # Each node's hosts file is bind-mounted in a private mount namespace; a file bound onto itself
    # there shows whether that is permitted, without touching the machine's own /etc/hosts.
    try:
        probe = subprocess.run(["unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c",
                                "mount --bind /etc/hosts /etc/hosts"], capture_output=True, text=True,
                               timeout=30, check=False)
        why = (probe.stderr or probe.stdout).strip() if probe.returncode else ""
    except (OSError, subprocess.TimeoutExpired) as e:
        why = str(e)
    if why:
        return False, f"cannot bind-mount in a private mount namespace: {why}"
    return True, ""


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


class SlurmError(RuntimeError):
    pass


class SlurmBed:
    def __init__(self, bed: NetBed, cpus: int = 1, start_timeout: float = 60,
                 unresolved: dict[int, Sequence[int]] | None = None, extra_conf: Sequence[str] = ()) -> None:
        """``unresolved``: node -> the nodes whose names its hosts file leaves out (a broken resolver);
        ``extra_conf``: more slurm.conf lines (HealthCheckProgram=..., Prolog=...)."""
        self.bed = bed
        self.unresolved = {i: set(v) for i, v in (unresolved or {}).items()}
        self.cpus = cpus
        self.extra_conf = list(extra_conf)
        self.start_timeout = start_timeout
        self.root = Path(tempfile.mkdtemp(prefix=f"ddpd-slurm-{bed.tag}-"))
        os.chmod(self.root, 0o755)  # munged (user munge) must reach its files in here
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.sock"
        self._procs: list[subprocess.Popen] = []

    # -- names ---------------------------------------------------------------------------------------
    def nodelist(self) -> str:
        return compress_hostlist(self.bed.hostname(i) for i in range(self.bed.nodes))

    def env(self, base: dict | None = None) -> dict[str, str]:
        """The environment for Slurm's clients: this bed's slurm.conf, nothing pinned to one node's
        interface (srun hands its environment to every task, on every node)."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            env.pop(k, None)
        return env

    def command(self, i: int, argv: Sequence[str]) -> list[str]:
        """argv inside node i: its network namespace, its hostname, the bed's hosts file."""
        script = (f"mount --bind {shlex.quote(str(self.hosts_file(i)))} /etc/hosts && "
                  f"hostname {shlex.quote(self.bed.hostname(i))} && exec \"$@\"")
        return ["ip", "netns", "exec", self.bed.ns(i), "unshare", "--uts", "--mount", "--propagation",
                "private", "sh", "-c", script, "sh", *argv]

    def hosts_file(self, i: int) -> Path:
        return self.root / f"hosts-{i}"

    def run(self, argv: Sequence[str], node: int = 0, timeout: float = 120, env: dict | None = None,
            **kw) -> subprocess.CompletedProcess:
        """A Slurm client command (srun, sbatch, squeue...) on node ``node``; output captured as text."""
        kw.setdefault("capture_output", True)
        return subprocess.run(self.command(node, argv), env=self.env(env), timeout=timeout, text=True,
                              check=False, **kw)

    def sbatch(self, argv: Sequence[str], timeout: float = 240, env: dict | None = None) -> tuple[str, str, str]:
        """``sbatch ARGV`` on node 0, then wait for the job to end; (job id, JobState, ExitCode) as
        scontrol says. Polled every half second: ``sbatch --wait`` backs off to 10 s between looks."""
        p = self.run(["sbatch", "--parsable", *argv], env=env, timeout=60)
        if p.returncode != 0:
            raise SlurmError(f"sbatch failed: {(p.stderr or p.stdout).strip()}")
        job = p.stdout.strip().split(";")[0]
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            q = self.run(["scontrol", "-o", "show", "job", job], timeout=20).stdout
            state, code = re.search(r"JobState=(\S+)", q), re.search(r"ExitCode=(\S+)", q)
            if state and state.group(1) not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
                return job, state.group(1), code.group(1) if code else "?"
            time.sleep(0.5)
        raise SlurmError(f"batch job {job} still not done after {timeout:g} s")

    # -- life cycle ----------------------------------------------------------------------------------
    def start(self) -> SlurmBed:
        try:
            self._write_files()
            self._start_munge()
            self._daemon(0, [_which("slurmctld"), "-D", "-f", str(self.conf)], "slurmctld")
            for i in range(self.bed.nodes):
                self._daemon(i, [_which("slurmd"), "-D", "-f", str(self.conf), "-N", self.bed.hostname(i)],
                             f"slurmd-{i}")
            self._wait_idle()
            return self
        except BaseException:
            self.stop()
            raise

    def __enter__(self) -> SlurmBed:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Kill every daemon by its pid file (and the processes this object started), remove the folder.
        Idempotent."""
        pids = set()
        for f in self.root.glob("*.pid"):
            try:
                pids.add(int(f.read_text().split()[0]))
            except (OSError, ValueError, IndexError):
                pass
        munge_pid = self.root / "munge" / "munged.pid"
        if munge_pid.exists():
            try:
                pids.add(int(munge_pid.read_text().split()[0]))
            except (OSError, ValueError, IndexError):
                pass
        pids |= {p.pid for p in self._procs if p.poll() is None}
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            end = time.monotonic() + 3
            while time.monotonic() < end and any(_alive(p) for p in pids):
                time.sleep(0.1)
        for p in self._procs:
            try:
                p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        self._procs.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- the pieces ----------------------------------------------------------------------------------
    def _write_files(self) -> None:
        r, n = self.root, self.bed.nodes
        for d in ("state", "munge", *(f"spool/{self.bed.hostname(i)}" for i in range(n))):
            (r / d).mkdir(parents=True, exist_ok=True)
        for node in range(n):
            self.hosts_file(node).write_text("127.0.0.1 localhost\n" + "".join(
                f"{self.bed.addr(i)} {self.bed.hostname(i)}\n" for i in range(n)
                if i not in self.unresolved.get(node, ())))
        names = self.nodelist()
        self.conf.write_text("\n".join([
            f"ClusterName=ddpd{self.bed.tag}",
            f"SlurmctldHost={self.bed.hostname(0)}({self.bed.addr(0)})",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool' / '%n'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={r / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "ReturnToService=2",
            "MailProg=/bin/true",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
            "MessageTimeout=10",
            "KillWait=2",
            f"NodeName={names} NodeHostname={names} CPUs={self.cpus} State=UNKNOWN",
            f"PartitionName=bed Nodes={names} Default=YES MaxTime=INFINITE State=UP",
            *self.extra_conf,
            "",
        ]))
        (r / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\nCgroupAutomount=no\n")
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        os.chmod(r / "munge", 0o700)
        for p in (r / "munge", key):
            shutil.chown(p, "munge", "munge")

    def _start_munge(self) -> None:
        m = self.root / "munge"
        argv = ["runuser", "-u", "munge", "--", _which("munged"), "--key-file", str(m / "munge.key"),
                "--socket", str(self.munge_socket), "--pid-file", str(m / "munged.pid"),
                "--log-file", str(m / "munged.log"), "--seed-file", str(m / "munged.seed"), "--force"]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        if p.returncode != 0:
            raise SlurmError(f"munged would not start: {(p.stderr or p.stdout).strip()}")
        _wait_for(lambda: self.munge_socket.exists(), 10, "munged's socket")

    def _daemon(self, i: int, argv: list[str], name: str) -> None:
        with open(self.root / f"{name}.out", "wb") as log:
            self._procs.append(subprocess.Popen(self.command(i, argv), stdout=log, stderr=subprocess.STDOUT,
                                                env=self.env(), start_new_session=True))

    def _wait_idle(self) -> None:
        end = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < end:
            for p in self._procs:
                if p.poll() is not None:
                    raise SlurmError(f"a Slurm daemon exited ({p.args[-6:]}): {self.logs()[-2000:]}")
            r = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=20)
            last = (r.stdout + r.stderr).strip()
            states = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
            if len(states) == self.bed.nodes and all(s == "idle" for s in states.values()):
                return
            time.sleep(0.5)
        raise SlurmError(f"Slurm nodes not idle after {self.start_timeout:g} s (sinfo: {last}); "
                         f"logs: {self.logs()[-2000:]}")

    def logs(self) -> str:
        out = []
        for f in sorted(self.root.glob("*.log")) + sorted(self.root.glob("*.out")):
            try:
                out.append(f"== {f.name}\n{f.read_text(errors='replace')[-1500:]}")
            except OSError:
                pass
        return "\n".join(out)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _wait_for(pred, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.1)
    raise SlurmError(f"timed out after {timeout:g} s waiting for {what}")
