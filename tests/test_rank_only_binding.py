"""What DDP306 rests on, run for real: a local name bound under ``if rank == 0:`` and read after a
barrier that every rank reaches raises UnboundLocalError on the other ranks, whatever rank 0 wrote to
disk. Two gloo processes run the construct of a labelled trap row (the initial-weights file saved by
rank 0 and loaded by every rank after ``dist.barrier()``); benchmarks/label_errata.md cites this test
for that row."""

from __future__ import annotations

import textwrap

import pytest
from helpers import run_two_ranks

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():  # pragma: no cover - a torch built without distributed
    pytest.skip("torch.distributed is not available in this build", allow_module_level=True)

_WORKER = textwrap.dedent(
    """
    import os, sys, tempfile
    import torch, torch.distributed as dist

    def initial_weights(rank, log_dir):
        if rank == 0:
            ckpt_path = os.path.join(log_dir, "initial.ckpt")
            if not os.path.exists(ckpt_path):
                torch.save({"state_dict": {"w": torch.ones(1)}}, ckpt_path)
        dist.barrier()
        return torch.load(ckpt_path, map_location="cpu")

    rank = int(sys.argv[2])
    dist.init_process_group("gloo", init_method=sys.argv[1], rank=rank, world_size=2)
    try:
        initial_weights(rank, sys.argv[3])
        print("loaded")
    except UnboundLocalError as e:
        print("UnboundLocalError", e)
    sys.stdout.flush()
    os._exit(0)  # (no C++ teardown: see tests/test_ddp_sync_semantics.py)
    """
)


def test_name_bound_on_rank0_only_is_unbound_on_rank1(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    outs = [out.strip().splitlines()[-1] for out in run_two_ranks(script, str(tmp_path))]
    assert outs[0] == "loaded"
    assert outs[1].startswith("UnboundLocalError"), outs[1]
