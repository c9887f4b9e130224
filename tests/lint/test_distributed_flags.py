"""A project's own switch for a distributed run is read as one, whatever its spelling, and the
module alias ``dist`` is not."""

from ddpdoctor.script.names import is_distributed_flag


def test_switches_by_name():
    for name in ("distributed", "DIST_TRAIN", "use_dist", "is_ddp", "ddp_mode", "distributed_training", "USE_DDP"):
        assert is_distributed_flag(name), name


def test_not_switches():
    for name in ("dist", "distance", "dist_url", "ddp_model", "distributed_sampler", "world_size", "district"):
        assert not is_distributed_flag(name), name
