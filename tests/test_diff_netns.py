"""`ddpdoctor diff` on the netns bed: two healthy runs differ by nothing beyond noise; a link shaped
before a third run is named. Skipped where network namespaces are unavailable."""

import json
import subprocess
import sys

import pytest

from ddpdoctor.testbed import NetBed, netns_available

NETNS_OK, NETNS_WHY = netns_available()
pytestmark = [pytest.mark.netns, pytest.mark.slow,
              pytest.mark.skipif(not NETNS_OK, reason=NETNS_WHY or "network namespaces unavailable")]
ARGS = ["--select", "BW001,P2P001", "--max-size", "4M", "--p2p-size", "4M", "--rdzv-timeout", "60"]


def _diff(old, new):
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "diff", "--json", str(old), str(new)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


def test_diff_is_quiet_on_healthy_runs_and_names_a_shaped_link(tmp_path):
    runs = []
    with NetBed(3) as bed:
        for name in ("healthy1", "healthy2", "shaped"):
            if name == "shaped":
                bed.shape(2, rate_mbit=200, direction="both")
            out = tmp_path / name
            out.mkdir()
            results = bed.run_check(ARGS, out, timeout=300)
            assert all(rc in (0, 1) for rc, _ in results), results
            runs.append(out / "r0.json")
    rc, quiet = _diff(runs[0], runs[1])
    assert (rc, quiet["changes"]) == (0, []), quiet
    assert quiet["summary"] == "nothing changed beyond noise"
    rc, loud = _diff(runs[1], runs[2])
    assert rc == 1
    links = [c for c in loud["changes"] if c["kind"] == "p2p"]
    assert links and all("ddpd-node2" in c["sentence"] and c["rel"] < -0.5 for c in links), loud
    untouched = [c for c in loud["changes"] if c["kind"] == "p2p" and "ddpd-node2" not in c["sentence"]]
    assert not untouched, loud
    assert "fell" in loud["summary"], loud
