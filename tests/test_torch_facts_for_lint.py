"""What DDP430, DDP432 and DDP433 rest on, run against the installed torch: os.environ refuses a
number, the env:// rendezvous refuses a MASTER_PORT above 65535 before it opens any socket, and
DistributedDataParallel refuses a module with no parameter that requires a gradient."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():  # pragma: no cover - a torch built without distributed
    pytest.skip("torch.distributed is not available in this build", allow_module_level=True)


def test_a_number_put_into_os_environ_raises_type_error():
    with pytest.raises(TypeError):
        os.environ["DDPDOCTOR_TEST_PORT"] = 12355  # type: ignore[assignment]


def test_env_rendezvous_refuses_a_port_above_65535():
    code = textwrap.dedent(
        """
        import torch.distributed as dist
        try:
            dist.init_process_group("gloo", init_method="env://", rank=0, world_size=1)
        except ValueError as e:
            print("refused:", e)
        else:
            print("accepted")
        """
    )
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "80000"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "refused:" in out.stdout and "65535" in out.stdout, out.stdout + out.stderr


def test_ddp_refuses_a_module_with_no_trainable_parameter():
    code = textwrap.dedent(
        """
        import torch, torch.distributed as dist
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
        m = torch.nn.Linear(2, 2)
        for p in m.parameters():
            p.requires_grad = False
        try:
            torch.nn.parallel.DistributedDataParallel(m)
        except RuntimeError as e:
            print("refused:", e)
        else:
            print("accepted")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "refused:" in out.stdout and "requires a gradient" in out.stdout, out.stdout + out.stderr
