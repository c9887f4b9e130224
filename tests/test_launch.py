import pytest

from ddpdoctor.runtime.launch_plan import LaunchError, expand_slurm_nodelist, parse_endpoint, plan_launch


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
    env = {"SLURM_JOB_ID": "42", "SLURM_NODEID": "1", "SLURM_JOB_NUM_NODES": "3", "SLURM_STEP_ID": "0",
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


def _plan(env, **kw):
    args = dict(nodes=None, nproc_per_node=None, node_rank=None, rdzv_endpoint=None, rdzv_id=None,
                rdzv_timeout_s=30, env=env, default_nproc_per_node=2)
    args.update(kw)
    return plan_launch(**args)


def test_slurm_task_zero_prints_the_report_the_others_do_not():
    env = {"SLURM_JOB_ID": "7", "SLURM_NODEID": "1", "SLURM_PROCID": "1", "SLURM_JOB_NUM_NODES": "2",
           "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "n[1-2]"}
    plan = _plan(env)
    assert plan.prints_report is False and plan.endpoint_origin == "the first host of SLURM_JOB_NODELIST"
    assert _plan({**env, "SLURM_PROCID": "0", "SLURM_NODEID": "0"}).prints_report is True
    assert _plan({}).prints_report is True


def test_pytorchjob_master_and_worker():
    # What the training operator sets on a PyTorchJob's worker-0 (Master + 2 Workers, nprocPerNode 4)
    env = {"MASTER_ADDR": "train-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "12", "RANK": "1",
           "PET_NPROC_PER_NODE": "4", "PET_NODE_RANK": "1", "PET_NNODES": "3", "PYTHONUNBUFFERED": "0"}
    plan = _plan(env)
    assert (plan.nnodes, plan.node_rank, plan.nproc_per_node, plan.endpoint) == (3, 1, 4, "train-master-0:23456")
    assert plan.source == "kubernetes" and plan.is_host is False and plan.endpoint_origin == "MASTER_ADDR"
    assert _plan({**env, "PET_NODE_RANK": "0", "RANK": "0"}).is_host is True
    # flags still win over the job's variables
    assert _plan(env, nproc_per_node=1).nproc_per_node == 1
    # newer operators also set PET_MASTER_ADDR/PORT, "auto" leaves ranks per node to ddpdoctor
    newer = {**env, "PET_MASTER_ADDR": "m", "PET_MASTER_PORT": "29500", "PET_NPROC_PER_NODE": "auto"}
    plan = _plan(newer)
    assert (plan.endpoint, plan.nproc_per_node) == ("m:29500", 2)


def test_elastic_pytorchjob_and_indexed_job():
    elastic = {"PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "train-worker-0:29400", "PET_RDZV_ID": "job-1",
               "PET_NNODES": "2:2", "PET_NPROC_PER_NODE": "1", "PET_MAX_RESTARTS": "3"}
    plan = _plan(elastic)
    assert (plan.nnodes, plan.node_rank, plan.endpoint, plan.rdzv_id) == (2, None, "train-worker-0:29400", "job-1")
    assert plan.is_host is None  # torch decides who hosts, as torchrun does under the operator
    with pytest.raises(LaunchError, match="elastic range"):
        _plan({**elastic, "PET_NNODES": "1:4"})
    with pytest.raises(LaunchError, match="PET_RDZV_BACKEND=etcd"):
        _plan({**elastic, "PET_RDZV_BACKEND": "etcd"})
    indexed = {"PET_NNODES": "4", "JOB_COMPLETION_INDEX": "3", "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29400"}
    plan = _plan(indexed)
    assert (plan.nnodes, plan.node_rank, plan.endpoint) == (4, 3, "10.0.0.5:29400")


def test_bad_kubernetes_variables_are_named():
    with pytest.raises(LaunchError, match="PET_NODE_RANK='x'"):
        _plan({"PET_NNODES": "2", "PET_NODE_RANK": "x", "MASTER_ADDR": "m"})
    with pytest.raises(LaunchError, match="neither PET_RDZV_ENDPOINT nor MASTER_ADDR"):
        _plan({"PET_NNODES": "2", "PET_NODE_RANK": "0"})
    with pytest.raises(LaunchError, match="MASTER_ADDR.*port"):
        _plan({"PET_NNODES": "2", "PET_NODE_RANK": "0", "MASTER_ADDR": "m", "MASTER_PORT": "99999"})


def test_batch_script_of_a_multi_node_job_is_pointed_to_srun():
    # what sbatch -N2 gives its script (seen on the Slurm bed): no SLURM_STEP_ID
    env = {"SLURM_JOB_ID": "1", "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURM_JOB_NUM_NODES": "2",
           "SLURM_NNODES": "2", "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_JOB_NODELIST": "n[1-2]"}
    with pytest.raises(LaunchError, match="batch script of a 2-node Slurm job.*srun --ntasks-per-node=1"):
        _plan(env)
    one = {**env, "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "n1"}
    assert _plan(one).nnodes == 1  # a one-node batch job may run the check right in its script


def test_a_step_on_part_of_the_allocation_counts_its_own_nodes():
    # srun -N2 --exclude=ddpd-node0 inside a 3-node job, task 0 (seen on the Slurm bed)
    env = {"SLURM_JOB_ID": "1", "SLURM_STEP_ID": "0", "SLURM_JOB_NUM_NODES": "3", "SLURM_NNODES": "2",
           "SLURM_STEP_NUM_NODES": "2", "SLURM_NODEID": "0", "SLURM_PROCID": "0",
           "SLURM_JOB_NODELIST": "ddpd-node[0-2]", "SLURM_STEP_NODELIST": "ddpd-node[1-2]"}
    plan = _plan(env)
    assert (plan.nnodes, plan.node_rank, plan.endpoint_host) == (2, 0, "ddpd-node1")
    assert plan.endpoint_origin == "the first host of SLURM_STEP_NODELIST"
