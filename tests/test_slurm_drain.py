"""`ddpdoctor check --drain` under srun on the real Slurm bed: a confirmation pass re-measures each
suspect against a node that passed before anything is drained (DESIGN.md §9). Skipped with the reason
where Slurm or network namespaces are unavailable."""

import json
import sys
import threading
import time

from support.marks import NEEDS_SLURM
from support.slurmbed import SlurmBed
from support.testbed import NetBed

from ddpdoctor.model.fleet.drain_reason import parse_reason

pytestmark = NEEDS_SLURM
CHECK = [sys.executable, "-m", "ddpdoctor", "check", "--nproc-per-node", "1", "--rdzv-timeout", "30",
         "--select", "P2P001", "--p2p-size", "4M", "--drain"]


def _state_and_reasons(slurm):
    """Once the job's nodes have settled (a node is "completing" for a moment after srun returns)."""
    end = time.monotonic() + 60
    while True:
        states, reasons = _read(slurm)
        if time.monotonic() > end or not any(s.startswith(("completing", "mix", "alloc")) or s.endswith("*")
                                             for s in states.values()):
            return states, reasons
        time.sleep(1)


def _read(slurm):
    states = slurm.run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=20).stdout
    reasons = slurm.run(["sinfo", "-R", "-h", "-N", "-o", "%N|%E"], timeout=20).stdout
    return (dict(line.split() for line in states.splitlines() if len(line.split()) == 2),
            {n: r for n, _, r in (line.partition("|") for line in reasons.splitlines()) if n})


def test_a_node_still_slow_when_measured_again_is_drained(tmp_path):
    with NetBed(3) as bed, SlurmBed(bed) as slurm:
        bed.shape(2, rate_mbit=100, direction="both")
        p = slurm.run(["srun", "-N3", "--ntasks-per-node=1", *CHECK, "--json", str(tmp_path / "r.json")], timeout=400)
        states, reasons = _state_and_reasons(slurm)
    assert p.returncode == 1, p.stdout + p.stderr
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["run"]["bad_nodes"]["nodes"] == ["ddpd-node2"], p.stdout
    assert rep["run"].get("drain"), p.stdout[-3000:] + p.stderr[-3000:]
    [d] = rep["run"]["drain"]
    assert d["node"] == "ddpd-node2" and d["condemned"] and d["partner"] in ("ddpd-node0", "ddpd-node1"), d
    assert states["ddpd-node2"].startswith("drain"), (states, p.stdout)
    assert states["ddpd-node0"] == states["ddpd-node1"] == "idle", states
    parsed = parse_reason(reasons["ddpd-node2"])
    assert parsed is not None and parsed.code == "P2P001" and "ddpd-node2" in parsed.summary, reasons


def test_a_node_slow_only_once_is_spared(tmp_path):
    report = tmp_path / "r.json"
    with NetBed(3) as bed, SlurmBed(bed) as slurm:
        bed.shape(2, rate_mbit=100, direction="both")

        def lift_when_measured():  # the first verdict is written before the confirmation delay ends
            end = time.monotonic() + 300
            while time.monotonic() < end and not report.exists():
                time.sleep(0.1)
            bed.clear_shaping(2)

        t = threading.Thread(target=lift_when_measured, daemon=True)
        t.start()
        p = slurm.run(["srun", "-N3", "--ntasks-per-node=1", *CHECK, "--confirm-delay", "10", "--json", str(report)],
                      timeout=400)
        t.join(timeout=10)
        states, reasons = _state_and_reasons(slurm)
    rep = json.loads(report.read_text())
    assert rep["run"]["bad_nodes"]["nodes"] == ["ddpd-node2"], p.stdout  # the first measurement blamed it
    assert rep["run"].get("drain"), p.stdout[-3000:] + p.stderr[-3000:]
    [d] = rep["run"]["drain"]
    assert d["node"] == "ddpd-node2" and not d["condemned"] and "spared" in d["said"], d
    assert all(s == "idle" for s in states.values()), (states, p.stdout)
    assert reasons == {}, reasons
