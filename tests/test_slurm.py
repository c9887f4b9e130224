"""`ddpdoctor check` under a real Slurm (munge, slurmctld, one slurmd per namespace node; DESIGN.md §7).

Skipped with the reason where Slurm is not installed (`apt-get install -y slurm-wlm munge`) or network
namespaces are not permitted. Every daemon, folder and namespace is gone after each test, pass or fail.
"""

import json
import re
import sys

from helpers import REPO
from support.marks import NEEDS_SLURM
from support.slurmbed import SlurmBed
from support.testbed import NetBed

from ddpdoctor.model.nodes.hostlist import compress_hostlist

pytestmark = NEEDS_SLURM
CHECK = [sys.executable, "-m", "ddpdoctor", "check", "--nproc-per-node", "1", "--rdzv-timeout", "30"]


def _by_task(labelled: str) -> dict[int, str]:
    """srun --label output -> each task's lines."""
    out: dict[int, list[str]] = {}
    for line in labelled.splitlines():
        m = re.match(r"\s*(\d+): ?(.*)", line)
        if m:
            out.setdefault(int(m.group(1)), []).append(m.group(2))
    return {t: "\n".join(lines) for t, lines in out.items()}


def test_srun_prints_one_report_and_task_zero_writes_the_files(tmp_path):
    with NetBed(2) as bed, SlurmBed(bed) as slurm:
        p = slurm.run(["srun", "-N2", "--ntasks-per-node=1", "--label", *CHECK, "--select", "RDZ001,ENV001,COL001",
                       "--json", str(tmp_path / "r.json"), "--junit", str(tmp_path / "j.xml"),
                       "--bad-nodes", str(tmp_path / "bad")], timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    tasks = _by_task(p.stdout)
    assert "OK: nothing failed" in tasks[0] and "COL001" in tasks[0]  # the whole report, once
    follower = tasks[1].strip()
    assert "\n" not in follower and "COL001" not in follower
    assert follower.startswith("ddpd-node1: OK: nothing failed")
    assert "SLURM_PROCID=0" in follower and str(tmp_path / "r.json") in follower and "ddpd-node0" in follower
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["run"]["nodes"] == ["ddpd-node0", "ddpd-node1"] and rep["run"]["rdzv_id"].startswith("slurm-")
    assert rep["run"]["bad_nodes"] == {"nodes": [], "hostlist": ""}
    assert (tmp_path / "j.xml").read_text().startswith("<?xml")
    assert (tmp_path / "bad").read_text() == ""


def test_sbatch_example_checks_the_allocation(tmp_path):
    script = REPO / "examples" / "ddpdoctor-check.sbatch"
    env = {"DDPDOCTOR": f"{sys.executable} -m ddpdoctor", "DDPDOCTOR_OUT": str(tmp_path / "out")}
    with NetBed(2) as bed, SlurmBed(bed) as slurm:
        job, state, code = slurm.sbatch(["-N2", f"--chdir={tmp_path}", str(script), "--nproc-per-node", "1",
                                         "--select", "RDZ001,ENV001,COL001"], env={**slurm.env(), **env})
        log_file = tmp_path / f"ddpdoctor-{job}.out"  # the script's #SBATCH --output
        log = log_file.read_text() if log_file.exists() else ""
    assert (state, code) == ("COMPLETED", "0:0"), log
    assert log.count("OK: nothing failed") == 2, log  # the report's verdict and the follower's line
    assert "ddpd-node1: OK: nothing failed" in log and "bad nodes: none" in log
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert rep["run"]["nodes"] == ["ddpd-node0", "ddpd-node1"]
    assert (tmp_path / "out" / "junit.xml").exists() and (tmp_path / "out" / "bad-nodes").read_text() == ""


def test_bad_nodes_on_three_nodes_with_one_shaped_link(tmp_path):
    bad = tmp_path / "bad"
    with NetBed(3) as bed, SlurmBed(bed) as slurm:
        bed.shape(2, rate_mbit=100, direction="both")  # node 2's link: everything it sends and receives
        p = slurm.run(["srun", "-N3", "--ntasks-per-node=1", "--label", *CHECK, "--select", "P2P001",
                       "--p2p-size", "4M", "--json", str(tmp_path / "r.json"), "--bad-nodes", str(bad)],
                      timeout=240)
        text = bad.read_text() if bad.exists() else None
        # the file goes straight into --exclude; so does a bracketed list of two
        excluded = slurm.run(["sh", "-c", f'srun -N2 --exclude="$(cat {bad})" hostname | sort'], timeout=60)
        two = compress_hostlist([bed.hostname(1), bed.hostname(2)])
        excluded_two = slurm.run(["srun", "-N1", f"--exclude={two}", "hostname"], timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    assert text == "ddpd-node2\n", p.stdout
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["run"]["bad_nodes"] == {"nodes": ["ddpd-node2"], "hostlist": "ddpd-node2"}
    assert "bad node(s): ddpd-node2" in _by_task(p.stdout)[0]
    assert excluded.returncode == 0 and excluded.stdout.split() == ["ddpd-node0", "ddpd-node1"], excluded.stderr
    assert two == "ddpd-node[1-2]"
    assert excluded_two.returncode == 0 and excluded_two.stdout.split() == ["ddpd-node0"], excluded_two.stderr


def test_unresolvable_first_host_is_named_as_such(tmp_path):
    # node 1's resolver does not know node 0, the first host of the job's node list
    with NetBed(2) as bed, SlurmBed(bed, unresolved={1: [0]}) as slurm:
        p = slurm.run(["srun", "-N2", "--ntasks-per-node=1", "--label", *CHECK, "--rdzv-timeout", "8",
                       "--select", "ENV001"], timeout=120)
    tasks = _by_task(p.stdout + p.stderr)
    assert p.returncode == 2, p.stdout + p.stderr
    assert ("ddpd-node1 cannot resolve ddpd-node0, the first host of SLURM_JOB_NODELIST" in tasks[1]), tasks
    assert "unreachable" not in tasks[1]


def test_a_step_on_part_of_the_allocation(tmp_path):
    # inside a 3-node batch job, a check on 2 of its nodes: the step's node count and node ids count
    script = tmp_path / "part.sh"
    script.write_text("#!/bin/sh\n" + " ".join(
        ["srun", "-N2", "--exclude=ddpd-node0", "--ntasks-per-node=1", *CHECK, "--select", "RDZ001,ENV001",
         "--json", str(tmp_path / "r.json")]) + "\n")
    with NetBed(3) as bed, SlurmBed(bed) as slurm:
        _, state, code = slurm.sbatch(["-N3", f"--chdir={tmp_path}", "--output=out.txt", str(script)])
    out = (tmp_path / "out.txt").read_text() if (tmp_path / "out.txt").exists() else ""
    assert (state, code) == ("COMPLETED", "0:0"), out
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["run"]["nodes"] == ["ddpd-node1", "ddpd-node2"], out
    assert "ddpd-node2: OK: nothing failed" in out
