import pytest

from ddpdoctor.launch import LaunchError, expand_slurm_nodelist, parse_endpoint, plan_launch


def test_parse_endpoint_forms():
    assert parse_endpoint("10.0.0.1:1234") == ("10.0.0.1", 1234)
    assert parse_endpoint("node01") == ("node01", 29400)
    assert parse_endpoint("[fe80::1]:99") == ("fe80::1", 99)
    for bad in ("", "host:0", "host:70000", "host:abc", "fe80::1:99"):
        with pytest.raises(LaunchError):
            parse_endpoint(bad)


def test_slurm_nodelist_expansion_keeps_padding():
    assert expand_slurm_nodelist("node[01-03,07],gpu5") == ["node01", "node02", "node03", "node07", "gpu5"]
    assert expand_slurm_nodelist("a1,b[9-10]") == ["a1", "b9", "b10"]
    with pytest.raises(LaunchError):
        expand_slurm_nodelist("x[5-2]")


def test_local_default_picks_a_free_port_and_hosts():
    plan = plan_launch(nodes=None, nproc_per_node=2, node_rank=None, rdzv_endpoint=None, rdzv_id=None,
                       rdzv_timeout_s=30, env={})
    assert plan.nnodes == 1 and plan.endpoint_host == "127.0.0.1" and plan.is_host
    argv = plan.torchrun_argv(["--config", "c.json"])
    assert argv[1:3] == ["-m", "torch.distributed.run"]
    assert "--rdzv-backend" in argv and argv[argv.index("--rdzv-backend") + 1] == "c10d"
    assert argv[argv.index("--nnodes") + 1] == "1:1"
    assert "join_timeout=30" in argv[argv.index("--rdzv-conf") + 1]
    assert argv[-4:] == ["-m", "ddpdoctor.runtime.worker", "--config", "c.json"]


def test_multi_node_needs_an_endpoint():
    with pytest.raises(LaunchError, match="--rdzv-endpoint"):
        plan_launch(nodes=2, nproc_per_node=1, node_rank=0, rdzv_endpoint=None, rdzv_id=None,
                    rdzv_timeout_s=30, env={})


def test_node_rank_decides_who_hosts():
    kw = dict(nodes=2, nproc_per_node=1, rdzv_endpoint="127.0.0.1:5555", rdzv_id=None, rdzv_timeout_s=30, env={})
    assert plan_launch(node_rank=0, **kw).is_host is True
    assert plan_launch(node_rank=1, **kw).is_host is False
    assert plan_launch(node_rank=None, **kw).is_host is None
    with pytest.raises(LaunchError, match="outside"):
        plan_launch(node_rank=2, **kw)


def test_slurm_environment():
    env = {"SLURM_JOB_ID": "42", "SLURM_NODEID": "1", "SLURM_JOB_NUM_NODES": "3",
           "SLURM_JOB_NODELIST": "gpu[07-09]"}
    plan = plan_launch(nodes=None, nproc_per_node=8, node_rank=None, rdzv_endpoint=None, rdzv_id=None,
                       rdzv_timeout_s=30, env=env)
    assert (plan.nnodes, plan.node_rank, plan.endpoint_host, plan.rdzv_id) == (3, 1, "gpu07", "slurm-42")
    assert plan.is_host is False and plan.source == "slurm"


def test_slurm_with_several_tasks_per_node_is_refused():
    env = {"SLURM_JOB_ID": "1", "SLURM_NODEID": "0", "SLURM_STEP_ID": "0", "SLURM_NTASKS_PER_NODE": "8",
           "SLURM_JOB_NODELIST": "n1"}
    with pytest.raises(LaunchError, match="one ddpdoctor task per node"):
        plan_launch(nodes=None, nproc_per_node=1, node_rank=None, rdzv_endpoint=None, rdzv_id=None,
                    rdzv_timeout_s=30, env=env)
