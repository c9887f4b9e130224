from ddpdoctor.core.report import CheckResult, Finding, Report, Status
from ddpdoctor.core.run_info import RunInfo
from ddpdoctor.model.nodes.bad_nodes import bad_nodes_entry, blamed_nodes

NODES = ["ddpb-node0", "ddpb-node1", "ddpb-node2", "ddpb-node5"]


def _report(*checks, **run):
    return Report(run=RunInfo(nodes=NODES, **run), checks=list(checks))


def _check(status, *findings, code="P2P001"):
    return CheckResult(code, code, status=status, findings=list(findings))


def test_slow_node_and_lost_node_are_blamed_in_node_order():
    slow = Finding("P2P001", "error", "node ddpb-node5 is slow", where={"node": "ddpb-node5", "node_rank": 3})
    lost = Finding("COL001", "error", "lost node", where={"ranks": [2], "nodes": ["ddpb-node2"]})
    rep = _report(_check(Status.FAILED, slow), _check(Status.FAILED, lost, code="COL001"),
                  lost_nodes=["ddpb-node2"])
    assert blamed_nodes(rep) == ["ddpb-node2", "ddpb-node5"]
    assert bad_nodes_entry(rep).to_json() == {"nodes": ["ddpb-node2", "ddpb-node5"], "hostlist": "ddpb-node[2,5]"}


def test_nothing_blamed_when_nothing_failed():
    warn = Finding("P2P001", "warning", "node ddpb-node1 is a bit slow", where={"node": "ddpb-node1"})
    rep = _report(_check(Status.WARNING, warn))
    assert bad_nodes_entry(rep).to_json() == {"nodes": [], "hostlist": ""}


def test_a_finding_naming_every_node_blames_none_and_a_link_blames_no_node():
    everyone = Finding("ENV001", "error", "nodes disagree on torch", where={"nodes": list(NODES)})
    link = Finding("P2P001", "error", "the path ddpb-node0 -> ddpb-node1 is slow",
                   where={"from_node": "ddpb-node0", "to_node": "ddpb-node1"})
    rep = _report(_check(Status.FAILED, everyone, code="ENV001"), _check(Status.FAILED, link))
    assert blamed_nodes(rep) == []


def test_odd_one_out_skew_is_blamed():
    odd = Finding("ENV001", "error", "torch versions differ", where={"ranks": [0, 1, 2, 3], "nodes": ["ddpb-node1"]})
    assert blamed_nodes(_report(_check(Status.FAILED, odd, code="ENV001"))) == ["ddpb-node1"]


def test_single_node_run_blames_its_node():
    bad = Finding("GPU001", "error", "GPU 3 has ECC errors", where={"node": "solo"})
    rep = Report(run=RunInfo(nodes=["solo"]), checks=[_check(Status.FAILED, bad, code="GPU001")])
    assert blamed_nodes(rep) == ["solo"]


def test_env001_version_skew_blames_the_odd_node_only_when_there_is_a_majority():
    from ddpdoctor.checks import env001_environment as env001

    from ddpdoctor.core.world import WorldInfo

    def run(torches):
        infos = [{"rank": r, "node_rank": r, "hostname": f"ddpb-node{r}"} for r in range(len(torches))]
        res = {r: {"hostname": f"ddpb-node{r}", "torch": t, "python": "3.11"} for r, t in enumerate(torches)}
        summary = env001.summarize(res, WorldInfo.from_dicts(infos))
        hosts = [f"ddpb-node{r}" for r in range(len(torches))]
        rep = Report(run=RunInfo(nodes=hosts), checks=[CheckResult("ENV001", "ENV001", status=summary.final_status(),
                                                                findings=summary.findings)])
        return [f for f in summary.findings if "torch" in f.message], blamed_nodes(rep)

    (finding,), blamed = run(["2.13", "2.13", "2.12", "2.13"])
    assert finding.where["node"] == "ddpb-node2" and blamed == ["ddpb-node2"]
    (finding,), blamed = run(["2.13", "2.12"])  # one against one: no odd one out, both nodes named
    assert "node" not in finding.where and finding.where["nodes"] == ["ddpb-node0", "ddpb-node1"]
    assert blamed == []


def test_cli_bad_nodes_file_and_report_entry(tmp_path):
    from helpers import load, run_cli

    bad = tmp_path / "bad"
    bad.write_text("stale\n")  # a file left by an earlier run is replaced, never trusted
    p = run_cli("check", "--select", "ENV001", "--nproc-per-node", "1", "-q", "--json", str(tmp_path / "r.json"),
                "--bad-nodes", str(bad), timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert bad.read_text() == ""
    assert load(tmp_path / "r.json")["run"]["bad_nodes"] == {"nodes": [], "hostlist": ""}


def test_cli_bad_nodes_in_a_missing_folder_is_exit_2():
    from helpers import run_cli

    p = run_cli("check", "--select", "ENV001", "--bad-nodes", "/nonexistent-ddpd/bad", timeout=60)
    assert p.returncode == 2 and "--bad-nodes /nonexistent-ddpd/bad" in p.stderr, p.stderr
