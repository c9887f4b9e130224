"""The fleet outputs' pure logic: drain reasons, exit codes, Prometheus text (parsed with
prometheus_client's own parser), Kubernetes labels, the health verdict, the confirmation decision,
and the report diff."""

import json
import subprocess
import sys

import pytest
import yaml
from helpers import REPO
from prometheus_client.parser import text_string_to_metric_families

from ddpdoctor.core.report import CheckResult, Finding, Report
from ddpdoctor.core.run_info import RunInfo
from ddpdoctor.model.fleet import k8s_labels
from ddpdoctor.model.fleet.confirm import decide
from ddpdoctor.model.fleet.diff import Thresholds, diff_reports
from ddpdoctor.model.fleet.drain_reason import MAX_REASON, format_reason, parse_reason
from ddpdoctor.model.fleet.exit_codes import exit_code, outcome, translate
from ddpdoctor.model.fleet.health import drain_reason, gloo_ifname_findings, unfinished
from ddpdoctor.model.fleet.metrics import render

NODES = ["gpu01", "gpu02", "gpu03"]


def _matrix(bw: dict[tuple[int, int], float]):
    labels = [f"r{i}@{h}" for i, h in enumerate(NODES)]
    return {"unit": "GB/s", "labels": labels,
            "values": [[bw.get((i, j)) for j in range(3)] for i in range(3)]}


def _report(slow: str | None = None, busbw: float = 300.0, nccl: str = "2.21.5", created: float = 1e9) -> Report:
    link = {(i, j): 40.0 for i in range(3) for j in range(3) if i != j}
    findings = []
    if slow:
        k = NODES.index(slow)
        link.update({(i, j): 1.0 for (i, j) in link if k in (i, j)})
        findings = [Finding("P2P001", "error", f"node {slow} is slow on its links", where={"node": slow})]
    checks = [
        CheckResult("ENV001", "env", status="passed", data={"nodes": {h: {"torch": "2.13.0", "nccl": nccl} for h in NODES}}),
        CheckResult("BW001", "bw", status="passed", data={"ops": {"all_reduce": [
            {"size_B": 1024, "time_us": 20.0, "busbw_GBps": 0.1},
            {"size_B": 256 << 20, "time_us": 1500.0, "busbw_GBps": busbw}]}}),
        CheckResult("P2P001", "p2p", status="failed" if slow else "passed", findings=findings,
                    data={"matrix": _matrix(link), "latency": _matrix({k: 10.0 for k in link})}),
    ]
    return Report(run=RunInfo(nodes=NODES, world_size=3, duration_s=42.4), checks=checks, created=created,
                  ranks=[{"rank": i, "hostname": h} for i, h in enumerate(NODES)])


# -- drain reasons -------------------------------------------------------------------------------------
def test_drain_reason_round_trips_and_stays_one_parseable_line():
    text = format_reason("P2P001", 'node "x"\nis slow ' + "y" * 400)
    assert len(text) <= MAX_REASON and "\n" not in text and '"' not in text
    parsed = parse_reason(text)
    assert parsed.code == "P2P001" and parsed.summary.startswith("node 'x' is slow")
    assert parse_reason("Not responding") is None and parse_reason("ddpdoctor: lower001 x") is None
    with pytest.raises(ValueError):
        format_reason("bad code", "x")


def test_health_names_the_cause_first_and_a_missing_gloo_interface():
    f = gloo_ifname_findings("eth9", {"eth0": True, "lo": True}, "n1")
    assert [x.severity.value for x in f] == ["error"] and "n1 does not have" in f[0].message
    assert gloo_ifname_findings("eth0", {"eth0": True}, "n1") == []
    assert gloo_ifname_findings(None, {}, "n1") == []
    down = gloo_ifname_findings("eth0", {"eth0": False}, "n1")
    assert "down" in down[0].message
    col = CheckResult("COL001", "col", status="failed", findings=[Finding("COL001", "error", "wrong data")])
    env = CheckResult("ENV001", "env", status="failed", findings=f)
    assert drain_reason([col, env]).code == "ENV001"
    assert drain_reason([CheckResult("NVL001", "nvl", status="warning")]) is None
    slow = CheckResult("COL001", "col", status="timed_out", findings=[Finding("COL001", "error", "did not finish")])
    assert drain_reason([slow]) is None and unfinished([slow]) == [slow]  # unknown, not bad


