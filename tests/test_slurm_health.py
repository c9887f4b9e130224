"""`ddpdoctor health` as Slurm's HealthCheckProgram on the real Slurm bed (DESIGN.md §7, §9).

slurm.conf points HealthCheckProgram at a wrapper script that sets the environment and runs
`ddpdoctor health`; one node's environment names a socket interface it lacks. That node ends drained
with ddpdoctor's reason in `sinfo -R`, the healthy nodes stay idle, and `scontrol update State=RESUME`
brings it back. Skipped with the reason where Slurm or network namespaces are unavailable.
"""

import re
import sys
import time

from support.marks import NEEDS_SLURM
from support.slurmbed import SlurmBed
from support.testbed import NetBed

from ddpdoctor.model.fleet.drain_reason import parse_reason

pytestmark = NEEDS_SLURM


def _wrapper(folder, armed) -> str:
    """The HealthCheckProgram: per-node environment from env-<node> (if any), then ddpdoctor health.
    Until the test arms it (the bed must first come up idle) it passes without checking."""
    script = folder / "ddpdoctor-health.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"[ -e {armed} ] || exit 0\n"
        f"export SLURM_CONF={folder / 'slurm.conf'}\n"
        f'[ -r {folder}/env-"$SLURMD_NODENAME" ] && . {folder}/env-"$SLURMD_NODENAME"\n'
        f'echo "$(date +%s) $SLURMD_NODENAME start" >> {folder}/health.log\n'
        f"{sys.executable} -m ddpdoctor health --timeout 45 >> {folder}/health.log 2>&1\n"
        f'rc=$?; echo "$(date +%s) $SLURMD_NODENAME rc=$rc" >> {folder}/health.log; exit $rc\n')
    script.chmod(0o755)
    return str(script)


def _states(slurm) -> dict[str, str]:
    out = slurm.run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=20).stdout
    return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)


def _reasons(slurm) -> dict[str, str]:
    out = slurm.run(["sinfo", "-R", "-h", "-N", "-o", "%N|%E"], timeout=20).stdout
    return {n: r for n, _, r in (line.partition("|") for line in out.splitlines()) if n}


def test_health_check_program_drains_the_node_whose_environment_differs(tmp_path):
    tmp_path.chmod(0o755)
    armed = tmp_path / "armed"
    conf = [f"HealthCheckProgram={_wrapper(tmp_path, armed)}", "HealthCheckInterval=15",
            "HealthCheckNodeState=ANY"]
    with NetBed(3) as bed:
        # the environment node 2's slurmd hands its jobs names an interface node 2 does not have
        (tmp_path / f"env-{bed.hostname(2)}").write_text("export GLOO_SOCKET_IFNAME=ib-missing0\n")
        for i in (0, 1):
            (tmp_path / f"env-{bed.hostname(i)}").write_text(f"export GLOO_SOCKET_IFNAME={bed.ifname(i)}\n")
        with SlurmBed(bed, extra_conf=conf) as slurm:
            (tmp_path / "slurm.conf").symlink_to(slurm.conf)
            armed.touch()
            bad, good = bed.hostname(2), [bed.hostname(0), bed.hostname(1)]
            end = time.monotonic() + 150
            ran: set[str] = set()
            while time.monotonic() < end:
                log = (tmp_path / "health.log").read_text() if (tmp_path / "health.log").exists() else ""
                ran = {m.group(1) for m in re.finditer(r"^\d+ (\S+) rc=", log, re.M)}
                if _states(slurm).get(bad, "").startswith("drain") and set(good) <= ran:
                    break
                time.sleep(1)
            states, reasons = _states(slurm), _reasons(slurm)
            resumed = slurm.run(["scontrol", "update", f"NodeName={bad}", "State=RESUME"], timeout=20)
            armed.unlink()  # the next health run would drain it again
            end = time.monotonic() + 60  # "idle*": slurmd not yet answering the controller's ping
            while (after := _states(slurm)).get(bad) != "idle" and time.monotonic() < end:
                time.sleep(1)
    assert set(good) <= ran, log
    assert states[bad] in ("drained", "draining", "drain"), (states, log)
    assert all(states[g] == "idle" for g in good), (states, log)
    parsed = parse_reason(reasons[bad])
    assert parsed is not None and parsed.code == "ENV001", reasons
    assert "ib-missing0" in parsed.summary and bad in parsed.summary, reasons
    assert set(reasons) == {bad}, reasons
    assert resumed.returncode == 0, resumed.stderr
    assert after[bad] == "idle", after
