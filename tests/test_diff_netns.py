"""`ddpdoctor diff` on the netns bed: two healthy runs differ by nothing beyond noise; a link shaped
before a third run is named. Skipped where network namespaces are unavailable."""

import json
import subprocess
import sys

import pytest
from support.marks import NEEDS_NETNS
from support.testbed import NetBed

pytestmark = NEEDS_NETNS
ARGS = ["--select", "P2P001", "--p2p-size", "4M", "--rdzv-timeout", "60"]


def _diff(old, new):
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "diff", "--json", str(old), str(new)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


def _run(bed, out, port):
    out.mkdir()
    results = bed.run_check(ARGS, out, timeout=300, port=port)
    assert all(rc in (0, 1) for rc, _ in results), results
    return out / "r0.json", results[0][0]


def test_diff_is_quiet_on_healthy_runs_and_names_a_shaped_link(tmp_path):
    port = 29400
    with NetBed(3) as bed:
        healthy = []
        # "Healthy" means P2P001 passed: on a heavily loaded machine a healthy veth is now and then
        # measured several times slower, and P2P001 says so; such a run is repeated, never compared.
        for attempt in range(6):
            report, rc = _run(bed, tmp_path / f"healthy{attempt}", port)
            port += 1  # a port of its own per run: the last run's store port may still be in TIME_WAIT
            if rc == 0:
                healthy.append(report)
            if len(healthy) == 2:
                break
        if len(healthy) < 2:
            pytest.skip("the machine is too loaded for two healthy P2P001 runs in six")
        bed.shape(2, rate_mbit=50, direction="both")
        shaped, _ = _run(bed, tmp_path / "shaped", port)
    rc, quiet = _diff(*healthy)
    assert (rc, quiet["changes"]) == (0, []), json.dumps(quiet, indent=1)[:4000]
    assert quiet["summary"] == "nothing changed beyond noise"
    rc, loud = _diff(healthy[1], shaped)
    assert rc == 1
    links = [c for c in loud["changes"] if c["kind"] == "p2p"]
    assert links and all("ddpd-node2" in c["sentence"] and c["rel"] < -0.5 for c in links), loud
    assert "fell" in loud["summary"], loud