# -- exit codes ----------------------------------------------------------------------------------------
def test_nagios_exit_codes():
    ok, warn = CheckResult("A001", "a", status="passed"), CheckResult("B001", "b", status="warning")
    bad = CheckResult("C001", "c", status="failed")
    assert [exit_code(outcome(c), "nagios") for c in ([ok], [ok, warn], [warn, bad])] == [0, 1, 2]
    assert exit_code("unknown", "nagios") == 3 and exit_code("unknown") == 2
    assert [exit_code(outcome(c)) for c in ([ok], [ok, warn], [warn, bad])] == [0, 0, 1]
    assert translate(2, "nagios") == 3 and translate(0, "nagios", warned=True) == 1 and translate(130, "nagios") == 130


# -- Prometheus text -----------------------------------------------------------------------------------
def test_metrics_parse_with_the_official_parser_and_carry_every_check_and_link():
    rep = _report(slow="gpu03")
    fams = {f.name: f for f in text_string_to_metric_families(render(rep))}
    bus = [s for s in fams["nccl_bus_bandwidth_gbs"].samples]
    assert {s.labels["collective"] for s in bus} == {"AllReduce"}
    big = [s for s in bus if s.labels["message_size"] == str(256 << 20)]
    assert {s.labels["node"] for s in big} == set(NODES) and all(s.value == 300.0 for s in big)
    assert set(big[0].labels) == {"collective", "message_size", "n_nodes", "nranks", "node"}
    assert big[0].labels["n_nodes"] == "3" and big[0].labels["nranks"] == "3"
    status = {(s.labels["check"], s.labels["node"]): s.value for s in fams["ddpdoctor_check_status"].samples}
    assert set(status) == {(c.code, n) for c in rep.checks for n in NODES}
    assert status["P2P001", "gpu03"] == 2 and status["P2P001", "gpu01"] == 0 and status["ENV001", "gpu03"] == 0
    links = {(s.labels["src"], s.labels["dst"]): s.value for s in fams["ddpdoctor_p2p_bandwidth_gbs"].samples}
    assert len(links) == 6 and links["r0@gpu01", "r2@gpu03"] == 1.0 and links["r0@gpu01", "r1@gpu02"] == 40.0
    assert fams["ddpdoctor_run_status"].samples[0].value == 2
    assert fams["ddpdoctor_run_duration_seconds"].samples[0].value == 42.4
    assert fams["ddpdoctor_run_timestamp_seconds"].samples[0].value == 1e9


def test_metrics_escape_label_values():
    rep = _report()
    rep.run.nodes = ['we"ird\\node']
    fams = {f.name: f for f in text_string_to_metric_families(render(rep))}
    assert {s.labels["node"] for s in fams["ddpdoctor_check_status"].samples} == {'we"ird\\node'}


# -- Kubernetes labels ---------------------------------------------------------------------------------
def test_k8s_labels_follow_the_syntax_rules_and_taint_only_the_failed_node():
    items = k8s_labels.node_labels(_report(slow="gpu02"), valid_for_s=86400)
    by = {it.node: it for it in items}
    for it in items:
        for k, v in it.labels.items():
            assert k8s_labels.label_key_problem(k) is None and k8s_labels.label_value_problem(v) is None, (k, v)
    assert by["gpu02"].labels["ddpdoctor.io/result"] == "fail" and by["gpu01"].labels["ddpdoctor.io/result"] == "pass"
    assert by["gpu02"].labels["ddpdoctor.io/failed-check"] == "P2P001"
    assert by["gpu02"].taint == "ddpdoctor.io/unhealthy=P2P001:NoSchedule" and by["gpu01"].taint is None
    assert by["gpu01"].labels["ddpdoctor.io/busbw-gbps"] == "300.0"
    assert by["gpu01"].labels["ddpdoctor.io/runtime-sec"] == "42"
    assert by["gpu01"].labels["ddpdoctor.io/valid-until"] == "20010910T0146Z"  # 1e9 s + 24 h, UTC
    lines = k8s_labels.kubectl_lines(items)
    assert "kubectl taint node gpu02 --overwrite ddpdoctor.io/unhealthy=P2P001:NoSchedule" in lines
    assert json.loads(json.dumps(k8s_labels.labels_json(items)))["nodes"][1]["node"] == "gpu02"


@pytest.mark.parametrize("key,ok", [("ddpdoctor.io/result", True), ("result", True), ("a" * 63, True),
                                    ("a" * 64, False), ("-x", False), ("Bad_Prefix/x", False), ("x/", False),
                                    ("ddpdoctor.io/x.y_z-1", True), ("/x", False)])
def test_label_key_rules(key, ok):
    assert (k8s_labels.label_key_problem(key) is None) is ok


@pytest.mark.parametrize("value,ok", [("", True), ("20261125T1600Z", True), ("1.5", True), ("a b", False),
                                      ("x:y", False), ("-a", False), ("a" * 64, False)])
def test_label_value_rules(value, ok):
    assert (k8s_labels.label_value_problem(value) is None) is ok


def test_kubernetes_manifests_parse():
    text = (REPO / "docs" / "kubernetes.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]
    docs = [d for b in blocks for d in yaml.safe_load_all(b) if d]
    kinds = {d["kind"] for d in docs}
    assert {"Job", "DaemonSet"} <= kinds, kinds
    for d in docs:
        if d["kind"] in ("Job", "DaemonSet") and "ddpdoctor.io" in yaml.safe_dump(d):
            cmd = " ".join(c for ctr in d["spec"]["template"]["spec"]["containers"] for c in ctr.get("command", []))
            assert "--k8s-labels" in cmd, d["metadata"]["name"]


# -- confirmation pass ---------------------------------------------------------------------------------
def test_confirmation_condemns_a_node_still_slow_and_spares_one_slow_once():
    first = _report(slow="gpu03")
    still = _report(slow="gpu03")
    still.checks[2].findings = []  # two nodes only: P2P001's own verdict cannot tell which end is slow
    still.checks[2].status = "passed"
    c = decide(first, still, "gpu03", "gpu01", ["P2P001"])
    assert c.condemned and c.reason.code == "P2P001" and "gpu03" in c.reason.text()
    c = decide(first, _report(), "gpu03", "gpu01", ["P2P001"])
    assert not c.condemned and "spared" in c.said
    assert not decide(first, None, "gpu03", "gpu01", ["P2P001"]).condemned


# -- diff ----------------------------------------------------------------------------------------------
def test_diff_names_a_busbw_drop_between_nccl_versions_and_nothing_else():
    th = Thresholds(busbw_large=1.1)  # a GPU cluster's noise line; the default is set for gloo on CPUs
    d = diff_reports(_report(busbw=371, nccl="2.21.5"), _report(busbw=304, nccl="2.23.4"), th)
    assert d.summary() == ("all_reduce busbw at 256 MiB fell 18 % (371 → 304 GB/s) between NCCL 2.21.5 and "
                           "2.23.4; nothing else changed")


def test_diff_of_equal_reports_is_quiet_and_a_slow_link_is_named():
    assert diff_reports(_report(), _report()).summary() == "nothing changed beyond noise"
    d = diff_reports(_report(), _report(slow="gpu02"))
    assert {c.kind for c in d.changes} == {"p2p"}, d.summary()  # P2P001's verdict speaks through its figures
    assert len(d.changes) == 4 and all("gpu02" in c.sentence and "fell 98 %" in c.sentence for c in d.changes)
    assert {c.kind for c in diff_reports(_report(slow="gpu02"), _report()).changes} == {"p2p"}


def test_diff_sees_through_a_slowdown_of_the_whole_machine_and_names_findings_that_come_and_go():
    slower = _report()
    for row in slower.checks[2].data["matrix"]["values"]:
        row[:] = [v / 3 if v else v for v in row]
    assert diff_reports(_report(), slower).changes == []  # every link fell alike: no one link is to blame
    new = _report()
    new.checks.append(CheckResult("NCCL001", "nccl", status="failed",
                                  findings=[Finding("NCCL001", "error", "NCCL_SOCKET_IFNAME=ib9 matches nothing",
                                                    where={"node": "gpu01"})]))
    assert diff_reports(_report(), new).summary() == ("new error NCCL001: NCCL_SOCKET_IFNAME=ib9 matches nothing; "
                                                      "nothing else changed")
    assert diff_reports(new, _report()).changes[0].sentence.startswith("gone: error NCCL001")


def test_diff_says_a_result_is_stale():
    old = _report(created=1000.0)
    old.run.history = {"valid_until": 2000.0}
    assert "OLD result is stale" in diff_reports(old, _report(), now=5000.0).summary()


def test_history_folder_and_diff_cli(tmp_path):
    from ddpdoctor.runtime.history_store import keep, last_two

    a = keep(tmp_path, _report(busbw=371, created=1000.0), 3600)
    b = keep(tmp_path, _report(busbw=304, created=2000.0), 3600)
    assert last_two(tmp_path) == (a, b)
    saved = json.loads(b.read_text())["run"]["history"]
    assert saved["nodes"] == sorted(NODES) and saved["versions"]["nccl"] == "2.21.5"
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "diff", "--bw-threshold", "1.1", str(tmp_path)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1 and "all_reduce busbw at 256 MiB fell 18 %" in p.stdout, p.stdout + p.stderr
    bad = subprocess.run([sys.executable, "-m", "ddpdoctor", "diff", str(a)], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "two reports" in bad.stderr


# -- usage errors: exit 2 (or 3, UNKNOWN, with --exit-codes nagios), nothing drained, nothing replaced --
def _cli(*argv, env=None):
    import os

    e = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    return subprocess.run([sys.executable, "-m", "ddpdoctor", *argv], capture_output=True, text=True, timeout=120,
                          env={**e, **(env or {})})


def test_health_usage_errors_never_drain(tmp_path):
    # SLURMD_NODENAME makes health drain on a node fault; scontrol here would fail loudly if it were called
    p = _cli("health", "--metrics", str(tmp_path / "nofolder" / "x.prom"), env={"SLURMD_NODENAME": "n1"})
    assert p.returncode == 2 and "does not exist" in p.stderr and "drain" not in p.stdout, p.stdout + p.stderr
    (tmp_path / "dir.prom").mkdir()
    p = _cli("health", "--exit-codes", "nagios", "--metrics", str(tmp_path / "dir.prom"))
    assert p.returncode == 3 and "is a folder" in p.stderr, p.stderr
    assert (tmp_path / "dir.prom").is_dir()


def test_health_finds_a_missing_interface_and_writes_its_metrics(tmp_path):
    prom = tmp_path / "h.prom"
    p = _cli("health", "--no-drain", "--no-collective", "--metrics", str(prom), "--exit-codes", "nagios",
             "--json", str(tmp_path / "h.json"), env={"GLOO_SOCKET_IFNAME": "nosuch9"})
    assert p.returncode == 2, p.stdout + p.stderr  # CRITICAL
    assert "ENV001 failed" in p.stdout and "nosuch9" in p.stdout
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    status = {s.labels["check"]: s.value for s in fams["ddpdoctor_check_status"].samples}
    assert status["ENV001"] == 2
    assert sorted(f.name for f in tmp_path.iterdir()) == ["h.json", "h.prom"]  # no temp file left
    rep = json.loads((tmp_path / "h.json").read_text())
    assert parse_reason(rep["run"]["drain_reason"]).code == "ENV001"
    ok = _cli("health", "--no-drain", "--no-collective")
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")  # silent on success


def test_check_drain_needs_slurm():
    p = _cli("check", "--drain", "--select", "ENV001")
    assert p.returncode == 2 and "srun" in p.stderr
    p = _cli("check", "--drain", "--exit-codes", "nagios")
    assert p.returncode == 3
